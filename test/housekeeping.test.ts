/**
 * DESIGN.md §11: with several workers one keeps house. Every serving process re-reads the signing keys; only the
 * housekeeper sweeps the store and writes the key_rotation audit line, once per change whichever housekeeper sees it.
 * Processes are played here by key rings on one store, with short timers (a real sweep runs every 60 s, a real key
 * reload every 10 s).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { KEY_TIMING, KeyRing, retireKey, rotateKeys } from '../src/crypto/keys.js';
import { startHousekeeping } from '../src/housekeeping.js';
import { MemoryStore } from '../src/store/memory.js';

const TIMING = { ...KEY_TIMING, reloadMs: 20 };

/** One serving process: its key ring on the shared store, its sweeps counted, its log lines kept. */
async function servingProcess(store: MemoryStore, housekeeper: boolean) {
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
  const sweeps: number[] = [];
  const counted = { sweep: (now: number) => (sweeps.push(now), store.sweep(now)), recordKeyEvents: store.recordKeyEvents.bind(store) };
  const keys = await KeyRing.open(store, { timing: TIMING });
  const stop = startHousekeeping({ store: counted, keys, logger, housekeeper, sweepIntervalMs: 20 });
  return { keys, lines, sweeps, stop };
}

const audited = (lines: readonly Record<string, unknown>[]) => lines.filter((line) => line.audit === true && line.event === 'key_rotation');
const sorted = (kids: unknown): string[] => [...(kids as string[])].sort();

/** Waits until every ring publishes `kids`. */
async function untilPublished(rings: readonly KeyRing[], kids: readonly string[]): Promise<void> {
  const publishes = (ring: KeyRing): boolean => kids.every((kid) => ring.current.byKid.has(kid));
  for (let i = 0; i < 100 && !rings.every(publishes); i += 1) await sleep(20);
  assert.ok(rings.every(publishes), 'every ring re-read the keys');
}

test('only the housekeeper sweeps and audits a key rotation; every process publishes the new keys', async () => {
  const store = new MemoryStore();
  const keeper = await servingProcess(store, true);
  const other = await servingProcess(store, false);
  try {
    const rotated = (await rotateKeys(store, Date.now())).map((key) => key.kid);
    await untilPublished([keeper.keys, other.keys], rotated);
    await sleep(100);

    assert.equal(audited(keeper.lines).length, 1);
    assert.deepEqual(sorted(audited(keeper.lines)[0]?.published), sorted(rotated));
    assert.deepEqual(audited(other.lines), [], 'no audit line from a process that does not keep house');
    assert.ok(keeper.sweeps.length >= 2, `the housekeeper swept ${keeper.sweeps.length} times`);
    assert.deepEqual(other.sweeps, [], 'the other never swept');
  } finally {
    keeper.stop();
    other.stop();
  }
  const swept = keeper.sweeps.length;
  await sleep(100);
  assert.equal(keeper.sweeps.length, swept, 'stopped: no sweep after');
});

test('two housekeepers at once (the old and the new during a reload, or two instances) write one line per change between them', async () => {
  const store = new MemoryStore();
  const first = await servingProcess(store, true);
  const second = await servingProcess(store, true);
  try {
    await sleep(60);
    assert.deepEqual([...audited(first.lines), ...audited(second.lines)], [], 'the keys the server started with are no change');
    const rotated = (await rotateKeys(store, Date.now())).map((key) => key.kid);
    await untilPublished([first.keys, second.keys], rotated);
    await sleep(100);
    const lines = [...audited(first.lines), ...audited(second.lines)];
    assert.equal(lines.length, 1, 'one line for the rotation');
    assert.deepEqual(sorted(lines[0]?.published), sorted(rotated));
    assert.deepEqual(lines[0]?.signing, [], 'the new keys sign only after their lead time');
  } finally {
    first.stop();
    second.stop();
  }
});

test('a change made while no housekeeper ran is written by the next one when it starts', async () => {
  const store = new MemoryStore();
  const before = await servingProcess(store, true);
  await sleep(60);
  before.stop();
  // The new keys sign at once here (no lead), so the old ones may be retired while no housekeeper runs.
  const now = Date.now();
  const old = (await store.listKeys()).map((key) => key.kid);
  const rotated = (await rotateKeys(store, now - KEY_TIMING.leadMs - TIMING.reloadMs - 1)).map((key) => key.kid);
  for (const kid of old) assert.deepEqual(await retireKey(store, kid, now, TIMING), { ok: true });

  const after = await servingProcess(store, true);
  try {
    for (let i = 0; i < 50 && audited(after.lines).length === 0; i += 1) await sleep(20);
    await sleep(60);
    assert.deepEqual(audited(before.lines), []);
    const lines = audited(after.lines);
    assert.equal(lines.length, 1, 'one line, written at start');
    assert.deepEqual(sorted(lines[0]?.published), sorted(rotated));
    assert.deepEqual(sorted(lines[0]?.signing), sorted(rotated));
    assert.deepEqual(sorted(lines[0]?.unpublished), sorted(old));
  } finally {
    after.stop();
  }
});

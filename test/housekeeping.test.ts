/**
 * DESIGN.md §11: with several workers one keeps house. Every serving process re-reads the signing keys; only the
 * housekeeper sweeps the store and writes the key_rotation audit line. Two processes are played here by two key rings
 * on one store, with short timers (a real sweep runs every 60 s, a real key reload every 10 s).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { KEY_TIMING, KeyRing, rotateKeys } from '../src/crypto/keys.js';
import { startHousekeeping } from '../src/housekeeping.js';
import { MemoryStore } from '../src/store/memory.js';

const TIMING = { ...KEY_TIMING, reloadMs: 20 };

/** One serving process: its key ring on the shared store, its sweeps counted, its log lines kept. */
async function servingProcess(store: MemoryStore, housekeeper: boolean) {
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
  const sweeps: number[] = [];
  const counted = { sweep: (now: number) => (sweeps.push(now), store.sweep(now)) };
  const keys = await KeyRing.open(store, { timing: TIMING });
  const stop = startHousekeeping({ store: counted, keys, logger, housekeeper, sweepIntervalMs: 20 });
  return { keys, lines, sweeps, stop };
}

test('only the housekeeper sweeps and audits a key rotation; every process publishes the new keys', async () => {
  const store = new MemoryStore();
  const keeper = await servingProcess(store, true);
  const other = await servingProcess(store, false);
  try {
    const rotated = (await rotateKeys(store, Date.now())).map((key) => key.kid);
    const publishes = (ring: KeyRing): boolean => rotated.every((kid) => ring.current.byKid.has(kid));
    for (let i = 0; i < 100 && !(publishes(keeper.keys) && publishes(other.keys)); i += 1) await sleep(20);
    assert.ok(publishes(keeper.keys) && publishes(other.keys), 'both re-read the keys');
    await sleep(100);

    const audited = (lines: Record<string, unknown>[]) => lines.filter((line) => line.audit === true && line.event === 'key_rotation');
    assert.equal(audited(keeper.lines).length, 1);
    assert.deepEqual([...(audited(keeper.lines)[0]?.published as string[])].sort(), [...rotated].sort());
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

/** The in-memory failure limiter (DESIGN.md §7): memory bounded whatever keys an attacker sends. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { keysHeld } from './helpers/limiter.js';
import { FixedWindowLimiter, MAX_HANDED_WINDOWS } from '../src/http/rate-limit.js';

/** Checks a handover, then takes it in (how many windows changed); a malformed one throws, changing nothing. */
function takeOver(taker: FixedWindowLimiter, handed: unknown, now: number): number {
  const take = taker.acceptHandover(handed, now);
  if (take === undefined) throw new TypeError('the handed-over limiter windows are malformed');
  return take();
}

describe('FixedWindowLimiter', () => {
  test('counts per key within a window, and starts over when it ends', () => {
    const limiter = new FixedWindowLimiter(1000);
    for (let i = 0; i < 3; i++) limiter.hit('a', 0);
    assert.equal(limiter.check('a', 3, 10).limited, true);
    assert.equal(limiter.check('a', 4, 10).limited, false);
    assert.equal(limiter.check('b', 1, 10).limited, false);
    assert.equal(limiter.check('a', 3, 1000).limited, false, 'the window ended');
    assert.equal(limiter.check('a', 3, 500).retryAfterSeconds, 1);
  });

  test('a 64 KiB key is held as a short digest and still counted as itself', () => {
    const limiter = new FixedWindowLimiter(60_000);
    const long = 'x'.repeat(64 * 1024);
    limiter.hit(long, 0);
    limiter.hit(long, 0);
    assert.equal(limiter.check(long, 2, 1).limited, true);
    assert.equal(limiter.check(`${long}y`, 1, 1).limited, false, 'another long key is another counter');
    const stored = keysHeld(limiter);
    assert.ok(stored.every((key) => key.length <= 128), 'no stored key is longer than 128 characters');
  });

  test('a spray of distinct keys never holds more than the cap, and recent keys keep counting', () => {
    const cap = 1000;
    const limiter = new FixedWindowLimiter(60_000, cap);
    for (let i = 0; i < 20 * cap; i++) limiter.hit(`client:${i}`, i);
    assert.ok(keysHeld(limiter).length <= cap, `held ${keysHeld(limiter).length}`);
    limiter.hit('recent', 20 * cap);
    limiter.hit('recent', 20 * cap);
    assert.equal(limiter.check('recent', 2, 20 * cap + 1).limited, true);
  });
});

describe('FixedWindowLimiter handover (DESIGN.md §11: a worker that starts later takes the live counts)', () => {
  test('a snapshot holds the live windows only: key, count and end', () => {
    const limiter = new FixedWindowLimiter(1000);
    limiter.hit('old', 0);
    limiter.hit('live', 600);
    limiter.hit('live', 700);
    assert.deepEqual(limiter.snapshot(1100), [['live', 2, 1600]], 'ended windows are left out');
  });

  test('taking over: per key the larger count with its end; a replayed count is not counted twice; ended windows are dropped', () => {
    const giver = new FixedWindowLimiter(1000);
    for (let i = 0; i < 5; i++) giver.hit('ip:a', 100);
    giver.hit('ip:b', 200);
    giver.hit('ip:gone', 0);
    const taker = new FixedWindowLimiter(1000);
    // Calls replayed to the new worker before the snapshot came: 'ip:a' is in both, 'ip:c' only here.
    taker.hit('ip:a', 100);
    for (let i = 0; i < 3; i++) taker.hit('ip:b', 200);
    taker.hit('ip:c', 300);
    const taken = takeOver(taker, giver.snapshot(500), 1000);
    assert.equal(taken, 1, 'only ip:a changed');
    assert.equal(taker.check('ip:a', 5, 1000).limited, true, 'the giver\'s 5');
    assert.equal(taker.check('ip:a', 6, 1000).limited, false, 'not 5 + 1');
    assert.equal(taker.check('ip:b', 3, 1000).limited, true, 'its own 3 stay');
    assert.equal(taker.check('ip:b', 4, 1000).limited, false);
    assert.equal(taker.check('ip:c', 1, 1000).limited, true);
    assert.equal(taker.check('ip:a', 1, 1100).limited, false, 'the window ends when the giver\'s did');
    assert.deepEqual(keysHeld(taker).sort(), ['ip:a', 'ip:b', 'ip:c'], 'a window that ended meanwhile (ip:gone, at 1000) is not kept');
  });

  test('a window handed over never runs longer than the taker\'s own window', () => {
    const taker = new FixedWindowLimiter(1000);
    takeOver(taker, [['ip:a', 3, 10 ** 12]], 0);
    assert.equal(taker.check('ip:a', 3, 999).limited, true);
    assert.equal(taker.check('ip:a', 3, 1000).limited, false);
  });

  test('anything but a snapshot is refused whole and changes nothing', () => {
    const taker = new FixedWindowLimiter(1000);
    taker.hit('ip:kept', 0);
    const malformed: unknown[] = [
      undefined,
      {},
      'ip:a',
      [['ip:a', 2]],
      [['ip:a', 2, 500, 'extra']],
      [['ip:a', 2, 500], ['ip:b', '2', 500]],
      [['ip:a', 0, 500]],
      [['ip:a', 1.5, 500]],
      [['ip:a', 2, Number.NaN]],
      [['ip:a', 2, Number.POSITIVE_INFINITY]],
      [['', 2, 500]],
      [['x'.repeat(129), 2, 500]],
      Array.from({ length: MAX_HANDED_WINDOWS + 1 }, (_, i) => [`k${i}`, 1, 500]),
    ];
    for (const handed of malformed) assert.throws(() => takeOver(taker, handed, 0), TypeError, JSON.stringify(handed)?.slice(0, 80));
    assert.deepEqual(keysHeld(taker), ['ip:kept']);
  });

  test('the entry bound holds after a handover, the newest windows kept, and a snapshot is bounded with the highest counts first', () => {
    const cap = 100;
    const taker = new FixedWindowLimiter(60_000, cap);
    for (let i = 0; i < cap; i++) taker.hit(`own:${i}`, 1000 + i);
    takeOver(taker, Array.from({ length: 3 * cap }, (_, i) => [`handed:${i}`, 1, 70_000 + i] as const), 1000 + cap);
    const held = keysHeld(taker);
    assert.equal(held.length, cap);
    assert.ok(held.every((key) => key.startsWith('handed:')) && held.includes(`handed:${3 * cap - 1}`), 'the windows ending last are kept');

    const sprayed = new FixedWindowLimiter(60_000);
    for (let i = 0; i < 50; i++) sprayed.hit(`spray:${i}`, 0);
    for (let i = 0; i < 4; i++) sprayed.hit('ip:attacker', 0);
    const snapshot = sprayed.snapshot(1, 10);
    assert.equal(snapshot.length, 10);
    assert.deepEqual(snapshot[0], ['ip:attacker', 4, 60_000], 'the key nearest its limit is never the one left out');
  });
});

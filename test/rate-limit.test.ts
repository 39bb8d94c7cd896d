/** The in-memory failure limiter (DESIGN.md §7): memory bounded whatever keys an attacker sends. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { keysHeld } from './helpers/limiter.js';
import { FixedWindowLimiter } from '../src/http/rate-limit.js';

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

/**
 * DESIGN.md §11 "Limits across workers", in one process: limiters joined by a hub that delivers as the primary does
 * (every message to every other member, in order), and the primary's fan-out and restart backoff on their own.
 */
import assert from 'node:assert/strict';
import type { Worker } from 'node:cluster';
import { describe, test } from 'node:test';
import { FixedWindowLimiter } from '../src/http/rate-limit.js';
import {
  fanOutLimiterMessage,
  isHandoverMessage,
  isLimiterMessage,
  relayHandover,
  sharedLimiter,
  takeOverAll,
  type HandoverMessage,
  type HandsOver,
  type LimiterLink,
  type LimiterMessage,
} from '../src/http/shared-limiter.js';
import { RestartBackoff } from '../src/supervisor.js';

/** Workers on one primary: what one sends reaches the others when `deliver()` runs (messages in flight until then). */
class Hub {
  readonly sent: LimiterMessage[] = [];
  readonly #members: { listener?: (message: LimiterMessage) => void; queue: LimiterMessage[] }[] = [];

  link(): LimiterLink {
    const member: { listener?: (message: LimiterMessage) => void; queue: LimiterMessage[] } = { queue: [] };
    this.#members.push(member);
    return {
      send: (message) => {
        // Structured clone, as cluster IPC copies: nothing is shared by reference.
        const copy = structuredClone(message);
        this.sent.push(copy);
        for (const other of this.#members) if (other !== member) other.queue.push(copy);
      },
      subscribe: (listener) => (member.listener = listener),
    };
  }

  deliver(): void {
    for (const member of this.#members) {
      for (const message of member.queue.splice(0)) member.listener?.(message);
    }
  }
}

describe('shared limiter', () => {
  test('a hit at one worker is counted at every other; checks stay local and send nothing', () => {
    const hub = new Hub();
    const workers = [0, 1, 2].map(() => sharedLimiter('failures', new FixedWindowLimiter(60_000), hub.link(), { replayed: ['hit'] }));
    const [first, second, third] = workers as [FixedWindowLimiter, FixedWindowLimiter, FixedWindowLimiter];
    const now = 1_000_000;
    for (let i = 0; i < 3; i += 1) first.hit('ip:192.0.2.1', now);
    second.hit('ip:192.0.2.1', now);
    assert.equal(first.check('ip:192.0.2.1', 4, now).limited, false, 'the other worker\'s hit is still in flight');
    hub.deliver();
    for (const worker of workers) assert.equal(worker.check('ip:192.0.2.1', 4, now).limited, true, 'server-wide: 4 failures');
    assert.equal(third.check('ip:192.0.2.1', 5, now).limited, false, 'and no more than 4');
    assert.deepEqual(new Set(hub.sent.map((message) => message.method)), new Set(['hit']), 'checks are not sent');
    assert.equal(hub.sent.length, 4);
  });

  test('the window a worker started ends at the same time everywhere (the caller\'s now travels with the call)', () => {
    const hub = new Hub();
    const [a, b] = [0, 1].map(() => sharedLimiter('failures', new FixedWindowLimiter(1000), hub.link(), { replayed: ['hit'] })) as [FixedWindowLimiter, FixedWindowLimiter];
    a.hit('k', 5000);
    hub.deliver();
    assert.equal(b.check('k', 1, 5999).limited, true);
    assert.equal(b.check('k', 1, 6000).limited, false);
  });

  test('only the listed methods travel: other calls stay local, and a message naming any other method is ignored', () => {
    const hub = new Hub();
    const sender = sharedLimiter('failures', new FixedWindowLimiter(60_000), hub.link(), { replayed: ['hit'] });
    const receiver = sharedLimiter('failures', new FixedWindowLimiter(60_000), hub.link(), { replayed: ['hit'] });
    sender.acceptHandover([['ip:a', 3, 60_000]], 0)?.();
    sender.snapshot(0);
    assert.equal(hub.sent.length, 0, 'a handover taken through the proxy is not sent');
    const forged = (method: string, args: unknown[]): LimiterMessage => ({ pinpoint: 'limiter', limiter: 'failures', origin: 'elsewhere', method, args });
    const link = hub.link();
    for (const message of [forged('constructor', []), forged('acceptHandover', [[['ip:b', 9, 60_000]], 0]), forged('toString', [])]) link.send(message);
    assert.doesNotThrow(() => hub.deliver());
    assert.equal(receiver.check('ip:b', 1, 1).limited, false, 'nothing but hit is applied');
  });

  test('another limiter\'s messages are ignored', () => {
    const hub = new Hub();
    const failures = sharedLimiter('failures', new FixedWindowLimiter(60_000), hub.link(), { replayed: ['hit'] });
    const other = sharedLimiter('registrations', new FixedWindowLimiter(60_000), hub.link(), { replayed: ['hit'] });
    failures.hit('k', 0);
    hub.deliver();
    assert.equal(other.check('k', 1, 0).limited, false);
  });

  test('the primary passes a message to every other connected worker, never back to its sender', () => {
    const received: number[] = [];
    const worker = (id: number, connected = true): Worker =>
      ({ id, isConnected: () => connected, send: () => received.push(id) }) as unknown as Worker;
    const sender = worker(1);
    const message: LimiterMessage = { pinpoint: 'limiter', limiter: 'failures', origin: '1.0', method: 'hit', args: ['k', 0] };
    fanOutLimiterMessage(message, sender, [sender, worker(2), worker(3, false), worker(4)]);
    assert.deepEqual(received, [2, 4]);
  });
});

describe('handing counts to a worker that starts later', () => {
  test('a shared limiter gives the link its own limiter, so what it takes over is not replayed to the others', () => {
    const hub = new Hub();
    const given = new Map<string, HandsOver>();
    const link: LimiterLink = { ...hub.link(), handOver: (name, limiter) => void given.set(name, limiter) };
    hub.link();
    const local = new FixedWindowLimiter(60_000);
    const shared = sharedLimiter('failures', local, link, { replayed: ['hit'] });
    assert.equal(given.get('failures'), local);
    given.get('failures')?.acceptHandover([['ip:a', 3, 60_000]], 0)?.();
    assert.equal(shared.check('ip:a', 3, 1).limited, true);
    shared.snapshot(1);
    assert.equal(hub.sent.length, 0, 'neither the takeover nor a snapshot is sent');
  });

  test('a handover with one malformed part changes no limiter: every part is checked before any is taken', () => {
    const failures = new FixedWindowLimiter(60_000);
    const logins = new FixedWindowLimiter(60_000);
    const limiters = new Map<string, HandsOver>([['failures', failures], ['logins', logins]]);
    const malformed = takeOverAll(limiters, { failures: [['ip:a', 3, 60_000]], logins: [['user:b', 'two', 60_000]] }, 7, 0);
    assert.deepEqual(malformed, { outcome: 'malformed' });
    assert.deepEqual(failures.snapshot(1), [], 'the well-formed part was not taken either');
    assert.deepEqual(takeOverAll(limiters, { failures: [['ip:a', 3, 60_000]], logins: [['user:b', 2, 60_000]] }, 7, 0), { outcome: 'taken', giver: 7, windows: 2 });
    assert.equal(failures.check('ip:a', 3, 1).limited, true);
  });

  test('replayed calls and handover messages are checked field by field', () => {
    const call = { pinpoint: 'limiter', limiter: 'failures', origin: '1.0', method: 'hit', args: ['k', 0] };
    assert.equal(isLimiterMessage(call), true);
    for (const wrong of [{ ...call, method: 7 }, { ...call, args: 'k' }, { ...call, limiter: undefined }, null, 'limiter']) {
      assert.equal(isLimiterMessage(wrong), false, JSON.stringify(wrong));
    }
    const good: unknown[] = [
      { pinpoint: 'limits-wanted' },
      { pinpoint: 'limits-asked', for: 4 },
      { pinpoint: 'limits', for: 4, limiters: {} },
      { pinpoint: 'limits', for: 4, giver: 1234, limiters: { failures: [['ip:a', 1, 5]] } },
    ];
    for (const message of good) assert.equal(isHandoverMessage(message), true, JSON.stringify(message));
    const bad: unknown[] = [
      { pinpoint: 'limits-asked' },
      { pinpoint: 'limits-asked', for: 1.5 },
      { pinpoint: 'limits', for: 4 },
      { pinpoint: 'limits', for: 4, limiters: [] },
      { pinpoint: 'limits', for: 4, limiters: null },
      { pinpoint: 'limits', for: '4', limiters: {} },
      { pinpoint: 'limits', for: 4, giver: 'me', limiters: {} },
      { pinpoint: 'limits-given' },
      undefined,
    ];
    for (const message of bad) assert.equal(isHandoverMessage(message), false, JSON.stringify(message));
  });

  test('the primary asks the longest-serving other worker, answers at once when none serves, and passes an answer only to the worker it is for', () => {
    const received: [number, HandoverMessage][] = [];
    const worker = (id: number, connected = true): Worker =>
      ({ id, isConnected: () => connected, send: (message: HandoverMessage) => received.push([id, message]) }) as unknown as Worker;
    const [first, second, gone, starting] = [worker(1), worker(2), worker(3, false), worker(4)];
    const all = [first, second, gone, starting];

    relayHandover({ pinpoint: 'limits-wanted' }, starting, [gone, first, second], all);
    assert.deepEqual(received.splice(0), [[1, { pinpoint: 'limits-asked', for: 4 }]], 'the first connected serving worker');

    relayHandover({ pinpoint: 'limits-wanted' }, starting, [], all);
    assert.deepEqual(received.splice(0), [[4, { pinpoint: 'limits', for: 4, limiters: {} }]], 'nobody to ask: nothing to take');

    relayHandover({ pinpoint: 'limits-wanted' }, starting, [starting], all);
    assert.deepEqual(received.splice(0), [[4, { pinpoint: 'limits', for: 4, limiters: {} }]], 'never itself');

    const answer: HandoverMessage = { pinpoint: 'limits', for: 4, giver: 111, limiters: { failures: [] } };
    relayHandover(answer, first, [first], all);
    assert.deepEqual(received.splice(0), [[4, answer]]);

    relayHandover({ pinpoint: 'limits', for: 3, giver: 111, limiters: {} }, first, [first], all);
    relayHandover({ pinpoint: 'limits-asked', for: 1 }, starting, [first], all);
    assert.deepEqual(received, [], 'nothing for a disconnected worker; a worker cannot ask another for counts');
  });
});

describe('restart backoff', () => {
  test('doubles from 100 ms up to 10 s while workers die young, gives up after 10 in a row, starts afresh after a long life', () => {
    const backoff = new RestartBackoff();
    const delays = Array.from({ length: 10 }, () => backoff.next(50));
    assert.deepEqual(delays, [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000, 10_000]);
    assert.equal(backoff.next(50), undefined, 'the 11th young death in a row: give up');
    const fresh = new RestartBackoff();
    fresh.next(10);
    fresh.next(10);
    assert.equal(fresh.next(60_000), 100, 'a worker that served a while resets the count');
  });
});

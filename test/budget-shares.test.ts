/**
 * DESIGN.md §11: a failure limit holds for the whole server, not per worker. Each worker holds its share of a budget and
 * asks the primary for more (budget-shares.ts). Here the primary's BudgetPool and each worker's RequestsInFlight and
 * failure limiter are the real ones; only the cluster channel between them is a queue that delivers each message on a
 * later turn of the event loop, in order, as node:cluster's IPC does. Over real workers: test/workers*.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { BudgetPool, baseShare, windowAt, workerBudgetLink, type BudgetAnswer, type BudgetAsk, type BudgetLink, type BudgetRecall, type BudgetReleased } from '../src/http/budget-shares.js';
import { admitRequest, countFailure, RequestsInFlight, type Admission, type FailureLimits } from '../src/http/failure-limit.js';
import { FixedWindowLimiter } from '../src/http/rate-limit.js';
import { sharedLimiter, type LimiterLink, type LimiterMessage } from '../src/http/shared-limiter.js';

const WINDOW_MS = 60_000;

/** The real clock moved to the middle of its minute, so no test here runs across the shares' window boundary. */
function midWindowClock(): () => number {
  const start = Date.now();
  const offset = (windowAt(start, WINDOW_MS) + 0.5) * WINDOW_MS - start;
  return () => Date.now() + offset;
}

interface SimulatedWorker {
  readonly id: number;
  readonly limiter: FixedWindowLimiter;
  readonly inFlight: RequestsInFlight;
  /** Messages this worker's channel has carried, by kind. */
  readonly sent: Map<string, number>;
  /** The keys of its asks. */
  readonly askedKeys: string[];
  readonly now: () => number;
}

/** W workers and their primary, each message delivered on a later turn, in order per channel. */
function simulatedCluster(workers: number): { readonly members: SimulatedWorker[]; readonly pool: BudgetPool; stop(id: number): void } {
  const answerHandlers = new Map<number, (message: BudgetAnswer | BudgetRecall) => void>();
  const limiterListeners = new Map<number, (message: LimiterMessage) => void>();
  const connected = new Set<number>();
  const now = midWindowClock();
  const pool = new BudgetPool(
    {
      workers: () => workers,
      connected: () => [...connected],
      send: (id, message) => void nextTurn().then(() => answerHandlers.get(id)?.(message)),
    },
    undefined,
    now,
  );
  const members = Array.from({ length: workers }, (_, id): SimulatedWorker => {
    const sent = new Map<string, number>();
    const askedKeys: string[] = [];
    const count = (kind: string): void => void sent.set(kind, (sent.get(kind) ?? 0) + 1);
    let nextAsk = 0;
    const asks = new Map<number, (units: number) => void>();
    let release: (key: string, limit: number, window: number) => number = () => 0;
    answerHandlers.set(id, (message) => {
      if (message.pinpoint === 'budget-answer') {
        asks.get(message.ask)?.(message.units);
        asks.delete(message.ask);
        return;
      }
      const units = release(message.key, message.limit, message.window);
      count('budget-released');
      void nextTurn().then(() => pool.released(id, { pinpoint: 'budget-released', recall: message.recall, key: message.key, window: message.window, units }));
    });
    const budgets: BudgetLink = {
      ask(key, limit, window, want) {
        count('budget-ask');
        askedKeys.push(key);
        const ask = nextAsk++;
        return new Promise((resolve) => {
          asks.set(ask, resolve);
          void nextTurn().then(() => pool.ask(id, { pinpoint: 'budget-ask', ask, key, limit, window, want }));
        });
      },
      onRecall: (handler) => void (release = handler),
    };
    const link: LimiterLink = {
      send: (message) => {
        count('limiter');
        for (const [other, listener] of limiterListeners) if (other !== id) void nextTurn().then(() => listener(message));
      },
      subscribe: (listener) => void limiterListeners.set(id, listener),
      budgets,
    };
    const limiter = sharedLimiter(`failures`, new FixedWindowLimiter(WINDOW_MS), link, { replayed: ['hit'] });
    connected.add(id);
    return { id, limiter, inFlight: new RequestsInFlight(workers, { windowMs: WINDOW_MS, link: budgets, now }), sent, askedKeys, now };
  });
  return { members, pool, stop: (id) => connected.delete(id) };
}

/** Admits a request at `member` and, once let in, fails it after `turns` turns of the event loop (its asynchronous work). */
async function failingRequest(member: SimulatedWorker, limits: FailureLimits, address: string, clientId: string | undefined, turns = 1): Promise<boolean> {
  const admitting = admitRequest(member.limiter, member.inFlight, limits, { address, clientId, fetches: () => 0 }, member.now);
  const admission: Admission = admitting instanceof Promise ? await admitting : admitting;
  if (!admission.ok) {
    assert.equal(admission.error.status, 429);
    return false;
  }
  for (let turn = 0; turn < turns; turn += 1) await nextTurn();
  admission.settle('failed', member.now());
  return true;
}

/** Admits a good request at `member` and answers it after a turn. */
async function goodRequest(member: SimulatedWorker, limits: FailureLimits, address: string): Promise<boolean> {
  const admitting = admitRequest(member.limiter, member.inFlight, limits, { address, clientId: 'c', fetches: () => 0 }, member.now);
  const admission = admitting instanceof Promise ? await admitting : admitting;
  if (!admission.ok) return false;
  await nextTurn();
  admission.settle('done', member.now());
  return true;
}

const CLIENT_FIVE: FailureLimits = { addressFailures: 300, clientFailures: 5 };

describe('failure budgets split among workers (simulated cluster, real pool and limiters)', () => {
  for (const workers of [2, 4]) {
    test(`${workers} workers, client_failures = 5: 40 parallel failures at each worker let at most 5 through in all`, async () => {
      const { members } = simulatedCluster(workers);
      // Failures that take no I/O (a wrong secret) and ones that take a few turns (a forged assertion's check).
      for (const turns of [0, 3]) {
        const address = `198.51.100.${turns + workers}`;
        const outcomes = await Promise.all(members.flatMap((member) => Array.from({ length: 40 }, () => failingRequest(member, CLIENT_FIVE, address, 'limited', turns))));
        const through = outcomes.filter(Boolean).length;
        assert.ok(through >= 1 && through <= Math.max(5, workers), `failures let through with ${turns} turns each: ${through}`);
      }
    });
  }

  test('one client failing one request after another at one worker gets exactly 5 failures, then 429: the others give their shares back', async () => {
    const { members } = simulatedCluster(2);
    const [first] = members as [SimulatedWorker, SimulatedWorker];
    const outcomes: boolean[] = [];
    for (let i = 0; i < 7; i += 1) outcomes.push(await failingRequest(first, CLIENT_FIVE, '198.51.100.20', 'sequential'));
    assert.deepEqual(outcomes, [true, true, true, true, true, false, false]);
    assert.ok((first.sent.get('budget-ask') ?? 0) >= 3, 'beyond its own share, the worker asked the primary');
  });

  test('one after another, alternating between 2 workers: exactly 5 failures, then 429 at both', async () => {
    const { members } = simulatedCluster(2);
    const outcomes: boolean[] = [];
    for (let i = 0; i < 8; i += 1) outcomes.push(await failingRequest(members[i % 2] as SimulatedWorker, CLIENT_FIVE, '198.51.100.21', 'alternating'));
    assert.deepEqual(outcomes, [true, true, true, true, true, false, false, false]);
  });

  test('an address failing at another client does not take this client\'s share: budgets are per key', async () => {
    const { members } = simulatedCluster(2);
    const [first] = members as [SimulatedWorker, SimulatedWorker];
    for (let i = 0; i < 5; i += 1) assert.equal(await failingRequest(first, CLIENT_FIVE, '198.51.100.22', 'one'), true);
    assert.equal(await failingRequest(first, CLIENT_FIVE, '198.51.100.22', 'one'), false);
    assert.equal(await failingRequest(first, CLIENT_FIVE, '198.51.100.22', 'other'), true);
  });

  test('good requests are never refused: 30 at once at each of 2 workers with address_failures = 5 all start, some after waiting for room', async () => {
    const { members } = simulatedCluster(2);
    const limits: FailureLimits = { addressFailures: 5, clientFailures: 5 };
    const outcomes = await Promise.all(members.flatMap((member) => Array.from({ length: 30 }, () => goodRequest(member, limits, '198.51.100.23'))));
    assert.equal(outcomes.filter(Boolean).length, 60);
  });

  test('a good address keeps every request on its worker: nothing is sent to the primary while it stays within its share', async () => {
    const { members } = simulatedCluster(2);
    const [first] = members as [SimulatedWorker, SimulatedWorker];
    for (let round = 0; round < 20; round += 1) {
      const outcomes = await Promise.all(Array.from({ length: 16 }, () => goodRequest(first, { addressFailures: 300, clientFailures: 300 }, '198.51.100.24')));
      assert.ok(outcomes.every(Boolean));
    }
    assert.equal(first.sent.get('budget-ask') ?? 0, 0);
    assert.equal(first.sent.get('limiter') ?? 0, 0, 'and nothing counted');
  });

  test('a client_id of 60,000 characters is kept as a bounded key: what the worker keeps and asks about stays small', async () => {
    const { members } = simulatedCluster(2);
    const [first] = members as [SimulatedWorker, SimulatedWorker];
    const outcomes: boolean[] = [];
    for (let i = 0; i < 6; i += 1) outcomes.push(await failingRequest(first, CLIENT_FIVE, '198.51.100.26', 'x'.repeat(60_000)));
    assert.deepEqual(outcomes, [true, true, true, true, true, false]);
    assert.ok(first.askedKeys.length > 0 && first.askedKeys.every((key) => key.length <= 128), first.askedKeys.map((key) => key.length).join(' '));
  });

  test('requests waiting for room share one ask: 300 good requests at once beyond a share of 5 send few asks, not one each', async () => {
    const { members } = simulatedCluster(2);
    const [first] = members as [SimulatedWorker, SimulatedWorker];
    const limits: FailureLimits = { addressFailures: 10, clientFailures: 300 };
    const outcomes = await Promise.all(Array.from({ length: 300 }, () => goodRequest(first, limits, '198.51.100.27')));
    assert.equal(outcomes.filter(Boolean).length, 300);
    const asks = first.sent.get('budget-ask') ?? 0;
    assert.ok(asks >= 1 && asks <= 30, `asks: ${asks}`);
  });

  test('a request sharing another\'s ask waits no longer than its own deadline', async () => {
    const silent: BudgetLink = { ask: () => new Promise(() => undefined), onRecall: () => undefined };
    const inFlight = new RequestsInFlight(2, { windowMs: WINDOW_MS, link: silent });
    const now = Date.now();
    const first = inFlight.ask('k', 5, 0, now, 500).then((end) => ['first', end]);
    const joiner = inFlight.ask('k', 5, 0, now, 20).then((end) => ['joiner', end]);
    assert.deepEqual(await Promise.race([first, joiner]), ['joiner', 'none']);
    assert.deepEqual(await first, ['first', 'none']);
  });

  test('a new window starts every share afresh: a worker whose share was spent has room again', () => {
    let clock = (windowAt(Date.now(), WINDOW_MS) + 0.5) * WINDOW_MS;
    const inFlight = new RequestsInFlight(2, { windowMs: WINDOW_MS, now: () => clock });
    inFlight.spend('k', 2, 5, clock);
    assert.equal(inFlight.room('k', 5, 0, 0, clock), 'full', 'its share of 2 is spent (no primary to ask)');
    clock += WINDOW_MS;
    assert.equal(inFlight.room('k', 5, 0, 0, clock), 'start');
    assert.equal(inFlight.spent('k', clock), 0);
  });

  test('a client whose share is spent is refused at once, with the share window\'s end as Retry-After, even after its counts\' window ended', async () => {
    let clock = (windowAt(Date.now(), WINDOW_MS) + 0.5) * WINDOW_MS;
    const none: BudgetLink = { ask: async () => 0, onRecall: () => undefined };
    const inFlight = new RequestsInFlight(2, { windowMs: WINDOW_MS, link: none, now: () => clock });
    // The counts' window (10 s here) ends before the shares' minute does.
    const limiter = new FixedWindowLimiter(10_000);
    const limits: FailureLimits = { addressFailures: 300, clientFailures: 4 };
    for (let i = 0; i < 2; i += 1) {
      const admission = await admitRequest(limiter, inFlight, limits, { address: '198.51.100.28', clientId: 'spent', fetches: () => 0 }, () => clock);
      assert.equal(admission.ok, true);
      if (admission.ok) admission.settle('failed', clock);
    }
    clock += 11_000;
    const started = performance.now();
    const refused = await admitRequest(limiter, inFlight, limits, { address: '198.51.100.28', clientId: 'spent', fetches: () => 0 }, () => clock);
    assert.ok(performance.now() - started < 1000, 'not held until the admission deadline');
    assert.equal(refused.ok, false);
    if (refused.ok) return;
    assert.equal(refused.error.headers['Retry-After'], '19');
  });

  test('a failure no admission counted (a malformed body) is counted in the worker\'s share as in the server-wide counts', () => {
    const now = (windowAt(Date.now(), WINDOW_MS) + 0.5) * WINDOW_MS;
    const limiter = new FixedWindowLimiter(WINDOW_MS);
    const inFlight = new RequestsInFlight(2, { windowMs: WINDOW_MS, now: () => now });
    for (let i = 0; i < 2; i += 1) countFailure(limiter, inFlight, { addressFailures: 5 }, '198.51.100.29', 400, now);
    assert.equal(limiter.counted('ip:198.51.100.29', now), 2);
    assert.equal(inFlight.spent('ip:198.51.100.29', now), 2);
    assert.equal(inFlight.room('ip:198.51.100.29', 5, 2, 0, now), 'full', 'its share of 2 is spent');
  });

  test('a worker the primary no longer reaches is not recalled: its share stays unused, on the safe side', async () => {
    const { members, stop } = simulatedCluster(3);
    const [first, , third] = members as [SimulatedWorker, SimulatedWorker, SimulatedWorker];
    // The third worker is gone from the primary's view (exited) before anyone asks.
    stop(third.id);
    const outcomes: boolean[] = [];
    for (let i = 0; i < 6; i += 1) outcomes.push(await failingRequest(first, { addressFailures: 300, clientFailures: 6 }, '198.51.100.25', 'three'));
    // Its own 2, the second worker's 2 given back; the third's 2 stay with it (unused: the limit errs on the safe side).
    assert.deepEqual(outcomes, [true, true, true, true, false, false]);
  });
});

describe('BudgetPool, the primary\'s part', () => {
  const window = windowAt(Date.now(), WINDOW_MS);
  type Sent = [number, BudgetAnswer | BudgetRecall];

  /** A primary on a clock that stands still unless a test moves it. */
  function pool(workers: number, connected: number[] = Array.from({ length: workers }, (_, id) => id)): { pool: BudgetPool; sent: Sent[]; clock: { now: number } } {
    const sent: Sent[] = [];
    const clock = { now: window * WINDOW_MS + 1000 };
    return { pool: new BudgetPool({ workers: () => workers, connected: () => connected, send: (id, message) => void sent.push([id, message]) }, undefined, () => clock.now), sent, clock };
  }

  test('each worker\'s base share is max(1, floor(limit / workers)); the primary starts with the rest', () => {
    assert.equal(baseShare(5, 2), 2);
    assert.equal(baseShare(300, 2), 150);
    assert.equal(baseShare(5, 8), 1);
    assert.equal(baseShare(5, 1), 5);
    const { pool: primary, sent } = pool(2);
    primary.ask(0, { pinpoint: 'budget-ask', ask: 1, key: 'k', limit: 5, window, want: 1 });
    assert.deepEqual(sent, [[0, { pinpoint: 'budget-answer', ask: 1, key: 'k', window, units: 1 }]]);
  });

  test('with nothing left it recalls from every serving worker, then hands out what came back, in the order asked', () => {
    const { pool: primary, sent } = pool(2);
    primary.ask(0, { pinpoint: 'budget-ask', ask: 1, key: 'k', limit: 4, window, want: 1 });
    primary.ask(0, { pinpoint: 'budget-ask', ask: 2, key: 'k', limit: 4, window, want: 1 });
    assert.deepEqual(
      sent.map(([id, message]) => [id, message.pinpoint]),
      [
        [0, 'budget-recall'],
        [1, 'budget-recall'],
      ],
    );
    const recall = (sent[0] as Sent)[1] as BudgetRecall;
    primary.released(0, { pinpoint: 'budget-released', recall: recall.recall, key: 'k', window, units: 0 });
    primary.released(1, { pinpoint: 'budget-released', recall: recall.recall, key: 'k', window, units: 1 });
    assert.deepEqual(sent.slice(2), [
      [0, { pinpoint: 'budget-answer', ask: 1, key: 'k', window, units: 1 }],
      [0, { pinpoint: 'budget-answer', ask: 2, key: 'k', window, units: 0 }],
    ]);
  });

  test('a worker that exits during a recall is not waited for', () => {
    const { pool: primary, sent } = pool(2);
    primary.ask(0, { pinpoint: 'budget-ask', ask: 1, key: 'k', limit: 2, window, want: 1 });
    const recall = (sent[0] as Sent)[1] as BudgetRecall;
    primary.released(0, { pinpoint: 'budget-released', recall: recall.recall, key: 'k', window, units: 0 });
    primary.gone(1);
    assert.deepEqual(sent.at(-1), [0, { pinpoint: 'budget-answer', ask: 1, key: 'k', window, units: 0 }]);
  });

  test('asks for an ended window get nothing; a new window forgets the old ones', () => {
    const { pool: primary, sent } = pool(2);
    primary.ask(0, { pinpoint: 'budget-ask', ask: 1, key: 'k', limit: 5, window: window + 1, want: 1 });
    primary.ask(0, { pinpoint: 'budget-ask', ask: 2, key: 'k', limit: 5, window, want: 1 });
    assert.deepEqual(sent, [
      [0, { pinpoint: 'budget-answer', ask: 1, key: 'k', window: window + 1, units: 1 }],
      [0, { pinpoint: 'budget-answer', ask: 2, key: 'k', window, units: 0 }],
    ]);
  });

  test('memory is bounded: beyond its entry bound the primary hands out nothing for new keys', () => {
    const sent: Sent[] = [];
    const primary = new BudgetPool({ workers: () => 2, connected: () => [], send: (id, message) => void sent.push([id, message]) }, 10);
    for (let i = 0; i < 12; i += 1) primary.ask(0, { pinpoint: 'budget-ask', ask: i, key: `k${i}`, limit: 5, window, want: 1 });
    assert.deepEqual(
      sent.map(([, message]) => (message as BudgetAnswer).units),
      [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0],
    );
  });

  test('an exited worker\'s asks are dropped: what a recall brings back goes to the living', () => {
    const { pool: primary, sent } = pool(3, [0, 2]);
    primary.ask(1, { pinpoint: 'budget-ask', ask: 7, key: 'k', limit: 3, window, want: 1 });
    primary.ask(2, { pinpoint: 'budget-ask', ask: 8, key: 'k', limit: 3, window, want: 1 });
    primary.gone(1);
    const recall = (sent[0] as Sent)[1] as BudgetRecall;
    primary.released(0, { pinpoint: 'budget-released', recall: recall.recall, key: 'k', window, units: 1 });
    primary.released(2, { pinpoint: 'budget-released', recall: recall.recall, key: 'k', window, units: 0 });
    assert.deepEqual(
      sent.filter(([, message]) => message.pinpoint === 'budget-answer'),
      [[2, { pinpoint: 'budget-answer', ask: 8, key: 'k', window, units: 1 }]],
    );
  });

  test('a recall that found nothing is not repeated for a while, longer each time; units given back unasked end the quiet', () => {
    const { pool: primary, sent, clock } = pool(2);
    primary.ask(0, { pinpoint: 'budget-ask', ask: 1, key: 'k', limit: 2, window, want: 1 });
    const recall = (sent[0] as Sent)[1] as BudgetRecall;
    primary.released(0, { pinpoint: 'budget-released', recall: recall.recall, key: 'k', window, units: 0 });
    primary.released(1, { pinpoint: 'budget-released', recall: recall.recall, key: 'k', window, units: 0 });
    const recalls = (): number => sent.filter(([, message]) => message.pinpoint === 'budget-recall').length;
    assert.equal(recalls(), 2);
    for (let ask = 2; ask < 50; ask += 1) primary.ask(0, { pinpoint: 'budget-ask', ask, key: 'k', limit: 2, window, want: 1 });
    assert.equal(recalls(), 2, 'no recall storm');
    // 50 ms later it recalls again; found nothing, it then waits 100 ms.
    clock.now += 50;
    primary.ask(0, { pinpoint: 'budget-ask', ask: 100, key: 'k', limit: 2, window, want: 1 });
    assert.equal(recalls(), 4);
    const again = (sent.at(-1) as Sent)[1] as BudgetRecall;
    for (const worker of [0, 1]) primary.released(worker, { pinpoint: 'budget-released', recall: again.recall, key: 'k', window, units: 0 });
    clock.now += 99;
    primary.ask(0, { pinpoint: 'budget-ask', ask: 101, key: 'k', limit: 2, window, want: 1 });
    assert.equal(recalls(), 4, 'the quiet doubled');
    primary.released(1, { pinpoint: 'budget-released', key: 'k', window, units: 1 });
    primary.ask(0, { pinpoint: 'budget-ask', ask: 50, key: 'k', limit: 2, window, want: 1 });
    assert.deepEqual(sent.at(-1), [0, { pinpoint: 'budget-answer', ask: 50, key: 'k', window, units: 1 }]);
  });
});

describe('workerBudgetLink, a worker\'s end of the channel', () => {
  test('a grant that comes after its ask stopped waiting is given back to the primary, so no unit is lost', async () => {
    const sent: (BudgetAsk | BudgetReleased)[] = [];
    const link = workerBudgetLink((message) => void sent.push(message), 10);
    const connected = Object.getOwnPropertyDescriptor(process, 'connected');
    Object.defineProperty(process, 'connected', { value: true, configurable: true });
    try {
      const window = windowAt(Date.now(), WINDOW_MS);
      assert.equal(await link.ask('late-key', 5, window, 1), undefined, 'no answer in time');
      const ask = sent[0] as BudgetAsk;
      process.emit('message', { pinpoint: 'budget-answer', ask: ask.ask, key: 'late-key', window, units: 1 } satisfies BudgetAnswer, undefined);
      assert.deepEqual(sent[1], { pinpoint: 'budget-released', key: 'late-key', window, units: 1 });
    } finally {
      if (connected === undefined) delete (process as { connected?: boolean }).connected;
      else Object.defineProperty(process, 'connected', connected);
    }
  });
});

/**
 * Each worker's share of the failure budgets (DESIGN.md §11), so that a limit holds for the whole server even for a
 * burst that one worker answers before the others' counts reach it. In each window, a budget of `limit` is split: every
 * one of the W workers may have max(1, floor(limit / W)) requests in flight or spent (failed, fetched, kept) without
 * asking anyone; the rest stays with the primary, which hands it out on asking and, when it has none, recalls what the
 * workers hold unused. Units only move (a grant to a worker, a release to the primary), so one window never has more
 * than max(limit, W) in flight or spent across the server. Windows are aligned to the clock, so every process agrees.
 */
import { isRecord, isWholeNumber } from './message-shapes.js';
import { makeRoom, MAX_ENTRIES } from './rate-limit.js';

/** A worker asks the primary for `want` more units of `key`'s budget in `window`. */
export interface BudgetAsk {
  readonly pinpoint: 'budget-ask';
  readonly ask: number;
  readonly key: string;
  readonly limit: number;
  readonly window: number;
  readonly want: number;
}

/** The primary's answer to ask `ask`: `units` of `key` in `window` given (0: none to spare). */
export interface BudgetAnswer {
  readonly pinpoint: 'budget-answer';
  readonly ask: number;
  readonly key: string;
  readonly window: number;
  readonly units: number;
}

/** The primary asks every worker to give back what it holds of `key`'s budget in `window` and does not use. */
export interface BudgetRecall {
  readonly pinpoint: 'budget-recall';
  readonly recall: number;
  readonly key: string;
  readonly limit: number;
  readonly window: number;
}

/** A worker gives back `units` of `key` in `window` (no longer its own): its answer to recall `recall`, or unasked. */
export interface BudgetReleased {
  readonly pinpoint: 'budget-released';
  readonly recall?: number;
  readonly key: string;
  readonly window: number;
  readonly units: number;
}

export type BudgetMessage = BudgetAsk | BudgetAnswer | BudgetRecall | BudgetReleased;

/** Keys reach here bounded (rate-limit.ts boundedKey), so one longer than that is no key of ours. */
const isKey = (value: unknown): value is string => typeof value === 'string' && value.length > 0 && value.length <= 256;

export const isBudgetAsk = (message: unknown): message is BudgetAsk =>
  isRecord(message) && message.pinpoint === 'budget-ask' && isWholeNumber(message.ask) && isKey(message.key) && isWholeNumber(message.limit) && isWholeNumber(message.window) && isWholeNumber(message.want);
export const isBudgetAnswer = (message: unknown): message is BudgetAnswer =>
  isRecord(message) && message.pinpoint === 'budget-answer' && isWholeNumber(message.ask) && isKey(message.key) && isWholeNumber(message.window) && isWholeNumber(message.units);
export const isBudgetRecall = (message: unknown): message is BudgetRecall =>
  isRecord(message) && message.pinpoint === 'budget-recall' && isWholeNumber(message.recall) && isKey(message.key) && isWholeNumber(message.limit) && isWholeNumber(message.window);
export const isBudgetReleased = (message: unknown): message is BudgetReleased =>
  isRecord(message) &&
  message.pinpoint === 'budget-released' &&
  (message.recall === undefined || isWholeNumber(message.recall)) &&
  isKey(message.key) &&
  isWholeNumber(message.window) &&
  isWholeNumber(message.units);

/** What each of `workers` may hold of a budget of `limit` without asking: its share, one at least. */
export const baseShare = (limit: number, workers: number): number => (workers <= 1 ? limit : Math.max(1, Math.floor(limit / workers)));

/** The window (numbered from the epoch) that `now` falls in: every process computes the same one. */
export const windowAt = (now: number, windowMs: number): number => Math.floor(now / windowMs);

/** How a worker reaches the primary's part of the budgets. */
export interface BudgetLink {
  /** Asks for `want` more units of `key` in `window`; resolves with how many were given, or undefined without an answer in ASK_TIMEOUT_MS. */
  ask(key: string, limit: number, window: number, want: number): Promise<number | undefined>;
  /** `release(key, limit, window)` answers the primary's recalls: the units given back. */
  onRecall(release: (key: string, limit: number, window: number) => number): void;
}

/** After the primary had none to spare for a key, how long a worker takes that as the answer before asking again. */
export const ASK_AGAIN_MS = 50;
/** How long a request waits for the primary's answer to an ask before it takes none (a grant that comes later is given back). */
export const ASK_TIMEOUT_MS = 1000;

interface Share {
  readonly window: number;
  readonly base: number;
  /** Units this worker holds in the window: its base share, plus grants, less releases. */
  allowance: number;
  /** Units used for good in the window: failures, fetches, requests that kept something. */
  spent: number;
  /** Until when an ask is answered 0 without asking: the primary had none to spare a moment ago. */
  noneUntil: number;
}

export interface BudgetSharesOptions {
  readonly now: () => number;
  /** This worker's requests of a key in flight, which a recall leaves it. */
  readonly inFlightOf: (key: string) => number;
  readonly maxEntries?: number;
}

/** One worker's side: its shares of the budgets, kept for keys that have spent, asked or been recalled in this window. */
export class BudgetShares {
  readonly #shares = new Map<string, Share>();
  /** One ask per key and window at a time: every request that needs more of a key waits for the same answer. */
  readonly #asking = new Map<string, Promise<number>>();
  #latestWindow = 0;

  constructor(
    private readonly workers: number,
    private readonly windowMs: number,
    private readonly link: BudgetLink | undefined,
    private readonly options: BudgetSharesOptions,
  ) {
    link?.onRecall((key, limit, window) => this.#release(key, limit, window));
  }

  /** Whether `using` more units (in flight, or counted now) fit in what this worker holds of `key`'s budget. */
  hasRoom(key: string, limit: number, using: number, now: number): boolean {
    return this.#shortfall(key, limit, using, now) <= 0;
  }

  /** Whether there is a primary to ask for more. */
  get canAsk(): boolean {
    return this.link !== undefined;
  }

  /** Counts `units` of `key`'s budget as used for good in this window (a failure, a fetch, something kept). */
  spend(key: string, units: number, limit: number, now: number): void {
    this.#own(key, limit, windowAt(now, this.windowMs)).spent += units;
  }

  /** Units of `key` this worker has used for good in the window of `now`. */
  spent(key: string, now: number): number {
    return this.#current(key, now)?.spent ?? 0;
  }

  /** Milliseconds until the window of `now` ends, when every share starts afresh. */
  windowEndsIn(now: number): number {
    return (windowAt(now, this.windowMs) + 1) * this.windowMs - now;
  }

  /** Asks the primary for what `using` more units of `key` need beyond this worker's share; resolves with how many came. */
  ask(key: string, limit: number, using: number, now: number): Promise<number> {
    const link = this.link;
    if (link === undefined) return Promise.resolve(0);
    const window = windowAt(now, this.windowMs);
    const share = this.#own(key, limit, window);
    if (share.noneUntil > now) return Promise.resolve(0);
    const asking = `${window}:${key}`;
    const pending = this.#asking.get(asking);
    if (pending !== undefined) return pending;
    const asked = link.ask(key, limit, window, Math.max(1, this.#shortfall(key, limit, using, now))).then((units) => {
      this.#asking.delete(asking);
      const current = this.#shares.get(key);
      // A grant for a window that has ended is worth nothing: its units stay out of use, which errs on the safe side.
      if (current === undefined || current.window !== window || units === undefined) return 0;
      if (units === 0) current.noneUntil = this.options.now() + ASK_AGAIN_MS;
      current.allowance += units;
      return units;
    });
    this.#asking.set(asking, asked);
    return asked;
  }

  /** How many units `using` more of `key` need beyond what this worker holds (0 or less: none). */
  #shortfall(key: string, limit: number, using: number, now: number): number {
    const current = this.#current(key, now);
    return (current?.spent ?? 0) + using + 1 - (current?.allowance ?? baseShare(limit, this.workers));
  }

  /** The kept share of `key` in the window of `now`, if any (one of an ended window may linger until the next is kept). */
  #current(key: string, now: number): Share | undefined {
    const share = this.#shares.get(key);
    return share !== undefined && share.window === windowAt(now, this.windowMs) ? share : undefined;
  }

  /** Gives back what this worker holds of `key` in `window` and neither spent nor has in flight. */
  #release(key: string, limit: number, window: number): number {
    if (window !== windowAt(this.options.now(), this.windowMs)) return 0;
    const share = this.#own(key, limit, window);
    const unused = Math.max(0, share.allowance - share.spent - this.options.inFlightOf(key));
    share.allowance -= unused;
    return unused;
  }

  /** The kept share of `key` in `window`, started from the base share when there is none. */
  #own(key: string, limit: number, window: number): Share {
    if (window > this.#latestWindow) {
      // A new window: every share kept is of an ended one.
      this.#latestWindow = window;
      this.#shares.clear();
    }
    // An ended window's share is nobody's: what is done to it is dropped.
    if (window < this.#latestWindow) return { window, base: 0, allowance: 0, spent: 0, noneUntil: 0 };
    let share = this.#shares.get(key);
    if (share !== undefined) return share;
    const max = this.options.maxEntries ?? MAX_ENTRIES;
    // Full: first the shares that carry nothing (dropped, each would start again as it is); then the oldest, which an
    // attacker spraying keys from many addresses can reset, as it can the limiter's own windows.
    if (this.#shares.size >= max) makeRoom(this.#shares, max, (kept, keptKey) => kept.spent === 0 && kept.allowance === kept.base && this.options.inFlightOf(keptKey) === 0);
    const base = baseShare(limit, this.workers);
    share = { window, base, allowance: base, spent: 0, noneUntil: 0 };
    this.#shares.set(key, share);
    return share;
  }
}

/** How the primary reaches its workers. */
export interface BudgetPeers {
  /** How many workers the budgets are split among (the configured count). */
  workers(): number;
  /** The ids of the workers that can answer a recall now. */
  connected(): readonly number[];
  send(worker: number, message: BudgetAnswer | BudgetRecall): void;
}

/** How long the primary waits for every worker's answer to a recall before it hands out what came back. */
export const RECALL_TIMEOUT_MS = 250;

interface PendingAsk {
  readonly worker: number;
  readonly ask: number;
  readonly want: number;
}

interface PoolEntry {
  readonly key: string;
  readonly window: number;
  /** Units the primary holds: what no worker's share took, and what workers gave back. */
  units: number;
  readonly asks: PendingAsk[];
  recall?: { readonly id: number; readonly waiting: Set<number>; readonly timer: NodeJS.Timeout };
  /** Until when asks are answered from what the primary holds, without a recall: the last ones found nothing unused. */
  quietUntil: number;
  /** How long the next quiet lasts: doubled by each recall that finds nothing, up to MAX_QUIET_MS. */
  quietMs: number;
}

/** The longest the primary goes without recalling a key whose recalls keep finding nothing. */
export const MAX_QUIET_MS = 1000;

/** The primary's side: what no worker holds of each budget, handed out on asking, recalled when there is none. */
export class BudgetPool {
  readonly #entries = new Map<string, PoolEntry>();
  #nextRecall = 0;
  #latestWindow = 0;

  constructor(
    private readonly peers: BudgetPeers,
    private readonly maxEntries = MAX_ENTRIES,
    private readonly now: () => number = Date.now,
  ) {}

  ask(worker: number, message: BudgetAsk): void {
    const entry = this.#entry(message.key, message.limit, message.window);
    if (entry === undefined) return this.#answer(worker, message.ask, message.key, message.window, 0);
    entry.asks.push({ worker, ask: message.ask, want: Math.max(1, message.want) });
    this.#serve(entry, message.limit);
  }

  released(worker: number, message: BudgetReleased): void {
    const entry = this.#entries.get(message.key);
    if (entry === undefined || entry.window !== message.window) return;
    // Given back even when late or unasked: the worker no longer counts them as its own.
    entry.units += message.units;
    if (message.units > 0) Object.assign(entry, { quietUntil: 0, quietMs: ASK_AGAIN_MS });
    if (entry.recall === undefined || entry.recall.id !== message.recall) return;
    entry.recall.waiting.delete(worker);
    if (entry.recall.waiting.size === 0) this.#endRecall(entry);
  }

  /** A worker that exited answers no recall and takes no grant: nobody waits for it, nothing is handed to it. */
  gone(worker: number): void {
    for (const entry of this.#entries.values()) {
      for (let index = entry.asks.length - 1; index >= 0; index -= 1) if (entry.asks[index]?.worker === worker) entry.asks.splice(index, 1);
      if (entry.recall?.waiting.delete(worker) === true && entry.recall.waiting.size === 0) this.#endRecall(entry);
    }
  }

  #serve(entry: PoolEntry, limit: number): void {
    if (entry.recall !== undefined) return;
    this.#grant(entry);
    if (entry.asks.length === 0) return;
    const waiting = new Set(this.peers.connected());
    // A recall that found nothing a moment ago would find nothing now: asks that come meanwhile get none at once.
    if (waiting.size === 0 || entry.quietUntil > this.now()) return this.#refuseRest(entry);
    const id = this.#nextRecall++;
    entry.recall = { id, waiting, timer: setTimeout(() => this.#endRecall(entry), RECALL_TIMEOUT_MS) };
    for (const worker of waiting) this.peers.send(worker, { pinpoint: 'budget-recall', recall: id, key: entry.key, limit, window: entry.window });
  }

  #endRecall(entry: PoolEntry): void {
    if (entry.recall === undefined) return;
    clearTimeout(entry.recall.timer);
    entry.recall = undefined;
    if (entry.units === 0) {
      entry.quietUntil = this.now() + entry.quietMs;
      entry.quietMs = Math.min(MAX_QUIET_MS, entry.quietMs * 2);
    }
    this.#grant(entry);
    this.#refuseRest(entry);
  }

  #grant(entry: PoolEntry): void {
    while (entry.units > 0 && entry.asks.length > 0) {
      const pending = entry.asks.shift() as PendingAsk;
      const units = Math.min(pending.want, entry.units);
      entry.units -= units;
      this.#answer(pending.worker, pending.ask, entry.key, entry.window, units);
    }
  }

  #refuseRest(entry: PoolEntry): void {
    for (const pending of entry.asks.splice(0)) this.#answer(pending.worker, pending.ask, entry.key, entry.window, 0);
  }

  #answer(worker: number, ask: number, key: string, window: number, units: number): void {
    this.peers.send(worker, { pinpoint: 'budget-answer', ask, key, window, units });
  }

  /** The entry of `key` in `window`, started with what the workers' base shares leave; undefined when none can be kept. */
  #entry(key: string, limit: number, window: number): PoolEntry | undefined {
    if (window > this.#latestWindow) {
      this.#latestWindow = window;
      this.#forgetAll();
    }
    if (window < this.#latestWindow) return undefined;
    let entry = this.#entries.get(key);
    if (entry !== undefined) return entry;
    // Beyond the bound nothing is handed out: a limit then errs on the safe side.
    if (this.#entries.size >= this.maxEntries) return undefined;
    const workers = this.peers.workers();
    entry = { key, window, units: Math.max(0, limit - workers * baseShare(limit, workers)), asks: [], quietUntil: 0, quietMs: ASK_AGAIN_MS };
    this.#entries.set(key, entry);
    return entry;
  }

  /** A new window: every entry is of an ended one; a recall still waiting answers its asks first. */
  #forgetAll(): void {
    for (const entry of this.#entries.values()) this.#endRecall(entry);
    this.#entries.clear();
  }
}

/**
 * In a cluster worker: asks and what is given back go to the primary through `send` (the worker's IPC channel to it);
 * a grant that comes after its ask stopped waiting is given back at once.
 */
export function workerBudgetLink(send: (message: BudgetAsk | BudgetReleased) => void, timeoutMs = ASK_TIMEOUT_MS): BudgetLink {
  let nextAsk = 0;
  const answers = new Map<number, (units: number | undefined) => void>();
  let release: ((key: string, limit: number, window: number) => number) | undefined;
  process.on('message', (message: unknown) => {
    if (isBudgetAnswer(message)) {
      const waiting = answers.get(message.ask);
      if (waiting !== undefined) waiting(message.units);
      else if (message.units > 0) send({ pinpoint: 'budget-released', key: message.key, window: message.window, units: message.units });
    } else if (isBudgetRecall(message)) {
      const units = release?.(message.key, message.limit, message.window) ?? 0;
      send({ pinpoint: 'budget-released', recall: message.recall, key: message.key, window: message.window, units });
    }
  });
  return {
    ask(key, limit, window, want) {
      if (!process.connected) return Promise.resolve(undefined);
      const ask = nextAsk++;
      return new Promise<number | undefined>((resolve) => {
        const done = (units: number | undefined): void => {
          clearTimeout(timer);
          answers.delete(ask);
          resolve(units);
        };
        const timer = setTimeout(() => done(undefined), timeoutMs);
        answers.set(ask, done);
        send({ pinpoint: 'budget-ask', ask, key, limit, window, want });
      });
    },
    onRecall(handler) {
      release = handler;
    },
  };
}

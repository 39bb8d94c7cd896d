/**
 * Each worker's share of the failure budgets (DESIGN.md §11), so that a limit holds for the whole server even for a
 * burst that one worker answers before the others' counts reach it. In each window, a budget of `limit` is split: every
 * one of the W workers may have max(1, floor(limit / W)) requests in flight or spent (failed, fetched, kept) without
 * asking anyone; the rest stays with the primary, which hands it out on asking and, when it has none, recalls what the
 * workers hold unused. Units only move (a grant to a worker, a release to the primary), so one window never has more
 * than max(limit, W) in flight or spent across the server. Windows are aligned to the clock, so every process agrees.
 */
import { MAX_ENTRIES } from './rate-limit.js';

/** A worker asks the primary for `want` more units of `key`'s budget in `window`. */
export interface BudgetAsk {
  readonly pinpoint: 'budget-ask';
  readonly ask: number;
  readonly key: string;
  readonly limit: number;
  readonly window: number;
  readonly want: number;
}

/** The primary's answer to ask `ask`: `units` given (0: none to spare). */
export interface BudgetAnswer {
  readonly pinpoint: 'budget-answer';
  readonly ask: number;
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

/** A worker's answer to recall `recall`: the `units` it gave back (no longer its own). */
export interface BudgetReleased {
  readonly pinpoint: 'budget-released';
  readonly recall: number;
  readonly key: string;
  readonly window: number;
  readonly units: number;
}

export type BudgetMessage = BudgetAsk | BudgetAnswer | BudgetRecall | BudgetReleased;

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null;
const isCount = (value: unknown): value is number => typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
const isKey = (value: unknown): value is string => typeof value === 'string' && value.length > 0 && value.length <= 1024;

export const isBudgetAsk = (message: unknown): message is BudgetAsk =>
  isRecord(message) && message.pinpoint === 'budget-ask' && isCount(message.ask) && isKey(message.key) && isCount(message.limit) && isCount(message.window) && isCount(message.want);
export const isBudgetAnswer = (message: unknown): message is BudgetAnswer => isRecord(message) && message.pinpoint === 'budget-answer' && isCount(message.ask) && isCount(message.units);
export const isBudgetRecall = (message: unknown): message is BudgetRecall =>
  isRecord(message) && message.pinpoint === 'budget-recall' && isCount(message.recall) && isKey(message.key) && isCount(message.limit) && isCount(message.window);
export const isBudgetReleased = (message: unknown): message is BudgetReleased =>
  isRecord(message) && message.pinpoint === 'budget-released' && isCount(message.recall) && isKey(message.key) && isCount(message.window) && isCount(message.units);

/** What each of `workers` may hold of a budget of `limit` without asking: its share, one at least. */
export const baseShare = (limit: number, workers: number): number => (workers <= 1 ? limit : Math.max(1, Math.floor(limit / workers)));

/** The window (numbered from the epoch) that `now` falls in: every process computes the same one. */
export const windowAt = (now: number, windowMs: number): number => Math.floor(now / windowMs);

/** How a worker reaches the primary's part of the budgets. */
export interface BudgetLink {
  /** Asks for `want` more units of `key` in `window`; resolves with how many were given (0 when none, or no answer). */
  ask(key: string, limit: number, window: number, want: number): Promise<number>;
  /** `release(key, limit, window)` answers the primary's recalls: the units given back. */
  onRecall(release: (key: string, limit: number, window: number) => number): void;
}

interface Share {
  readonly window: number;
  /** Units this worker holds in the window: its base share, plus grants, less releases. */
  allowance: number;
  /** Units used for good in the window: failures, fetches, requests that kept something. */
  spent: number;
}

/** One worker's side: its shares of the budgets (only those that moved from the base share are kept). */
export class BudgetShares {
  readonly #shares = new Map<string, Share>();

  constructor(
    private readonly workers: number,
    private readonly windowMs: number,
    private readonly link: BudgetLink | undefined,
    private readonly maxEntries = MAX_ENTRIES,
  ) {
    link?.onRecall((key, limit, window) => this.#release(key, limit, window));
  }

  /** In-flight counts by key, for what a recall may give back; set by the owner of the counts. */
  inFlightOf: (key: string) => number = () => 0;

  /** Whether `using` more units (in flight, or counted now) fit in what this worker holds of `key`'s budget. */
  hasRoom(key: string, limit: number, using: number, now: number): boolean {
    const share = this.#current(key, now);
    const allowance = share?.allowance ?? baseShare(limit, this.workers);
    return (share?.spent ?? 0) + using < allowance;
  }

  /** Whether there is a primary to ask for more. */
  get canAsk(): boolean {
    return this.link !== undefined;
  }

  /** Counts `units` of `key`'s budget as used for good in this window (a failure, a fetch, something kept). */
  spend(key: string, units: number, limit: number, now: number): void {
    this.#own(key, limit, windowAt(now, this.windowMs)).spent += units;
  }

  /** Asks the primary for `want` more units of `key`; resolves with how many this worker now holds more. */
  async ask(key: string, limit: number, want: number, now: number): Promise<number> {
    if (this.link === undefined) return 0;
    const window = windowAt(now, this.windowMs);
    const units = await this.link.ask(key, limit, window, want);
    // A grant for a window that has ended is worth nothing: its units stay out of use, which errs on the safe side.
    if (units === 0 || windowAt(Date.now(), this.windowMs) !== window) return 0;
    this.#own(key, limit, window).allowance += units;
    return units;
  }

  /** Gives back what this worker holds of `key` in `window` and neither spent nor has in flight. */
  #release(key: string, limit: number, window: number): number {
    if (window !== windowAt(Date.now(), this.windowMs)) return 0;
    const share = this.#own(key, limit, window);
    const unused = Math.max(0, share.allowance - share.spent - this.inFlightOf(key));
    share.allowance -= unused;
    return unused;
  }

  #current(key: string, now: number): Share | undefined {
    const share = this.#shares.get(key);
    return share !== undefined && share.window === windowAt(now, this.windowMs) ? share : undefined;
  }

  /** The kept share of `key` in `window`, started from the base share when there is none. */
  #own(key: string, limit: number, window: number): Share {
    const share = this.#shares.get(key);
    if (share !== undefined && share.window === window) return share;
    if (share !== undefined) this.#shares.delete(key);
    else if (this.#shares.size >= this.maxEntries) this.#makeRoom(window);
    const started: Share = { window, allowance: baseShare(limit, this.workers), spent: 0 };
    // Insertion order is window order, which makeRoom relies on.
    this.#shares.set(key, started);
    return started;
  }

  #makeRoom(window: number): void {
    for (const [key, share] of this.#shares) if (share.window < window) this.#shares.delete(key);
    // Still full: the oldest go, back to their base share (what an attacker gets by spraying keys is its own keys' reset).
    for (const key of this.#shares.keys()) {
      if (this.#shares.size < this.maxEntries * 0.9) break;
      this.#shares.delete(key);
    }
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
  /** Units the primary holds: what no worker's share took, and what recalls gave back. */
  units: number;
  readonly asks: PendingAsk[];
  recall?: { readonly id: number; readonly waiting: Set<number>; readonly timer: NodeJS.Timeout };
}

/** The primary's side: what no worker holds of each budget, handed out on asking, recalled when there is none. */
export class BudgetPool {
  readonly #entries = new Map<string, PoolEntry>();
  #nextRecall = 0;
  #latestWindow = 0;

  constructor(
    private readonly peers: BudgetPeers,
    private readonly maxEntries = MAX_ENTRIES,
  ) {}

  ask(worker: number, message: BudgetAsk): void {
    const entry = this.#entry(message.key, message.limit, message.window);
    if (entry === undefined) return this.peers.send(worker, { pinpoint: 'budget-answer', ask: message.ask, units: 0 });
    entry.asks.push({ worker, ask: message.ask, want: Math.max(1, message.want) });
    this.#serve(entry, message.key, message.limit, message.window);
  }

  released(worker: number, message: BudgetReleased): void {
    const entry = this.#entries.get(entryKey(message.key, message.window));
    if (entry === undefined) return;
    // Given back even when late: the worker no longer counts them as its own.
    entry.units += message.units;
    if (entry.recall?.id !== message.recall) return;
    entry.recall.waiting.delete(worker);
    if (entry.recall.waiting.size === 0) this.#endRecall(entry);
  }

  /** A worker that exited answers no recall: nobody waits for it. */
  gone(worker: number): void {
    for (const entry of this.#entries.values()) {
      if (entry.recall?.waiting.delete(worker) === true && entry.recall.waiting.size === 0) this.#endRecall(entry);
    }
  }

  #serve(entry: PoolEntry, key: string, limit: number, window: number): void {
    if (entry.recall !== undefined) return;
    this.#grant(entry);
    if (entry.asks.length === 0) return;
    const waiting = new Set(this.peers.connected());
    if (waiting.size === 0) return this.#refuseRest(entry);
    const id = this.#nextRecall++;
    entry.recall = { id, waiting, timer: setTimeout(() => this.#endRecall(entry), RECALL_TIMEOUT_MS) };
    for (const worker of waiting) this.peers.send(worker, { pinpoint: 'budget-recall', recall: id, key, limit, window });
  }

  #endRecall(entry: PoolEntry): void {
    if (entry.recall !== undefined) clearTimeout(entry.recall.timer);
    entry.recall = undefined;
    this.#grant(entry);
    this.#refuseRest(entry);
  }

  #grant(entry: PoolEntry): void {
    while (entry.units > 0 && entry.asks.length > 0) {
      const pending = entry.asks.shift() as PendingAsk;
      const units = Math.min(pending.want, entry.units);
      entry.units -= units;
      this.peers.send(pending.worker, { pinpoint: 'budget-answer', ask: pending.ask, units });
    }
  }

  #refuseRest(entry: PoolEntry): void {
    for (const pending of entry.asks.splice(0)) this.peers.send(pending.worker, { pinpoint: 'budget-answer', ask: pending.ask, units: 0 });
  }

  /** The entry of `key` in `window`, started with what the workers' base shares leave; undefined when none can be kept. */
  #entry(key: string, limit: number, window: number): PoolEntry | undefined {
    if (window > this.#latestWindow) this.#forgetBefore((this.#latestWindow = window));
    if (window < this.#latestWindow) return undefined;
    const id = entryKey(key, window);
    let entry = this.#entries.get(id);
    if (entry !== undefined) return entry;
    // Beyond the bound nothing is handed out: a limit then errs on the safe side.
    if (this.#entries.size >= this.maxEntries) return undefined;
    const workers = this.peers.workers();
    entry = { units: Math.max(0, limit - workers * baseShare(limit, workers)), asks: [] };
    this.#entries.set(id, entry);
    return entry;
  }

  /** Entries of ended windows go; a recall still waiting answers its asks first. */
  #forgetBefore(window: number): void {
    for (const [id, entry] of this.#entries) {
      if (!id.startsWith(`${window}:`)) {
        this.#endRecall(entry);
        this.#entries.delete(id);
      }
    }
  }
}

const entryKey = (key: string, window: number): string => `${window}:${key}`;

/** How long a worker waits for the primary's answer before it takes none. */
export const ASK_TIMEOUT_MS = 1000;

/** In a cluster worker: asks and recall answers go to the primary over IPC. */
export function workerBudgetLink(): BudgetLink {
  let nextAsk = 0;
  const answers = new Map<number, (units: number) => void>();
  let release: ((key: string, limit: number, window: number) => number) | undefined;
  const tellPrimary = (message: BudgetAsk | BudgetReleased): void => {
    if (process.connected) process.send?.(message, undefined, {}, () => undefined);
  };
  process.on('message', (message: unknown) => {
    if (isBudgetAnswer(message)) {
      answers.get(message.ask)?.(message.units);
    } else if (isBudgetRecall(message)) {
      const units = release?.(message.key, message.limit, message.window) ?? 0;
      tellPrimary({ pinpoint: 'budget-released', recall: message.recall, key: message.key, window: message.window, units });
    }
  });
  return {
    ask(key, limit, window, want) {
      if (!process.connected) return Promise.resolve(0);
      const ask = nextAsk++;
      return new Promise<number>((resolve) => {
        const done = (units: number): void => {
          clearTimeout(timer);
          answers.delete(ask);
          resolve(units);
        };
        // An answer after this is dropped: its units stay out of use, on the safe side.
        const timer = setTimeout(() => done(0), ASK_TIMEOUT_MS);
        answers.set(ask, done);
        tellPrimary({ pinpoint: 'budget-ask', ask, key, limit, window, want });
      });
    },
    onRecall(handler) {
      release = handler;
    },
  };
}

/**
 * Limits across workers (DESIGN.md §11): each worker keeps its own limiter for synchronous checks, and every call
 * that changes it is applied here and replayed, by name and arguments, at every other worker (through the primary,
 * which keeps nothing). So each worker's counters are the server-wide counts, save the messages still in flight.
 * A worker that starts later (a restart, a reload) first takes a serving worker's live counts, then serves.
 */
import type { Worker } from 'node:cluster';
import { isRecord, isWholeNumber } from './message-shapes.js';
import { workerBudgetLink, type BudgetAsk, type BudgetLink, type BudgetReleased } from './budget-shares.js';

/** One replayed call: `method(...args)` on the limiter. */
export interface LimiterMessage {
  readonly pinpoint: 'limiter';
  readonly limiter: string;
  /** The limiter instance that made the call: its worker's pid and a number. */
  readonly origin: string;
  readonly method: string;
  readonly args: readonly unknown[];
}

/** A limiter whose live counts can go to a worker that starts later, e.g. FixedWindowLimiter. */
export interface HandsOver {
  /** The live counts, as acceptHandover() at another worker reads them. */
  snapshot(now: number): unknown;
  /** Checks another worker's snapshot(), changing nothing: what takes it in (returning how many counts changed), or undefined when malformed. */
  acceptHandover(handed: unknown, now: number): (() => number) | undefined;
}

/** What a starting worker's catch-up came to. */
export type CatchUp =
  | { readonly outcome: 'taken'; readonly giver: number; readonly windows: number }
  | { readonly outcome: 'none serving' }
  | { readonly outcome: 'no answer' | 'malformed' };

/** How replayed calls travel: cluster IPC in a worker (workerLink), or anything that delivers them in order. */
export interface LimiterLink {
  send(message: LimiterMessage): void;
  subscribe(listener: (message: LimiterMessage) => void): void;
  /** Lets the limiter `name` give its counts to a worker that starts later, and take those given to this one. */
  handOver?(name: string, limiter: HandsOver): void;
  /** Before serving, once every limiter is subscribed: takes in a serving worker's counts, if one serves. */
  catchUp?(): Promise<CatchUp>;
  /** Reaches the primary's part of the failure budgets, for this worker's share of them (budget-shares.ts). */
  readonly budgets?: BudgetLink;
}

/** Handing live counts to a worker that starts later, through the primary (which keeps nothing but the route). */
export type HandoverMessage =
  /** A starting worker, before it serves: it wants the counts. */
  | { readonly pinpoint: 'limits-wanted' }
  /** The primary to one serving worker: its counts, please, for the worker with cluster id `for`. */
  | { readonly pinpoint: 'limits-asked'; readonly for: number }
  /** Each limiter's snapshot() by name, for worker `for`, from the worker with pid `giver` (none when no worker serves). */
  | { readonly pinpoint: 'limits'; readonly for: number; readonly giver?: number; readonly limiters: Readonly<Record<string, unknown>> };

/** A replayed call as workerLink sends it: checked field by field, since it is applied to a live limiter. */
export const isLimiterMessage = (message: unknown): message is LimiterMessage =>
  isRecord(message) &&
  message.pinpoint === 'limiter' &&
  typeof message.limiter === 'string' &&
  typeof message.origin === 'string' &&
  typeof message.method === 'string' &&
  Array.isArray(message.args);

/** A handover message of the right shape; what a `limits` message holds per limiter is each limiter's to check. */
export function isHandoverMessage(message: unknown): message is HandoverMessage {
  if (!isRecord(message)) return false;
  if (message.pinpoint === 'limits-wanted') return true;
  if (message.pinpoint === 'limits-asked') return isWholeNumber(message.for);
  return (
    message.pinpoint === 'limits' &&
    isWholeNumber(message.for) &&
    (message.giver === undefined || isWholeNumber(message.giver)) &&
    isRecord(message.limiters) &&
    !Array.isArray(message.limiters)
  );
}

/** Method names of `L` (what may be listed as replayed). */
export type MethodOf<L> = { [K in keyof L]: L[K] extends (...args: never[]) => unknown ? K : never }[keyof L] & string;

export interface ShareOptions<L> {
  /** The methods that change counts, replayed at every other worker; every other property is this worker's alone. */
  readonly replayed: readonly MethodOf<L>[];
}

type AnyFunction = (...args: unknown[]) => unknown;

let instances = 0;

/**
 * `local` with every `replayed` call applied locally and sent over `link`; those received over `link` are applied to
 * `local` alone, and nothing else a message names is called. A `local` that HandsOver also gives its counts to
 * workers that start later, and takes those given to it.
 */
export function sharedLimiter<L extends object>(name: string, local: L, link: LimiterLink, options: ShareOptions<L>): L {
  if (handsOver(local)) link.handOver?.(name, local);
  const replayed = new Set<string>(options.replayed);
  const origin = `${process.pid}.${instances++}`;

  link.subscribe((message) => {
    if (message.limiter !== name || message.origin === origin || !replayed.has(message.method)) return;
    (Reflect.get(local, message.method) as AnyFunction).apply(local, [...message.args]);
  });

  const wrapped = new Map<string, AnyFunction>();
  return new Proxy(local, {
    get(target, property) {
      const value = Reflect.get(target, property, target) as unknown;
      if (typeof value !== 'function') return value;
      if (typeof property !== 'string' || !replayed.has(property)) return (value as AnyFunction).bind(target);
      let call = wrapped.get(property);
      if (call === undefined) {
        const method = value as AnyFunction;
        call = (...args: unknown[]) => {
          const result = method.apply(target, args);
          link.send({ pinpoint: 'limiter', limiter: name, origin, method: property, args });
          return result;
        };
        wrapped.set(property, call);
      }
      return call;
    },
  });
}

const handsOver = (limiter: object): limiter is HandsOver =>
  typeof (limiter as Partial<HandsOver>).snapshot === 'function' && typeof (limiter as Partial<HandsOver>).acceptHandover === 'function';

/** How long a starting worker waits for a serving one's counts before it serves with its own windows. */
const CATCH_UP_TIMEOUT_MS = 3000;

/** Sends to the primary; a worker that is stopping has lost its channel, and what it would say goes with it. */
function tellPrimary(message: LimiterMessage | HandoverMessage | BudgetAsk | BudgetReleased): void {
  if (process.connected) process.send?.(message, undefined, {}, () => undefined);
}

/**
 * In a cluster worker: replayed calls go to the primary, which passes them to every other worker (fanOutLimiterMessage);
 * counts are handed over on the primary's asking (relayHandover).
 */
export function workerLink(): LimiterLink {
  const limiters = new Map<string, HandsOver>();
  let waiting: ((outcome: CatchUp) => void) | undefined;
  process.on('message', (message: unknown) => {
    if (!isHandoverMessage(message)) return;
    if (message.pinpoint === 'limits-asked') {
      const now = Date.now();
      const snapshots = Object.fromEntries([...limiters].map(([name, limiter]) => [name, limiter.snapshot(now)]));
      tellPrimary({ pinpoint: 'limits', for: message.for, giver: process.pid, limiters: snapshots });
    } else if (message.pinpoint === 'limits' && waiting !== undefined) {
      const done = waiting;
      waiting = undefined;
      done(message.giver === undefined ? { outcome: 'none serving' } : takeOverAll(limiters, message.limiters, message.giver, Date.now()));
    }
  });
  return {
    send: tellPrimary,
    budgets: workerBudgetLink(tellPrimary),
    subscribe(listener) {
      process.on('message', (message: unknown) => {
        if (isLimiterMessage(message)) listener(message);
      });
    },
    handOver: (name, limiter) => void limiters.set(name, limiter),
    catchUp() {
      if (!process.connected) return Promise.resolve({ outcome: 'none serving' });
      return new Promise((resolve) => {
        const timer = setTimeout(() => {
          waiting = undefined;
          resolve({ outcome: 'no answer' });
        }, CATCH_UP_TIMEOUT_MS);
        waiting = (outcome) => {
          clearTimeout(timer);
          resolve(outcome);
        };
        tellPrimary({ pinpoint: 'limits-wanted' });
      });
    },
  };
}

/** Gives each named limiter its part of a handover once every part is checked: one malformed part changes nothing at all. */
export function takeOverAll(limiters: ReadonlyMap<string, HandsOver>, handed: Readonly<Record<string, unknown>>, giver: number, now: number): CatchUp {
  const takes = [...limiters].flatMap(([name, limiter]) => (Object.hasOwn(handed, name) ? [limiter.acceptHandover(handed[name], now)] : []));
  if (takes.some((take) => take === undefined)) return { outcome: 'malformed' };
  const windows = takes.reduce((sum, take) => sum + (take as () => number)(), 0);
  return { outcome: 'taken', giver, windows };
}

/** In the primary: a worker's replayed call goes to every other worker that is still connected. */
export function fanOutLimiterMessage(message: LimiterMessage, from: Worker, workers: Iterable<Worker>): void {
  for (const worker of workers) {
    if (worker !== from && worker.isConnected()) worker.send(message, undefined, () => undefined);
  }
}

/**
 * In the primary: a starting worker's `limits-wanted` goes to the first of `serving` (the longest serving) other than
 * itself, or, with none, is answered at once with nothing to take; an answer goes on to the worker it is for.
 */
export function relayHandover(message: HandoverMessage, from: Worker, serving: readonly Worker[], workers: Iterable<Worker>): void {
  if (message.pinpoint === 'limits-wanted') {
    const giver = serving.find((worker) => worker !== from && worker.isConnected());
    const next: HandoverMessage = giver === undefined ? { pinpoint: 'limits', for: from.id, limiters: {} } : { pinpoint: 'limits-asked', for: from.id };
    (giver ?? from).send(next, undefined, () => undefined);
  } else if (message.pinpoint === 'limits') {
    for (const worker of workers) if (worker.id === message.for && worker !== from && worker.isConnected()) worker.send(message, undefined, () => undefined);
  }
}

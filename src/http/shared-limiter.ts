/**
 * Limits across workers (DESIGN.md §11): each worker keeps its own limiter for synchronous checks, and every call
 * that changes it is applied here and replayed, by name and arguments, at every other worker (through the primary,
 * which keeps nothing). So each worker's counters are the server-wide counts, save the messages still in flight.
 */
import type { Worker } from 'node:cluster';

/** One replayed call: `method(...args)` on the limiter, or on what an earlier call of the same origin returned (`of`). */
export interface LimiterMessage {
  readonly pinpoint: 'limiter';
  readonly limiter: string;
  /** The limiter instance that made the call: its worker's pid and a number. */
  readonly origin: string;
  readonly method: string;
  readonly args: readonly unknown[];
  /** Set when the call returned functions (e.g. a reservation's `release`): later calls of them name it in `of`. */
  readonly handle?: number;
  readonly of?: number;
}

/** How replayed calls travel: cluster IPC in a worker (workerLink), or anything that delivers them in order. */
export interface LimiterLink {
  send(message: LimiterMessage): void;
  subscribe(listener: (message: LimiterMessage) => void): void;
}

export const isLimiterMessage = (message: unknown): message is LimiterMessage =>
  typeof message === 'object' && message !== null && (message as { pinpoint?: unknown }).pinpoint === 'limiter';

/** Method names of `L` (what may be listed as read-only). */
export type MethodOf<L> = { [K in keyof L]: L[K] extends (...args: never[]) => unknown ? K : never }[keyof L] & string;

export interface ShareOptions<L> {
  /** Methods that only read, and so are not replayed; every other method is. */
  readonly readOnly: readonly MethodOf<L>[];
  /**
   * Whether a call's result says it changed nothing (a refused reservation): such a call is not replayed, since the
   * others, judging it again with counts that may have moved, could count what this worker refused.
   */
  readonly changedNothing?: (result: unknown) => boolean;
  /** How long what a call returned may still be acted on (a reservation lives as long as its window). */
  readonly handleLifetimeMs: number;
  /** Returned values remembered at most per limiter, so memory stays bounded whatever the traffic. */
  readonly maxHandles?: number;
}

const DEFAULT_MAX_HANDLES = 100_000;

type AnyFunction = (...args: unknown[]) => unknown;

let instances = 0;

/**
 * `local` with every call except `readOnly` ones applied locally and sent over `link`; calls received over `link`
 * are applied to `local` alone. Functions in a call's result (a reservation's `release`) are shared the same way.
 */
export function sharedLimiter<L extends object>(name: string, local: L, link: LimiterLink, options: ShareOptions<L>): L {
  const readOnly = new Set<string>(options.readOnly);
  const origin = `${process.pid}.${instances++}`;
  let nextHandle = 0;
  const send = (message: Omit<LimiterMessage, 'pinpoint' | 'limiter' | 'origin'>): void => link.send({ pinpoint: 'limiter', limiter: name, origin, ...message });

  const remembered = new RememberedResults(options.handleLifetimeMs, options.maxHandles ?? DEFAULT_MAX_HANDLES);
  link.subscribe((message) => {
    if (message.limiter !== name || message.origin === origin) return;
    if (message.of !== undefined) {
      const method = remembered.get(message.origin, message.of)?.[message.method];
      if (typeof method === 'function') (method as AnyFunction)(...message.args);
      return;
    }
    const method = Reflect.get(local, message.method) as unknown;
    if (typeof method !== 'function' || readOnly.has(message.method)) return;
    const result = (method as AnyFunction).apply(local, [...message.args]);
    if (message.handle !== undefined && isRecord(result)) remembered.add(message.origin, message.handle, result, Date.now());
  });

  const wrapped = new Map<string, AnyFunction>();
  return new Proxy(local, {
    get(target, property) {
      const value = Reflect.get(target, property, target) as unknown;
      if (typeof value !== 'function' || typeof property !== 'string' || readOnly.has(property)) {
        return typeof value === 'function' ? (value as AnyFunction).bind(target) : value;
      }
      let call = wrapped.get(property);
      if (call === undefined) {
        const method = value as AnyFunction;
        call = (...args: unknown[]) => {
          const result = method.apply(target, args);
          if (options.changedNothing?.(result) === true) return result;
          const functions = isRecord(result) ? Object.keys(result).filter((key) => typeof result[key] === 'function') : [];
          if (functions.length === 0) {
            send({ method: property, args });
            return result;
          }
          const handle = nextHandle++;
          send({ method: property, args, handle });
          const shared: Record<string, unknown> = { ...(result as Record<string, unknown>) };
          for (const key of functions) {
            const inner = (result as Record<string, AnyFunction>)[key] as AnyFunction;
            shared[key] = (...innerArgs: unknown[]) => {
              const answer = inner(...innerArgs);
              send({ method: key, args: innerArgs, of: handle });
              return answer;
            };
          }
          return shared;
        };
        wrapped.set(property, call);
      }
      return call;
    },
  });
}

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null;

/** A limiter's verdict that refused (`limited: true`, e.g. FixedWindowLimiter's reservations): nothing was counted. */
export const isLimitedVerdict = (result: unknown): boolean => isRecord(result) && result.limited === true;

/** Results of other workers' calls, by origin and handle, for the later calls that name them; oldest forgotten first. */
class RememberedResults {
  readonly #results = new Map<string, { readonly result: Record<string, unknown>; readonly at: number }>();

  constructor(
    private readonly lifetimeMs: number,
    private readonly max: number,
  ) {}

  add(origin: string, handle: number, result: Record<string, unknown>, now: number): void {
    // Insertion order is age order: expired and surplus entries are all at the front.
    for (const [key, entry] of this.#results) {
      if (entry.at + this.lifetimeMs > now && this.#results.size < this.max) break;
      this.#results.delete(key);
    }
    this.#results.set(`${origin}:${handle}`, { result, at: now });
  }

  get(origin: string, handle: number): Record<string, unknown> | undefined {
    return this.#results.get(`${origin}:${handle}`)?.result;
  }
}

/** In a cluster worker: replayed calls go to the primary, which passes them to every other worker (fanOutLimiterMessage). */
export function workerLink(): LimiterLink {
  return {
    send(message) {
      // A worker that is stopping has lost its channel; its last counts go with it.
      if (process.connected) process.send?.(message, undefined, {}, () => undefined);
    },
    subscribe(listener) {
      process.on('message', (message: unknown) => {
        if (isLimiterMessage(message)) listener(message);
      });
    },
  };
}

/** In the primary: a worker's replayed call goes to every other worker that is still connected. */
export function fanOutLimiterMessage(message: LimiterMessage, from: Worker, workers: Iterable<Worker>): void {
  for (const worker of workers) {
    if (worker !== from && worker.isConnected()) worker.send(message, undefined, () => undefined);
  }
}

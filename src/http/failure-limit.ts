/**
 * Rate limits on failed requests (DESIGN.md §4: 429 with Retry-After): per address, and per client *per address*,
 * so failures from one address never lock a client out for the addresses that did not fail.
 */
import { isIPv6 } from 'node:net';
import { OAuthError } from '../policy/oauth-error.js';
import type { FixedWindowLimiter } from './rate-limit.js';

export interface FailureLimits {
  /** Failed requests per client per address, per window. */
  readonly clientFailures: number;
  /** Failed requests per address, per window. */
  readonly addressFailures: number;
}

/**
 * What a per-address limit counts as one address: an IPv4 address (an IPv4-mapped IPv6 one as its IPv4), or the /64
 * an IPv6 address belongs to, since one subscriber or host is routinely given a whole /64 (RFC 6177, RFC 8273) and
 * could otherwise draw a fresh budget from each of its 2^64 addresses.
 */
export function limitedAddress(address: string): string {
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(address);
  if (mapped !== null) return mapped[1] as string;
  if (!isIPv6(address)) return address;
  const [head = '', tail] = (address.split('%')[0] as string).split('::');
  const left = head === '' ? [] : head.split(':');
  const right = tail === undefined || tail === '' ? [] : tail.split(':');
  // An IPv4 tail ("::ffff:1.2.3.4", "64:ff9b::1.2.3.4") lies in the low 64 bits, which the /64 leaves out anyway.
  const groups = [...left, ...Array<string>(Math.max(0, 8 - left.length - right.length)).fill('0'), ...right];
  return `${groups.slice(0, 4).map((group) => Number.parseInt(group, 16).toString(16)).join(':')}::/64`;
}

const addressKey = (address: string): string => `ip:${limitedAddress(address)}`;
const clientKey = (address: string, clientId: string): string => `client:${limitedAddress(address)}:${clientId}`;

const slowDown = (retryAfterSeconds: number): OAuthError =>
  new OAuthError('invalid_request', 'too many failed requests; slow down', 429, { 'Retry-After': String(retryAfterSeconds) });

/** How long a request may wait for requests of its address in flight to end before it is let in (they end sooner). */
export const ADMISSION_WAIT_MS = 10_000;
/** Requests waiting at most per address (or client from an address) in one process; beyond it, 429. */
export const MAX_WAITING = 1_000;

/**
 * Requests of each address, and of each client from an address, that this process is still answering, and those
 * waiting to start. Until it is answered, a request counts against its failure budgets as if it will fail, so a burst
 * of parallel requests cannot all pass a check made before any of them was counted (DESIGN.md §7). Entries live only
 * while their requests do.
 */
export class RequestsInFlight {
  readonly #counts = new Map<string, number>();
  readonly #waiting = new Map<string, Set<() => void>>();

  /** `workers`: the processes that share the budgets (DESIGN.md §11), each of which may have its share in flight. */
  constructor(private readonly workers = 1) {}

  /** Whether one more may start with `remaining` of a budget left: this process's share of it, at least one while any is left. */
  mayStart(key: string, remaining: number): boolean {
    if (remaining <= 0) return false;
    return (this.#counts.get(key) ?? 0) < Math.max(1, Math.floor(remaining / this.workers));
  }

  start(key: string): void {
    this.#counts.set(key, (this.#counts.get(key) ?? 0) + 1);
  }

  /** Ends one request of `key` and wakes every request waiting on it, to judge again what is left. */
  end(key: string): void {
    const left = (this.#counts.get(key) ?? 0) - 1;
    if (left > 0) this.#counts.set(key, left);
    else this.#counts.delete(key);
    const waiting = this.#waiting.get(key);
    if (waiting === undefined) return;
    this.#waiting.delete(key);
    for (const wake of waiting) wake();
  }

  /** Resolves true once a request of `key` ends, false after `ms` or at once when MAX_WAITING already wait. */
  async waitForEnd(key: string, ms: number): Promise<boolean> {
    let waiting = this.#waiting.get(key);
    if (waiting === undefined) this.#waiting.set(key, (waiting = new Set()));
    if (waiting.size >= MAX_WAITING) return false;
    const queue = waiting;
    return new Promise<boolean>((resolve) => {
      const wake = (): void => {
        clearTimeout(timer);
        resolve(true);
      };
      const timer = setTimeout(() => {
        queue.delete(wake);
        if (queue.size === 0 && this.#waiting.get(key) === queue) this.#waiting.delete(key);
        resolve(false);
      }, ms);
      queue.add(wake);
    });
  }
}

/**
 * How an admitted request ended, for its budgets: `failed` (a refusal that counts, see countsAsFailure) against the
 * address and the client; `kept` (it made the server keep something: a pushed request, a device authorization) against
 * the address; `done` against neither.
 */
export type RequestOutcome = 'failed' | 'kept' | 'done';

/** A request let in, or the 429 that keeps it out; `settle` ends it once, counting its outcome in the same step. */
export type Admission =
  | { readonly ok: false; readonly error: OAuthError }
  | { readonly ok: true; readonly settle: (outcome: RequestOutcome, now: number) => void };

/** What admission needs to know of a request. */
export interface AdmissionRequest {
  readonly address: string;
  readonly clientId: string | undefined;
  /**
   * How many fetches it would make now (metadata documents, key sets: DESIGN.md §9), counted against the address when
   * it is let in, whatever the outcome; asked again after a wait, since a fetch another request made meanwhile is cached.
   */
  readonly fetches: () => number;
}

/**
 * Lets a request in when neither its address nor its client from that address has used up its failure budget, counting
 * the requests still in flight as failures-to-be: with `address_failures = 5`, 200 parallel bad requests from one
 * address get at most 5 answers other than 429 (plus one per other worker, DESIGN.md §11). Beyond what is left, a
 * request of an address (or client) with nothing counted in this window waits for one in flight to end instead of
 * being refused: an address that has not failed is never told it did, and its many good parallel requests are all
 * answered.
 */
export function admitRequest(
  limiter: FixedWindowLimiter,
  inFlight: RequestsInFlight,
  limits: FailureLimits,
  request: AdmissionRequest,
  now: () => number,
): Admission | Promise<Admission> {
  // The address budget first: a fetch and a kept request count against it alone.
  const budgets: [key: string, limit: number][] = [[addressKey(request.address), limits.addressFailures]];
  if (request.clientId !== undefined) budgets.push([clientKey(request.address, request.clientId), limits.clientFailures]);
  // Judged and taken in one synchronous step, so no other request slips between; only a wait is asynchronous.
  const verdict = judge(limiter, inFlight, budgets, request.fetches(), now());
  if (verdict === undefined) return { ok: true, settle: settlement(limiter, inFlight, budgets) };
  if (verdict instanceof OAuthError) return { ok: false, error: verdict };
  return admitAfterWaiting(limiter, inFlight, budgets, request, now, verdict.waitOn);
}

async function admitAfterWaiting(
  limiter: FixedWindowLimiter,
  inFlight: RequestsInFlight,
  budgets: readonly [string, number][],
  request: AdmissionRequest,
  now: () => number,
  firstWait: string,
): Promise<Admission> {
  const deadline = now() + ADMISSION_WAIT_MS;
  let waitOn = firstWait;
  for (;;) {
    const left = deadline - now();
    if (left <= 0 || !(await inFlight.waitForEnd(waitOn, left))) return { ok: false, error: slowDown(1) };
    const verdict = judge(limiter, inFlight, budgets, request.fetches(), now());
    if (verdict === undefined) return { ok: true, settle: settlement(limiter, inFlight, budgets) };
    if (verdict instanceof OAuthError) return { ok: false, error: verdict };
    waitOn = verdict.waitOn;
  }
}

/** Takes the request in (undefined), refuses it (the 429), or names the key whose requests in flight it must wait for. */
function judge(limiter: FixedWindowLimiter, inFlight: RequestsInFlight, budgets: readonly [string, number][], fetches: number, now: number): OAuthError | { waitOn: string } | undefined {
  let waitOn: string | undefined;
  for (let index = 0; index < budgets.length; index += 1) {
    const [key, limit] = budgets[index] as [string, number];
    const countedNow = index === 0 ? fetches : 0;
    const counted = limiter.counted(key, now);
    // Nothing in flight can give back what has been counted: only the window's end helps.
    if (counted + countedNow >= limit) return slowDown(Math.max(1, limiter.check(key, 0, now).retryAfterSeconds));
    if (!inFlight.mayStart(key, limit - counted - countedNow)) {
      // One that has failed (or fetched, or kept something) in this window is refused, so a burst ends at once even
      // where other workers' counts are still on their way; one that has not waits: it is never told it failed.
      if (counted > 0) return slowDown(1);
      waitOn ??= key;
    }
  }
  if (waitOn !== undefined) return { waitOn };
  for (let count = 0; count < fetches; count += 1) limiter.hit((budgets[0] as [string, number])[0], now);
  for (const [key] of budgets) inFlight.start(key);
  return undefined;
}

/** Ends an admitted request once: counts its outcome, then stops counting it as in flight, in one step. */
function settlement(limiter: FixedWindowLimiter, inFlight: RequestsInFlight, budgets: readonly [string, number][]): (outcome: RequestOutcome, now: number) => void {
  let settled = false;
  return (outcome, now) => {
    if (settled) return;
    settled = true;
    budgets.forEach(([key], index) => {
      if (outcome === 'failed' || (outcome === 'kept' && index === 0)) limiter.hit(key, now);
      inFlight.end(key);
    });
  };
}

/** Whether an answer counts as a failed request (DESIGN.md §7): a refusal (4xx) other than 429, which counts nothing. */
export const countsAsFailure = (status: number): boolean => status >= 400 && status < 500 && status !== 429;

/** One failure of the address, counted before the work it may turn out to be; `release` gives it back on success. */
export type AddressSlot = { readonly ok: false; readonly error: OAuthError } | { readonly ok: true; readonly release: () => void };

/**
 * Counts a failure of the address before the costly check it guards (a password), so parallel requests cannot all
 * pass a check made before any of them was counted (DESIGN.md §7): 429 when the address has none left.
 */
export function takeAddressSlot(limiter: FixedWindowLimiter, limits: Pick<FailureLimits, 'addressFailures'>, address: string, now: number): AddressSlot {
  const reservation = limiter.reserve(addressKey(address), limits.addressFailures, now);
  return reservation.limited ? { ok: false, error: slowDown(reservation.retryAfterSeconds) } : { ok: true, release: reservation.release };
}

/** Counts a refused request (4xx other than 429) against its address and, when it names one, its client from that address. */
export function countFailure(limiter: FixedWindowLimiter, address: string, clientId: string | undefined, status: number, now: number): void {
  if (!countsAsFailure(status)) return;
  limiter.hit(addressKey(address), now);
  if (clientId !== undefined) limiter.hit(clientKey(address, clientId), now);
}

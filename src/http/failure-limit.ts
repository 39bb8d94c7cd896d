/**
 * Rate limits on failed requests (DESIGN.md §4: 429 with Retry-After): per address, and per client *per address*,
 * so failures from one address never lock a client out for the addresses that did not fail.
 */
import { isIPv6 } from 'node:net';
import type { FastifyReply } from 'fastify';
import { OAuthError } from '../policy/oauth-error.js';
import { ASK_AGAIN_MS, ASK_TIMEOUT_MS, BudgetShares, type BudgetLink } from './budget-shares.js';
import { boundedKey, type FixedWindowLimiter } from './rate-limit.js';
import { sendErrorPage } from './render-error.js';

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
  // An IPv4 address (every request's, behind most deployments) has no ':': no regex, no isIPv6, on the request path.
  if (!address.includes(':')) return address;
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

/** The keys of an address group (limitedAddress's answer, worked out once per request for both). */
const addressKey = (group: string): string => `ip:${group}`;
const clientKey = (group: string, clientId: string): string => `client:${group}:${clientId}`;

const slowDown = (retryAfterSeconds: number): OAuthError =>
  new OAuthError('invalid_request', 'too many failed requests; slow down', 429, { 'Retry-After': String(retryAfterSeconds) });

/** How long a request may wait for requests of its address in flight to end before it is let in (they end sooner). */
export const ADMISSION_WAIT_MS = 10_000;
/** Requests waiting at most per address (or client from an address) in one process; beyond it, 429. */
export const MAX_WAITING = 1_000;
/** How a wait for a request in flight ended. */
export type WaitEnd = 'ended' | 'timed out' | 'too many waiting';

/** How an ask for a larger share ended. */
export type AskEnd = 'granted' | 'none' | 'too many waiting';

/** Whether one more request may start: at once, after asking the primary for a larger share, or not now. */
export type Room = 'start' | 'ask' | 'full';

/**
 * Requests of each address, and of each client from an address, that this process is still answering, and those
 * waiting to start. Until it is answered, a request counts against its failure budgets as if it will fail, so a burst
 * of parallel requests cannot all pass a check made before any of them was counted (DESIGN.md §7). With several
 * workers, each holds its share of every budget (budget-shares.ts), so the limit holds for the whole server (§11).
 * Entries live only while their requests do.
 */
export class RequestsInFlight {
  readonly #counts = new Map<string, number>();
  readonly #waiting = new Map<string, Set<() => void>>();
  /** Requests waiting for the primary's answer, by key (bounded like the other waits). */
  readonly #asking = new Map<string, number>();
  readonly #shares: BudgetShares | undefined;

  /** `workers`: the processes that share the budgets (DESIGN.md §11); `link` reaches the primary that holds the rest. */
  constructor(workers = 1, options: { readonly windowMs?: number; readonly link?: BudgetLink; readonly now?: () => number } = {}) {
    const inFlightOf = (key: string): number => this.#counts.get(key) ?? 0;
    this.#shares = workers > 1 ? new BudgetShares(workers, options.windowMs ?? 60_000, options.link, { now: options.now ?? Date.now, inFlightOf }) : undefined;
  }

  /**
   * Whether one more request of `key` may start with `counted` of its `limit` used across the server and `countedNow`
   * more to be counted as it starts (its fetches): its in-flight ones must leave room, and so must this worker's share.
   */
  room(key: string, limit: number, counted: number, countedNow: number, now: number): Room {
    const using = (this.#counts.get(key) ?? 0) + countedNow;
    if (using >= limit - counted) return 'full';
    if (this.#shares === undefined || this.#shares.hasRoom(key, limit, using, now)) return 'start';
    return this.#shares.canAsk ? 'ask' : 'full';
  }

  /**
   * Asks the primary for what one more request of `key` (and `countedNow` counted as it starts) needs beyond this
   * worker's share, waiting at most `ms` for its answer (others asking for the same key share the one question).
   */
  async ask(key: string, limit: number, countedNow: number, now: number, ms: number): Promise<AskEnd> {
    if (this.#shares === undefined) return 'none';
    if (this.#waitingFor(key) >= MAX_WAITING) return 'too many waiting';
    this.#asking.set(key, (this.#asking.get(key) ?? 0) + 1);
    let timer: NodeJS.Timeout | undefined;
    try {
      const answer = this.#shares.ask(key, limit, (this.#counts.get(key) ?? 0) + countedNow, now);
      const deadline = new Promise<number>((resolve) => (timer = setTimeout(() => resolve(0), ms)));
      return (await Promise.race([answer, deadline])) > 0 ? 'granted' : 'none';
    } finally {
      clearTimeout(timer);
      const left = (this.#asking.get(key) ?? 1) - 1;
      if (left > 0) this.#asking.set(key, left);
      else this.#asking.delete(key);
    }
  }

  /** What of `key`'s budget this worker has used for good in its share's window (always 0 with one worker: the counts say it). */
  spent(key: string, now: number): number {
    return this.#shares?.spent(key, now) ?? 0;
  }

  /** Seconds until the shares' window ends (for Retry-After when this worker's share is spent). */
  shareRetryAfterSeconds(now: number): number {
    return Math.max(1, Math.ceil((this.#shares?.windowEndsIn(now) ?? 0) / 1000));
  }

  /** Requests of `key` waiting in this process, for a wait or for the primary's answer: MAX_WAITING at most together. */
  #waitingFor(key: string): number {
    return (this.#waiting.get(key)?.size ?? 0) + (this.#asking.get(key) ?? 0);
  }

  /** Counts `units` of `key`'s budget as used for good (a failure, a fetch, something kept) in this worker's share. */
  spend(key: string, units: number, limit: number, now: number): void {
    this.#shares?.spend(key, units, limit, now);
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

  /** Resolves once a request of `key` ends, after `ms`, or at once when MAX_WAITING already wait. */
  async waitForEnd(key: string, ms: number): Promise<WaitEnd> {
    if (this.#waitingFor(key) >= MAX_WAITING) return 'too many waiting';
    let waiting = this.#waiting.get(key);
    if (waiting === undefined) this.#waiting.set(key, (waiting = new Set()));
    const queue = waiting;
    return new Promise<WaitEnd>((resolve) => {
      const wake = (): void => {
        clearTimeout(timer);
        resolve('ended');
      };
      const timer = setTimeout(() => {
        queue.delete(wake);
        if (queue.size === 0 && this.#waiting.get(key) === queue) this.#waiting.delete(key);
        resolve('timed out');
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

type Budget = readonly [key: string, limit: number];

/** What keeps a request from starting now: requests in flight to wait for, or this worker's share, to ask to grow. */
type Hold = { readonly waitOn: string } | { readonly askFor: string; readonly limit: number; readonly countedNow: number };

/**
 * Lets a request in when neither its address nor its client from that address has used up its failure budget, counting
 * the requests still in flight as failures-to-be: with `address_failures = 5`, 200 parallel bad requests from one
 * address get at most 5 answers other than 429, across all workers (their shares, DESIGN.md §11). Beyond what is left, a
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
  const group = limitedAddress(request.address);
  const budgets: Budget[] = [[addressKey(group), limits.addressFailures]];
  // A client_id is the requester's own text: the key holds it bounded, so its length costs no memory.
  if (request.clientId !== undefined) budgets.push([boundedKey(clientKey(group, request.clientId)), limits.clientFailures]);
  return admit(limiter, inFlight, budgets, request.fetches, now);
}

/**
 * Lets in a request whose failure counts against its address alone (a password check, a registration, a sign-in kept on
 * the server), by the rules of admitRequest, so parallel ones cannot all pass a check made before any was counted
 * (DESIGN.md §7): settle it `failed` or `kept` to count it, `done` to give it back.
 */
export function admitAgainstAddress(limiter: FixedWindowLimiter, inFlight: RequestsInFlight, limits: Pick<FailureLimits, 'addressFailures'>, address: string, now: () => number): Promise<Admission> {
  return Promise.resolve(admit(limiter, inFlight, [[addressKey(limitedAddress(address)), limits.addressFailures]], () => 0, now));
}

function admit(limiter: FixedWindowLimiter, inFlight: RequestsInFlight, budgets: readonly Budget[], fetches: () => number, now: () => number): Admission | Promise<Admission> {
  // Judged and taken in one synchronous step, so no other request slips between; only a wait is asynchronous.
  const verdict = judge(limiter, inFlight, budgets, fetches(), now());
  if (verdict === undefined) return { ok: true, settle: settlement(limiter, inFlight, budgets) };
  if (verdict instanceof OAuthError) return { ok: false, error: verdict };
  return admitAfterWaiting(limiter, inFlight, budgets, fetches, now, verdict);
}

async function admitAfterWaiting(limiter: FixedWindowLimiter, inFlight: RequestsInFlight, budgets: readonly Budget[], fetches: () => number, now: () => number, firstHold: Hold): Promise<Admission> {
  const deadline = now() + ADMISSION_WAIT_MS;
  let hold = firstHold;
  for (;;) {
    const left = deadline - now();
    const refusal = left <= 0 ? slowDown(1) : await heldUntilJudgedAgain(limiter, inFlight, hold, left, now);
    if (refusal !== undefined) return { ok: false, error: refusal };
    const verdict = judge(limiter, inFlight, budgets, fetches(), now());
    if (verdict === undefined) return { ok: true, settle: settlement(limiter, inFlight, budgets) };
    if (verdict instanceof OAuthError) return { ok: false, error: verdict };
    hold = verdict;
  }
}

/** Waits out `hold`, then undefined (judge again), or the 429: for a request in flight to end, or for the primary's answer to an ask. */
async function heldUntilJudgedAgain(limiter: FixedWindowLimiter, inFlight: RequestsInFlight, hold: Hold, left: number, now: () => number): Promise<OAuthError | undefined> {
  if ('waitOn' in hold) return (await inFlight.waitForEnd(hold.waitOn, left)) === 'ended' ? undefined : slowDown(1);
  const asked = await inFlight.ask(hold.askFor, hold.limit, hold.countedNow, now(), Math.min(left, ASK_TIMEOUT_MS));
  if (asked !== 'none') return asked === 'granted' ? undefined : slowDown(1);
  // No worker had room to spare: one that has failed is refused; one that has not waits for room to come free.
  const failed = failedBefore(limiter, inFlight, hold.askFor, now());
  if (failed !== undefined) return failed;
  return (await inFlight.waitForEnd(hold.askFor, Math.min(left, ASK_AGAIN_MS))) === 'too many waiting' ? slowDown(1) : undefined;
}

/**
 * The 429 for a key that has failed (or fetched, or kept something) in this window, by the server's counts or by this
 * worker's share, whose window may end later; undefined when it has not.
 */
function failedBefore(limiter: FixedWindowLimiter, inFlight: RequestsInFlight, key: string, now: number): OAuthError | undefined {
  if (limiter.counted(key, now) > 0) return slowDown(1);
  return inFlight.spent(key, now) > 0 ? slowDown(inFlight.shareRetryAfterSeconds(now)) : undefined;
}

/** Takes the request in (undefined), refuses it (the 429), or says what it must wait for. */
function judge(limiter: FixedWindowLimiter, inFlight: RequestsInFlight, budgets: readonly Budget[], fetches: number, now: number): OAuthError | Hold | undefined {
  let hold: Hold | undefined;
  for (let index = 0; index < budgets.length; index += 1) {
    const [key, limit] = budgets[index] as Budget;
    const countedNow = index === 0 ? fetches : 0;
    const counted = limiter.counted(key, now);
    // Nothing in flight can give back what has been counted: only the window's end helps.
    if (counted + countedNow >= limit) return slowDown(Math.max(1, limiter.check(key, 0, now).retryAfterSeconds));
    const room = inFlight.room(key, limit, counted, countedNow, now);
    if (room === 'ask') hold ??= { askFor: key, limit, countedNow };
    else if (room === 'full') {
      // One that has failed in this window is refused, so a burst ends at once; one that has not waits: it is never
      // told it failed.
      const failed = failedBefore(limiter, inFlight, key, now);
      if (failed !== undefined) return failed;
      hold ??= { waitOn: key };
    }
  }
  if (hold !== undefined) return hold;
  if (fetches > 0) countUsed(limiter, inFlight, budgets[0] as Budget, fetches, now);
  for (const [key] of budgets) inFlight.start(key);
  return undefined;
}

/** Counts `units` used for good of a budget: in the server-wide counts and in this worker's share, always both. */
function countUsed(limiter: FixedWindowLimiter, inFlight: RequestsInFlight, [key, limit]: Budget, units: number, now: number): void {
  for (let count = 0; count < units; count += 1) limiter.hit(key, now);
  inFlight.spend(key, units, limit, now);
}

/** Ends an admitted request once: counts its outcome, then stops counting it as in flight, in one step. */
function settlement(limiter: FixedWindowLimiter, inFlight: RequestsInFlight, budgets: readonly Budget[]): (outcome: RequestOutcome, now: number) => void {
  let settled = false;
  return (outcome, now) => {
    if (settled) return;
    settled = true;
    budgets.forEach((budget, index) => {
      if (outcome === 'failed' || (outcome === 'kept' && index === 0)) countUsed(limiter, inFlight, budget, 1, now);
      inFlight.end(budget[0]);
    });
  };
}

/** Whether an answer counts as a failed request (DESIGN.md §7): a refusal (4xx) other than 429, which counts nothing. */
export const countsAsFailure = (status: number): boolean => status >= 400 && status < 500 && status !== 429;

/** Counts a refused request (4xx other than 429) that no admission counted (a malformed body, an unknown path) against its address. */
export function countFailure(limiter: FixedWindowLimiter, inFlight: RequestsInFlight, limits: Pick<FailureLimits, 'addressFailures'>, address: string, status: number, now: number): void {
  if (countsAsFailure(status)) countUsed(limiter, inFlight, [addressKey(limitedAddress(address)), limits.addressFailures], 1, now);
}

/** What a page needs to let a request in by admitRequest. */
export interface PageAdmission {
  readonly failures: FixedWindowLimiter;
  readonly inFlight: RequestsInFlight;
  readonly limits: FailureLimits;
  readonly now: () => number;
}

/**
 * A page's `answer`, once the request is let in by admitRequest (its fetches counted first); else the 429 error page.
 * The answer calls `keep` before it writes what stays on the server (it counts, as a failure does); otherwise a
 * refusal it renders counts as a failure, and one it throws is counted by the app's error handler (transport.ts).
 */
export async function answerPageAdmitted(
  deps: PageAdmission,
  request: AdmissionRequest,
  reply: FastifyReply,
  answer: (keep: () => void) => Promise<FastifyReply>,
): Promise<FastifyReply> {
  const admitting = admitRequest(deps.failures, deps.inFlight, deps.limits, request, deps.now);
  const admission = admitting instanceof Promise ? await admitting : admitting;
  if (!admission.ok) return sendErrorPage(reply, admission.error);
  let kept = false;
  try {
    return await answer(() => (kept = true));
  } finally {
    admission.settle(kept ? 'kept' : countsAsFailure(reply.statusCode) ? 'failed' : 'done', deps.now());
  }
}

/**
 * Rate limits on failed requests (DESIGN.md §4: 429 with Retry-After): per address, and per client *per address*,
 * so failures from one address never lock a client out for the addresses that did not fail.
 */
import { OAuthError } from '../policy/oauth-error.js';
import type { FixedWindowLimiter } from './rate-limit.js';

export interface FailureLimits {
  /** Failed requests per client per address, per window. */
  readonly clientFailures: number;
  /** Failed requests per address, per window. */
  readonly addressFailures: number;
}

const addressKey = (address: string): string => `ip:${address}`;
const clientKey = (address: string, clientId: string): string => `client:${address}:${clientId}`;

/** 429 when the address, or this client from this address, has failed too often in the current window. */
export function tooManyFailures(
  limiter: FixedWindowLimiter,
  limits: FailureLimits,
  address: string,
  clientId: string | undefined,
  now: number,
): OAuthError | undefined {
  const verdicts = [limiter.check(addressKey(address), limits.addressFailures, now)];
  if (clientId !== undefined) verdicts.push(limiter.check(clientKey(address, clientId), limits.clientFailures, now));
  const limited = verdicts.find((verdict) => verdict.limited);
  return limited === undefined ? undefined : slowDown(limited.retryAfterSeconds);
}

const slowDown = (retryAfterSeconds: number): OAuthError =>
  new OAuthError('invalid_request', 'too many failed requests; slow down', 429, { 'Retry-After': String(retryAfterSeconds) });

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
  if (status < 400 || status >= 500 || status === 429) return;
  countAgainstAddress(limiter, address, now);
  if (clientId !== undefined) limiter.hit(clientKey(address, clientId), now);
}

/** Counts something an address makes the server keep or do (a login request, a fetch) against its failure budget. */
export function countAgainstAddress(limiter: FixedWindowLimiter, address: string, now: number): void {
  limiter.hit(addressKey(address), now);
}

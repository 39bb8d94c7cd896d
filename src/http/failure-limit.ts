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

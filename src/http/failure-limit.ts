/** Rate limits on failed requests per address and per client (DESIGN.md §4: 429 with Retry-After). */
import { OAuthError } from '../policy/oauth-error.js';
import type { FixedWindowLimiter } from './rate-limit.js';

const keysOf = (address: string, clientId: string | undefined): string[] =>
  clientId === undefined ? [`ip:${address}`] : [`ip:${address}`, `client:${clientId}`];

/** 429 when the address or the client has failed too often in the current window. */
export function tooManyFailures(limiter: FixedWindowLimiter, address: string, clientId: string | undefined, now: number): OAuthError | undefined {
  for (const key of keysOf(address, clientId)) {
    const verdict = limiter.check(key, now);
    if (verdict.limited) {
      return new OAuthError('invalid_request', 'too many failed requests; slow down', 429, { 'Retry-After': String(verdict.retryAfterSeconds) });
    }
  }
  return undefined;
}

/** Counts a refused request (4xx other than 429) against its address and claimed client. */
export function countFailure(limiter: FixedWindowLimiter, address: string, clientId: string | undefined, status: number, now: number): void {
  if (status < 400 || status >= 500 || status === 429) return;
  for (const key of keysOf(address, clientId)) limiter.hit(key, now);
}

/**
 * prompt=login and max_age (OIDC Core §3.1.2.1) when the person signs in at an upstream: what Pinpoint asks the
 * upstream, and which authentication time the upstream's answer lets the session claim. Pure: no I/O, no clock.
 */
import type { LoginPurpose } from '../store/types.js';

/** Clocks differ and auth_time has whole seconds: an authentication this long before the request counts as made for it. */
export const AUTH_TIME_SKEW_MS = 10_000;

/** What the application asked of the person's authentication; empty when it asked nothing (or for a device approval). */
export interface Reauthentication {
  readonly prompt?: 'login';
  /** Seconds. */
  readonly maxAge?: number;
}

export function reauthenticationFor(purpose: LoginPurpose): Reauthentication {
  if (purpose.kind !== 'authorize') return {};
  const { prompt, maxAge } = purpose.authorization;
  return { ...(prompt === 'login' && { prompt }), ...(maxAge !== undefined && { maxAge }) };
}

/**
 * The parameters that pass the request on to the upstream, which holds its own session (OIDC Core §3.1.2.1). With
 * prompt=login, max_age=0 too: it asks nothing more, and only max_age makes auth_time mandatory in the ID token.
 */
export function upstreamParameters(asked: Reauthentication): Record<string, string> {
  const maxAge = asked.prompt === 'login' ? 0 : asked.maxAge;
  return { ...(asked.prompt !== undefined && { prompt: asked.prompt }), ...(maxAge !== undefined && { max_age: String(maxAge) }) };
}

/**
 * The session's authentication time (ms) from the upstream ID token's `auth_time` (seconds), for a sign-in whose login
 * request was made at `askedAt`; undefined when Pinpoint asked for a fresh authentication that the answer does not
 * show (no auth_time, or one too old), so no ID token claims an authentication that did not happen.
 */
export function upstreamAuthTime(asked: Reauthentication, authTime: unknown, askedAt: number, now: number): number | undefined {
  // Never later than now: a clock ahead must not make a session look fresher than it is.
  const at = typeof authTime === 'number' && Number.isFinite(authTime) && authTime >= 0 ? Math.min(authTime * 1000, now) : undefined;
  if (asked.prompt === undefined && asked.maxAge === undefined) return at ?? now;
  if (at === undefined) return undefined;
  // An earlier authentication satisfies max_age (not prompt=login) while it is young enough: it keeps its own time.
  if (asked.prompt === undefined && asked.maxAge !== undefined && now - at <= asked.maxAge * 1000) return at;
  // Made for this request, as a local sign-in after the request is (authorize.ts): it satisfies prompt=login and every
  // max_age. Taken as the request's time at the earliest, so /authorize/resume sees a sign-in made for it.
  if (at >= askedAt - AUTH_TIME_SKEW_MS) return Math.max(at, askedAt);
  return undefined;
}

/** What every route needs, built once at start and passed down (no globals). State is passed separately, narrowed per route. */
import type { Config } from './config/types.js';
import type { SigningKeys } from './crypto/keys.js';
import { cookieSettingsFor, type CookieSettings } from './http/cookies.js';
import { FixedWindowLimiter } from './http/rate-limit.js';

export interface AppLimits {
  /** Failed OAuth requests (4xx) per address and per client, before 429. */
  readonly failuresPerWindow: number;
  readonly failureWindowMs: number;
  /** Wrong passwords per user and per address (DESIGN.md §4: attempt limit). */
  readonly loginFailuresPerUser: number;
  readonly loginFailuresPerAddress: number;
  readonly loginWindowMs: number;
  /** Wrong user codes per address at /device. */
  readonly userCodeFailuresPerAddress: number;
}

export const DEFAULT_LIMITS: AppLimits = {
  failuresPerWindow: 300,
  failureWindowMs: 60_000,
  loginFailuresPerUser: 10,
  loginFailuresPerAddress: 100,
  loginWindowMs: 15 * 60_000,
  userCodeFailuresPerAddress: 20,
};

export interface AppContext {
  readonly config: Config;
  readonly keys: SigningKeys;
  readonly issuer: string;
  readonly now: () => number;
  readonly limits: AppLimits;
  readonly failures: FixedWindowLimiter;
  readonly cookies: CookieSettings;
  /** Origins of the clients' redirect URIs, for CORS at /token, /userinfo, /device_authorization. */
  readonly clientOrigins: ReadonlySet<string>;
  readonly sessionLifetimeMs: number;
  /** Where a sign-in starts: the sign-in page, or the only upstream when there are no local users. */
  readonly signInPage: (loginId: string) => string;
}

export function makeContext(config: Config, keys: SigningKeys, options: { now?: () => number; limits?: Partial<AppLimits> } = {}): AppContext {
  const limits = { ...DEFAULT_LIMITS, ...options.limits };
  const clientOrigins = new Set<string>();
  for (const client of config.clients.values()) {
    for (const uri of client.redirectUris) {
      const origin = new URL(uri).origin;
      if (origin !== 'null') clientOrigins.add(origin);
    }
  }
  const [only, ...others] = [...config.federations.keys()];
  // With no local users and exactly one upstream, a page offering one button is skipped.
  const skipToUpstream = config.users.size === 0 && only !== undefined && others.length === 0;
  return {
    config,
    keys,
    issuer: config.baseUrl,
    now: options.now ?? Date.now,
    limits,
    failures: new FixedWindowLimiter(limits.failuresPerWindow, limits.failureWindowMs),
    cookies: cookieSettingsFor(config.baseUrl, config.basePath),
    clientOrigins,
    sessionLifetimeMs: 12 * 3600_000,
    signInPage: (loginId) =>
      skipToUpstream
        ? `${config.basePath}/federation/start?login=${loginId}&upstream=${encodeURIComponent(only)}`
        : `${config.basePath}/login?login=${loginId}`,
  };
}

/** What every route needs, built once at start and passed down (no globals). */
import type { Config, ClientRecord } from './config/types.js';
import { FixedWindowLimiter } from './http/rate-limit.js';
import type { Store } from './store/types.js';
import type { SigningKeys } from './tokens/keys.js';

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
  readonly store: Store;
  readonly keys: SigningKeys;
  readonly issuer: string;
  readonly now: () => number;
  readonly limits: AppLimits;
  readonly failures: FixedWindowLimiter;
  /** Session cookies are Secure unless the issuer is plain http (loopback only). */
  readonly secureCookies: boolean;
  readonly cookiePath: string;
  /** Origins of the clients' redirect URIs, for CORS at /token, /userinfo, /device_authorization. */
  readonly clientOrigins: ReadonlySet<string>;
  readonly sessionLifetimeMs: number;
}

export function clientById(ctx: AppContext, clientId: string | undefined): ClientRecord | undefined {
  return clientId === undefined ? undefined : ctx.config.clients.get(clientId);
}

export function makeContext(
  config: Config,
  store: Store,
  keys: SigningKeys,
  options: { now?: () => number; limits?: Partial<AppLimits> } = {},
): AppContext {
  const limits = { ...DEFAULT_LIMITS, ...options.limits };
  const clientOrigins = new Set<string>();
  for (const client of config.clients.values()) {
    for (const uri of client.redirectUris) {
      const origin = new URL(uri).origin;
      if (origin !== 'null') clientOrigins.add(origin);
    }
  }
  return {
    config,
    store,
    keys,
    issuer: config.baseUrl,
    now: options.now ?? Date.now,
    limits,
    failures: new FixedWindowLimiter(limits.failuresPerWindow, limits.failureWindowMs),
    secureCookies: config.baseUrl.startsWith('https:'),
    cookiePath: config.basePath === '' ? '/' : config.basePath,
    clientOrigins,
    sessionLifetimeMs: 12 * 3600_000,
  };
}

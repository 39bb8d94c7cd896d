/**
 * The composition root's shared services (after fosite's compose/): built once by buildApp, which hands each plugin
 * only the fields it uses (app.ts). No plugin sees this object or imports this module.
 */
import type { Config } from './config/types.js';
import { VerifiedAccessTokens } from './crypto/jwt.js';
import { KEY_TIMING, type KeyRing, type SigningKeys } from './crypto/keys.js';
import { DEFAULT_PASSWORD_WAIT_MS, passwordWaitingRoom } from './crypto/password-pool.js';
import type { ClientDirectory } from './clients/directory.js';
import { cookieSettingsFor, type CookieSettings } from './http/cookies.js';
import { createMetrics, type Metrics } from './http/metrics.js';
import { FixedWindowLimiter } from './http/rate-limit.js';
import { RequestsInFlight } from './http/failure-limit.js';
import { sharedLimiter, type LimiterLink } from './http/shared-limiter.js';
import { isKnownSubject } from './policy/subjects.js';
import type { AccessTokenStateStore, RevokedTokenStore } from './store/types.js';
import type { AccessTokenStateSources } from './tokens/access-token-state.js';
import type { TokenSigner } from './tokens/response.js';

/** Every limit of DESIGN.md §4, set by the `limits` block (§3); the defaults are the contract's. */
export interface AppLimits {
  /** Failed requests per client per address, per failure window. */
  readonly clientFailures: number;
  /** Failed requests per address, per failure window. */
  readonly addressFailures: number;
  readonly failureWindowMs: number;
  /** Wrong passwords per user per address, per login window: then 429 for that user from that address. */
  readonly loginFailures: number;
  /** Wrong passwords per user from all addresses, per login window: then answers are slowed, never refused (§7). */
  readonly loginFailuresAny: number;
  readonly loginWindowMs: number;
  /** Wrong user codes per address, per user-code window (RFC 8628 §5.1). */
  readonly userCodeFailures: number;
  readonly userCodeWindowMs: number;
  /** Password checks running at once in this process, in hashing threads of their own (DESIGN.md §11). */
  readonly passwordHashes: number;
  /** How long a sign-in waits for a hashing slot before it gets 503 with Retry-After (§11: 5 s). */
  readonly passwordWaitMs: number;
  /** Sign-ins that may wait for a hashing slot at once; more get 503 at once. Always passwordWaitingRoom of the slots. */
  readonly passwordChecksWaiting: number;
  /** A request's headers and body must arrive within this: a sender that trickles them is answered 408 and closed. */
  readonly requestTimeoutMs: number;
  /** Connections one address may hold open at once in this process (trusted proxies are not counted). */
  readonly addressConnections: number;
}

/** The limits the config file does not set (DESIGN.md §4, §11); its `limits` block, always filled, sets the others. */
export const DEFAULT_LIMITS: Pick<AppLimits, 'failureWindowMs' | 'loginWindowMs' | 'userCodeWindowMs' | 'passwordWaitMs' | 'requestTimeoutMs'> = {
  failureWindowMs: 60_000,
  loginWindowMs: 15 * 60_000,
  userCodeWindowMs: 15 * 60_000,
  passwordWaitMs: DEFAULT_PASSWORD_WAIT_MS,
  // Bodies are 64 KiB at most: 30 s is ample on a slow link, and bounds how long a stranger holds a connection open.
  requestTimeoutMs: 30_000,
};

/** Verified access tokens remembered: about 1 KiB each, so at most about 10 MB. */
const REMEMBERED_TOKENS = 10_000;

export interface AppServices {
  readonly config: Config;
  /** The keys in use now, read at each use: a KeyRing swaps them when keys are rotated or retired. */
  readonly keys: () => SigningKeys;
  /** How long JWKS caches may keep /jwks (fits the key timing: a new key is published before it signs). */
  readonly jwksMaxAgeSeconds: number;
  readonly issuer: string;
  readonly now: () => number;
  readonly limits: AppLimits;
  readonly failures: FixedWindowLimiter;
  /** Requests this process is still answering, counted against the failure limits until they end (DESIGN.md §7). */
  readonly inFlight: RequestsInFlight;
  readonly cookies: CookieSettings;
  /** Every client a client_id can name: configured, registered, or by metadata document (DESIGN.md §9). */
  readonly clients: ClientDirectory;
  readonly sessionLifetimeMs: number;
  /** Where a sign-in starts: the sign-in page, or the only upstream when there are no local users. */
  readonly signInPage: (loginId: string) => string;
  readonly metrics: Metrics;
  /** Whether a grant's or session's subject is still a user, or comes from a configured upstream (DESIGN.md §6). */
  readonly isKnownSubject: (subject: string) => boolean;
  /** Access tokens jose has verified, remembered for repeated introspection and exchange (crypto/jwt.ts). */
  readonly verifiedAccessTokens: VerifiedAccessTokens;
  /** Signs token responses with the keys in use now. */
  readonly signer: TokenSigner;
  /** What the one check of a presented access token's state reads (tokens/access-token-state.ts). */
  readonly tokenState: AccessTokenStateSources;
}

export function makeServices(
  config: Config,
  keys: SigningKeys | KeyRing,
  clients: ClientDirectory,
  store: AccessTokenStateStore & RevokedTokenStore,
  options: { now?: () => number; limits?: Partial<AppLimits>; metrics?: Metrics; limiterLink?: LimiterLink; workers?: number } = {},
): AppServices {
  // The config's `limits` block beside the windows it does not set, then what a test asks for (windows, small numbers).
  const chosen = { ...DEFAULT_LIMITS, ...config.limits, ...options.limits };
  const limits: AppLimits = { ...chosen, passwordChecksWaiting: passwordWaitingRoom(chosen.passwordHashes, options.limits?.passwordChecksWaiting) };
  const [only, ...others] = [...config.federations.keys()];
  // With no local users and exactly one upstream, a page offering one button is skipped.
  const skipToUpstream = config.users.size === 0 && only !== undefined && others.length === 0;
  const ring = 'current' in keys ? keys : undefined;
  const fixed = 'current' in keys ? undefined : keys;
  const keysNow = (): SigningKeys => ring?.current ?? (fixed as SigningKeys);
  const now = options.now ?? Date.now;
  const isKnown = (subject: string): boolean => isKnownSubject(subject, config.users, config.federations);
  return {
    config,
    keys: keysNow,
    jwksMaxAgeSeconds: ring?.jwksMaxAgeSeconds ?? KEY_TIMING.jwksMaxAgeSeconds,
    issuer: config.baseUrl,
    now,
    limits,
    failures: shareable('failures', new FixedWindowLimiter(limits.failureWindowMs), options.limiterLink),
    // Each of the server's workers may have its share of a budget in flight (DESIGN.md §11).
    inFlight: new RequestsInFlight(options.workers ?? 1, { windowMs: limits.failureWindowMs, now, ...(options.limiterLink?.budgets !== undefined && { link: options.limiterLink.budgets }) }),
    cookies: cookieSettingsFor(config.baseUrl, config.basePath),
    clients,
    sessionLifetimeMs: 12 * 3600_000,
    metrics: options.metrics ?? createMetrics({ processMetrics: false }),
    isKnownSubject: isKnown,
    verifiedAccessTokens: new VerifiedAccessTokens(REMEMBERED_TOKENS),
    signer: { issuer: config.baseUrl, accessTokenLifetimeMs: config.accessTokenLifetimeMs, keys: keysNow },
    tokenState: {
      store,
      now,
      isKnownClient: (clientId) => clients.isKnownClient(clientId),
      isKnownSubject: isKnown,
      mayExchange: (clientId) => config.clients.get(clientId)?.tokenExchange !== undefined,
    },
    signInPage: (loginId) =>
      skipToUpstream
        ? `${config.basePath}/federation/start?login=${loginId}&upstream=${encodeURIComponent(only)}`
        : `${config.basePath}/login?login=${loginId}`,
  };
}

/** A limiter whose counts hold for every worker (DESIGN.md §11) when there is a link to them; alone, it is itself. */
function shareable(name: string, limiter: FixedWindowLimiter, link: LimiterLink | undefined): FixedWindowLimiter {
  return link === undefined ? limiter : sharedLimiter(name, limiter, link, { replayed: ['hit'] });
}

/**
 * The Store interface of DESIGN.md §6: narrow interfaces, one per kind of state, implemented by
 * memory, SQLite and PostgreSQL. Times are epoch milliseconds. Secrets (codes, refresh tokens,
 * device codes, session ids) are only ever handed to the store as SHA-256 digests (hex).
 * Every method may reject with StoreUnavailableError when the backend cannot be reached.
 */

export interface StoredKey {
  readonly kid: string;
  readonly alg: 'ES256' | 'RS256';
  /** Private JWK as JSON text. */
  readonly privateJwk: string;
  readonly createdAt: number;
}

export interface KeyStore {
  /**
   * Returns the stored keys; when none is stored yet, stores `candidates` and returns them.
   * Safe when several instances start at once: all of them end up with the same keys.
   */
  loadOrCreateKeys(candidates: readonly StoredKey[]): Promise<StoredKey[]>;
}

/** Identity claims remembered from sign-in (local user or upstream). */
export interface SubjectClaims {
  readonly email?: string;
  readonly name?: string;
}

export interface Grant {
  readonly id: string;
  readonly clientId: string;
  readonly subject: string;
  /** Granted scope values, in request order. */
  readonly scope: readonly string[];
  /** Resources named at /authorize, in first-appearance order; empty when none (DESIGN.md §5). */
  readonly resources: readonly string[];
  readonly claims: SubjectClaims;
  /** When the person signed in (epoch ms), for the ID token's auth_time. */
  readonly authTime: number;
  readonly createdAt: number;
  /**
   * The grant and everything under it can be swept after this. A new refresh token extends it past the token's
   * expiry by GRANT_EXPIRY_SLACK_MS, so an active grant's row is rewritten about once a day, not on every rotation.
   */
  readonly expiresAt: number;
}

export interface GrantStore {
  getGrant(grantId: string): Promise<Grant | undefined>;
  /** Deletes the grant with its codes and refresh tokens (RFC 9700 §4.14.2 reuse, code replay). */
  revokeGrant(grantId: string): Promise<void>;
}

export interface AuthorizationCodeRecord {
  readonly digest: string;
  readonly grantId: string;
  readonly clientId: string;
  readonly redirectUri: string;
  readonly codeChallenge: string;
  readonly nonce?: string;
  readonly expiresAt: number;
}

export type CodeLookup =
  | { readonly status: 'active'; readonly code: AuthorizationCodeRecord; readonly grant: Grant }
  /** Already exchanged: the caller revokes `grantId` (RFC 6749 §4.1.2). */
  | { readonly status: 'used'; readonly grantId: string }
  | { readonly status: 'unknown' };

export interface AuthorizationCodeStore {
  /** Stores the grant and its code together (one transaction). */
  createGrantWithCode(grant: Grant, code: AuthorizationCodeRecord): Promise<void>;
  /**
   * Read only: finds a code that is neither expired (at `now`) nor deleted: `used` once consumed,
   * `active` while unused and its grant exists, `unknown` otherwise (expired codes included).
   */
  findCode(digest: string, now: number): Promise<CodeLookup>;
  /**
   * One transaction: marks the code used and, when given, adds the grant's first refresh token (as
   * addRefreshToken); false, and nothing written, when another request used the code first.
   */
  consumeCode(digest: string, now: number, firstRefresh?: RefreshTokenRecord): Promise<boolean>;
}

export interface RefreshTokenRecord {
  readonly digest: string;
  readonly grantId: string;
  readonly issuedAt: number;
  readonly expiresAt: number;
}

export type RefreshLookup =
  | { readonly status: 'active'; readonly token: RefreshTokenRecord; readonly grant: Grant }
  /** Already rotated: reuse, the caller revokes the grant (RFC 9700 §4.14.2). */
  | { readonly status: 'rotated'; readonly grantId: string; readonly clientId: string }
  | { readonly status: 'unknown' };

export interface RefreshTokenStore {
  /** Read only: the token `digest` of grant `grantId`. Expired tokens (at `now`) and tokens of revoked grants are `unknown`. */
  findRefreshToken(grantId: string, digest: string, now: number): Promise<RefreshLookup>;
  /**
   * Adds a refresh token to a grant (after code exchange). When the grant's expiry is before token.expiresAt,
   * it becomes token.expiresAt + GRANT_EXPIRY_SLACK_MS.
   */
  addRefreshToken(token: RefreshTokenRecord): Promise<void>;
  /**
   * One transaction: marks the token `oldDigest` of grant next.grantId rotated if it is still active and adds
   * `next`, extending the grant's expiry as addRefreshToken does. False (and nothing written) when the old token
   * was no longer active.
   */
  rotateRefreshToken(oldDigest: string, next: RefreshTokenRecord, now: number): Promise<boolean>;
}

export type DeviceStatus = 'pending' | 'approved' | 'denied' | 'redeemed';

export interface DeviceAuthorizationRecord {
  readonly deviceCodeDigest: string;
  /** Normalised: 8 characters, upper case, no dash. */
  readonly userCode: string;
  readonly clientId: string;
  readonly scope: readonly string[];
  readonly status: DeviceStatus;
  /** Seconds between polls; grows by 5 on slow_down (RFC 8628 §3.5). */
  readonly intervalSeconds: number;
  readonly lastPolledAt?: number;
  readonly subject?: string;
  readonly claims?: SubjectClaims;
  readonly authTime?: number;
  readonly createdAt: number;
  readonly expiresAt: number;
}

export interface DeviceCodeStore {
  /** Rejects when another unexpired record holds the same user code (the caller draws another). */
  createDeviceAuthorization(record: DeviceAuthorizationRecord): Promise<void>;
  findByUserCode(userCode: string, now: number): Promise<DeviceAuthorizationRecord | undefined>;
  /** Includes expired records (so polling can answer expired_token); undefined when unknown. */
  findByDeviceCode(deviceCodeDigest: string): Promise<DeviceAuthorizationRecord | undefined>;
  /** Records a poll at `now`; when `tooFast`, the record's intervalSeconds grows by 5 (RFC 8628 §3.5 slow_down). */
  recordPoll(deviceCodeDigest: string, now: number, tooFast: boolean): Promise<void>;
  /** pending -> approved|denied, only while pending and unexpired; false otherwise. */
  decideDeviceAuthorization(
    userCode: string,
    decision: { approved: true; subject: string; claims: SubjectClaims; authTime: number } | { approved: false },
    now: number,
  ): Promise<boolean>;
  /**
   * One transaction: approved -> redeemed, creating `grant` and (optionally) its first refresh token.
   * False (nothing written) when the record is not approved (or already redeemed) or has expired at `now`.
   */
  redeemDeviceCode(deviceCodeDigest: string, grant: Grant, refresh: RefreshTokenRecord | undefined, now: number): Promise<boolean>;
}

export interface SessionRecord {
  /** SHA-256 of the cookie value. */
  readonly digest: string;
  readonly subject: string;
  readonly claims: SubjectClaims;
  readonly authTime: number;
  readonly expiresAt: number;
}

export interface SessionStore {
  createSession(session: SessionRecord): Promise<void>;
  findSession(digest: string, now: number): Promise<SessionRecord | undefined>;
  deleteSession(digest: string): Promise<void>;
}

/** Short-lived records keyed by kind and id: pending /authorize requests, upstream sign-in state. */
export interface TransientStore {
  putTransient(kind: string, id: string, value: unknown, expiresAt: number): Promise<void>;
  getTransient<T>(kind: string, id: string, now: number): Promise<T | undefined>;
  /** Reads and deletes atomically, so one id is taken once. */
  takeTransient<T>(kind: string, id: string, now: number): Promise<T | undefined>;
}

export interface AttemptStore {
  /**
   * Adds one attempt for `key` in a fixed window; returns the count in it, this one included. A window
   * starts at the first attempt after the previous one ended and lasts `windowMs`.
   */
  countAttempt(key: string, now: number, windowMs: number): Promise<number>;
  /** The count in the current window without adding one. */
  peekAttempts(key: string, now: number): Promise<number>;
  clearAttempts(key: string): Promise<void>;
}

export interface Store
  extends KeyStore,
    GrantStore,
    AuthorizationCodeStore,
    RefreshTokenStore,
    DeviceCodeStore,
    SessionStore,
    TransientStore,
    AttemptStore {
  /** What `pinpoint check` and the startup log show; never a password. */
  readonly description: string;
  /** Resolves when the backend answers (readiness). */
  ping(): Promise<void>;
  /** Deletes what expired before `now`; never holds a lock long enough to block requests. */
  sweep(now: number): Promise<void>;
  close(): Promise<void>;
}

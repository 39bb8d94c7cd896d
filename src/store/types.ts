/**
 * The Store interface of DESIGN.md §6: narrow interfaces, one per kind of state, implemented by
 * memory, SQLite and PostgreSQL. Times are epoch milliseconds. Secrets (codes, refresh tokens,
 * device codes, session ids) are only ever handed to the store as SHA-256 digests (hex).
 * Every method may reject with StoreUnavailableError when the backend cannot be reached.
 */

// Signing keys and refresh-token records are crypto's shapes; the store keeps them as they are.
export type { KeyEvent, KeyStore, StoredKey } from '../crypto/keys.js';
export type { RefreshTokenRecord } from '../crypto/refresh-token.js';
import type { KeyStore } from '../crypto/keys.js';
import type { RefreshTokenRecord } from '../crypto/refresh-token.js';
import type { UsedOnce } from '../crypto/used-once.js';

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
  /** Deletes the grant with its codes and refresh tokens (RFC 9700 §4.14.2 reuse, code replay, /revoke). */
  revokeGrant(grantId: string): Promise<void>;
  /** The grant while it lives (not revoked, unexpired at `now`): one lookup by primary key. */
  findGrant(grantId: string, now: number): Promise<Grant | undefined>;
}

/** Who holds a live grant, and whether one access token of it was revoked by its jti alone (an exchanged token's). */
export interface GrantHolding {
  readonly clientId: string;
  readonly subject: string;
  readonly tokenRevoked: boolean;
}

/** The one read behind every presented access token of a grant (/introspect, /userinfo, token exchange, DESIGN.md §8). */
export interface AccessTokenStateStore {
  /**
   * The live grant's holder and, when `jti` is given, that token's own revocation, in one lookup; undefined when the
   * grant is gone or expired. Only an exchanged token's jti is ever revoked alone, so others pass none.
   */
  findGrantHolding(grantId: string, jti: string | undefined, now: number): Promise<GrantHolding | undefined>;
}

/** Which grants an operator means (`pinpoint grants ... --user U --client C`); both absent: every grant. */
export interface GrantFilter {
  readonly subject?: string;
  readonly clientId?: string;
}

export interface GrantSummary {
  readonly grant: Grant;
  /** When its newest refresh token was issued; absent when it never got one. */
  readonly lastRefreshAt?: number;
}

/** What `pinpoint grants` reads and changes. */
export interface GrantAdminStore {
  /** Live grants (unexpired at `now`) matching `filter`, oldest first. */
  listGrants(filter: GrantFilter, now: number): Promise<GrantSummary[]>;
  /**
   * Revokes every grant matching `filter` (as revokeGrant); the number revoked. A filter naming a client also
   * forgets the consents it matches (DESIGN.md §9: `pinpoint grants revoke --client`).
   */
  revokeGrants(filter: GrantFilter): Promise<number>;
}

/** Access tokens without a grant (client_credentials) revoked at /revoke, kept until they would have expired. */
export interface RevokedTokenStore {
  revokeAccessToken(jti: string, expiresAt: number): Promise<void>;
  isAccessTokenRevoked(jti: string, now: number): Promise<boolean>;
}

export interface AuthorizationCodeRecord {
  readonly digest: string;
  readonly grantId: string;
  readonly clientId: string;
  readonly redirectUri: string;
  readonly codeChallenge: string;
  readonly nonce?: string;
  readonly expiresAt: number;
  /** RFC 9449 §10: the JWK thumbprint the authorization request named (dpop_jkt); only a proof by that key exchanges it. */
  readonly boundKey?: string;
}

export type CodeLookup =
  | { readonly status: 'active'; readonly code: AuthorizationCodeRecord; readonly grant: Grant }
  /** Already exchanged: once the request is otherwise valid for `code`'s client, the caller revokes its grant (RFC 6749 §4.1.2). */
  | { readonly status: 'used'; readonly code: AuthorizationCodeRecord }
  | { readonly status: 'unknown' };

export interface AuthorizationCodeStore {
  /** Stores the grant and its code together (one transaction). */
  createGrantWithCode(grant: Grant, code: AuthorizationCodeRecord): Promise<void>;
  /**
   * Read only: `active` while unused, unexpired at `now` and its grant exists; `used` once consumed, also after
   * it expired, for as long as its grant lives (DESIGN.md §6: replay revokes also after 60 s); `unknown` otherwise.
   */
  findCode(digest: string, now: number): Promise<CodeLookup>;
  /**
   * One transaction: marks the code used, keeps its grant until at least `grantUntil` (the access token's expiry,
   * so introspection finds the grant while its tokens live) and, when given, adds the grant's first refresh token
   * (extending the grant as a rotation does); false, and nothing written, when another request used the code first.
   */
  consumeCode(digest: string, now: number, grantUntil: number, firstRefresh?: RefreshTokenRecord): Promise<boolean>;
}


export type RefreshLookup =
  | { readonly status: 'active'; readonly token: RefreshTokenRecord; readonly grant: Grant }
  /** Already rotated (at `rotatedAt`): reuse, unless within the client's refresh_reuse_grace (DESIGN.md §6). */
  | { readonly status: 'rotated'; readonly grantId: string; readonly clientId: string; readonly rotatedAt: number; readonly boundKey?: string }
  | { readonly status: 'unknown' };

export interface RefreshTokenStore {
  /** Read only: the token `digest` of grant `grantId`. Expired tokens (at `now`) and tokens of revoked grants are `unknown`. */
  findRefreshToken(grantId: string, digest: string, now: number): Promise<RefreshLookup>;
  /**
   * One transaction: marks the token `oldDigest` of grant next.grantId rotated if it is still active and adds
   * `next`, extending the grant's expiry as addRefreshToken does. False (and nothing written) when the old token
   * was no longer active. `grantExpiresAt`, the grant's expiry as the caller read it, spares the grant's row a
   * statement when it already outlives `next` (rules.ts mayNeedExtension).
   */
  rotateRefreshToken(oldDigest: string, next: RefreshTokenRecord, now: number, grantExpiresAt?: number): Promise<boolean>;
  /**
   * Adds a sibling refresh token to a live grant, extending it as a rotation does (the reuse grace of DESIGN.md §6:
   * a just-rotated token presented again gets a fresh token of the same grant). False, nothing written, when the
   * grant is gone or expired at `now`.
   */
  addRefreshToken(token: RefreshTokenRecord, now: number): Promise<boolean>;
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
  /** Adds `session`, ending the one whose digest is `replaces` (the browser's session before a sign-in) in the same step. */
  createSession(session: SessionRecord, replaces?: string): Promise<void>;
  findSession(digest: string, now: number): Promise<SessionRecord | undefined>;
  deleteSession(digest: string): Promise<void>;
  /** Ends every session of `subject` (`pinpoint grants revoke --user`); the number ended. */
  deleteSessionsOf(subject: string): Promise<number>;
}

/** A validated /authorize request kept on the server while the person signs in (DESIGN.md §4). */
export interface PendingAuthorization {
  readonly clientId: string;
  readonly redirectUri: string;
  readonly state?: string;
  readonly nonce?: string;
  readonly codeChallenge: string;
  readonly scope: readonly string[];
  /** Repeats counted once, first-appearance order (DESIGN.md §5). */
  readonly resources: readonly string[];
  readonly prompt?: 'none' | 'login' | 'consent';
  /** Seconds (OIDC max_age). */
  readonly maxAge?: number;
  /** RFC 9449 §10: the DPoP key (JWK SHA-256 thumbprint) the code will be bound to, from dpop_jkt or a proof at /par. */
  readonly dpopJkt?: string;
}

/** What a sign-in is for: an authorization to resume at /authorize/resume, or a device approval. */
export type LoginPurpose =
  | { readonly kind: 'authorize'; readonly authorization: PendingAuthorization }
  | { readonly kind: 'device'; readonly userCode: string };

export interface LoginRequestRecord {
  /** Random, in the sign-in page's URL. */
  readonly id: string;
  readonly purpose: LoginPurpose;
  /** SHA-256 (hex) of the browser's CSRF cookie: only the browser that started may resume. */
  readonly browser: string;
  readonly createdAt: number;
  readonly expiresAt: number;
}

export interface LoginRequestStore {
  saveLoginRequest(record: LoginRequestRecord): Promise<void>;
  /** Unexpired at `now`, or undefined. */
  findLoginRequest(id: string, now: number): Promise<LoginRequestRecord | undefined>;
  /** Reads and deletes atomically, so a finished sign-in is resumed once. */
  takeLoginRequest(id: string, now: number): Promise<LoginRequestRecord | undefined>;
}

/** An upstream sign-in in flight (Pinpoint as relying party), keyed by the `state` sent upstream. */
export interface FederationStateRecord {
  readonly state: string;
  readonly loginId: string;
  readonly upstream: string;
  readonly codeVerifier: string;
  readonly nonce: string;
  /** SHA-256 of the browser's CSRF cookie (RFC 6749 §10.12). */
  readonly browser: string;
  readonly expiresAt: number;
}

export interface FederationStateStore {
  saveFederationState(record: FederationStateRecord): Promise<void>;
  /** Reads and deletes atomically; undefined when unknown or expired at `now`. */
  /** Read only: unexpired at `now`, or undefined (the callback checks it before taking it). */
  findFederationState(state: string, now: number): Promise<FederationStateRecord | undefined>;
  takeFederationState(state: string, now: number): Promise<FederationStateRecord | undefined>;
}

/** Claims of upstream (federated) subjects, kept so /userinfo can answer for refreshed tokens. */
export interface SubjectClaimsStore {
  /** Inserts or replaces the subject's claims. */
  saveSubjectClaims(subject: string, claims: SubjectClaims, expiresAt: number): Promise<void>;
  findSubjectClaims(subject: string, now: number): Promise<SubjectClaims | undefined>;
}

/** What a client registered about itself at /register (RFC 7591), as stored and answered. */
export interface RegisteredClientMetadata {
  readonly redirect_uris: readonly string[];
  readonly token_endpoint_auth_method: 'none' | 'client_secret_basic' | 'client_secret_post';
  readonly grant_types: readonly ('authorization_code' | 'refresh_token')[];
  readonly response_types: readonly ['code'];
  readonly application_type?: 'native' | 'web';
  readonly client_name?: string;
  readonly client_uri?: string;
  readonly logo_uri?: string;
  readonly scope?: string;
  /** RFC 9449 §5.2: every access token of this client must be DPoP-bound (DESIGN.md §13). */
  readonly dpop_bound_access_tokens?: boolean;
}

export interface RegisteredClientRecord {
  readonly clientId: string;
  /** SHA-256 (hex) of the client secret, for clients registered with one; never the secret. */
  readonly secretDigest?: string;
  readonly metadata: RegisteredClientMetadata;
  readonly createdAt: number;
  /** Removed by the sweep after this when no grant of it is left (DESIGN.md §9). */
  readonly expiresAt: number;
}

export interface RegisteredClientStore {
  /** Rejects when the client id is already registered. */
  saveRegisteredClient(record: RegisteredClientRecord): Promise<void>;
  /** The registration until the sweep removes it (an expired one with grants left is still found). */
  findRegisteredClient(clientId: string): Promise<RegisteredClientRecord | undefined>;
  /** Keeps the client at least until `until` (a grant was made for it); never shortens. */
  keepRegisteredClient(clientId: string, until: number): Promise<void>;
  /** Removes the registration and the consents given to it (its grants are revoked separately); false when there was none. */
  deleteRegisteredClient(clientId: string): Promise<boolean>;
}

/**
 * What a person allowed a dynamic client for one redirect origin (DESIGN.md §8), remembered until a request asks more.
 * Kept without expiry; forgotten with the client's registration (deleted or swept) and by revokeGrants naming the client.
 */
export interface ConsentRecord {
  readonly subject: string;
  readonly clientId: string;
  /** Where the codes go (policy/consent.ts redirectOriginOf): a consent counts only for that origin. */
  readonly redirectOrigin: string;
  readonly scope: readonly string[];
  /** Resources allowed; the whole audience was allowed when `wholeAudience`. */
  readonly resources: readonly string[];
  readonly wholeAudience: boolean;
  readonly grantedAt: number;
}

export interface ConsentStore {
  findConsent(subject: string, clientId: string, redirectOrigin: string): Promise<ConsentRecord | undefined>;
  /** Inserts or replaces the (subject, client, redirect origin) consent. */
  saveConsent(record: ConsentRecord): Promise<void>;
}

export interface AttemptStore {
  /**
   * Adds one attempt for `key` in a fixed window; returns the count in it, this one included. A window
   * starts at the first attempt after the previous one ended and lasts `windowMs`.
   */
  countAttempt(key: string, now: number, windowMs: number): Promise<number>;
  /** The count in the current window without adding one. */
  peekAttempts(key: string, now: number): Promise<number>;
  /** Takes one attempt back (an attempt counted before it turned out to be right), never below zero; nothing when the window has ended; a counter taken back to zero is removed. */
  forgiveAttempt(key: string, now: number): Promise<void>;
  clearAttempts(key: string): Promise<void>;
}

/** What may be presented only once (DESIGN.md §13): a DPoP proof's jti (RFC 9449 §11.1), a client assertion's (RFC 7523 §3). */
export type ReplayKind = 'dpop' | 'client_assertion';

/** One credential to record as used: its kind, and its id until it could no longer be accepted (crypto/used-once.ts). */
export interface UsedOnceEntry extends UsedOnce {
  readonly kind: ReplayKind;
}

/** What recording a request's one-time credentials answers: `used` names the first entry found recorded already. */
export type UsedOnceOutcome = { readonly ok: true } | { readonly ok: false; readonly used: ReplayKind };

export interface ReplayStore {
  /**
   * Records every entry (each a distinct credential) as used until its expiresAt, all or none: ok for the one request
   * that records them; when one is recorded already and unexpired at `now`, nothing changes and `used` names its kind
   * (the first such in the list). Across workers and instances sharing the store; an expired record is taken over.
   */
  markAllUsedOnce(entries: readonly UsedOnceEntry[], now: number): Promise<UsedOnceOutcome>;
  /** Whether `id` of `kind` is recorded as used and unexpired at `now`; reads only. */
  isUsedOnce(kind: ReplayKind, id: string, now: number): Promise<boolean>;
}

/** A pushed authorization request (RFC 9126): the /authorize parameters as sent to /par, for its client only. */
export interface PushedRequestRecord {
  /** SHA-256 (hex) of the request_uri. */
  readonly digest: string;
  readonly clientId: string;
  /** Every parameter with every value sent, in order, as /authorize will read them. */
  readonly parameters: readonly (readonly [string, readonly string[]])[];
  readonly expiresAt: number;
}

export interface PushedRequestStore {
  savePushedRequest(record: PushedRequestRecord): Promise<void>;
  /** Read only: the request `digest` names if it was pushed by `clientId` and is unexpired and unused at `now`. */
  findPushedRequest(digest: string, clientId: string, now: number): Promise<PushedRequestRecord | undefined>;
  /** Uses it up atomically: true for the one request that takes it (single use, RFC 9126 §4), false otherwise. */
  takePushedRequest(digest: string, clientId: string, now: number): Promise<boolean>;
}

export interface Store
  extends KeyStore,
    GrantStore,
    GrantAdminStore,
    RevokedTokenStore,
    AccessTokenStateStore,
    AuthorizationCodeStore,
    RefreshTokenStore,
    DeviceCodeStore,
    SessionStore,
    LoginRequestStore,
    FederationStateStore,
    SubjectClaimsStore,
    RegisteredClientStore,
    ConsentStore,
    AttemptStore,
    ReplayStore,
    PushedRequestStore {
  /** What `pinpoint check` and the startup log show; never a password. */
  readonly description: string;
  /** Resolves when the backend answers (readiness). */
  ping(): Promise<void>;
  /**
   * Deletes what expired before `now` (a registered client once no grant of it is left, with its consents); never
   * holds a lock long enough to block requests.
   */
  sweep(now: number): Promise<void>;
  close(): Promise<void>;
}

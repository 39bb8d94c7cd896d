/** Row shapes shared by the SQLite and PostgreSQL stores, and their mapping to the records of types.ts. */
import type {
  AuthorizationCodeRecord,
  CodeLookup,
  ConsentRecord,
  DeviceAuthorizationRecord,
  DeviceStatus,
  FederationStateRecord,
  Grant,
  GrantHolding,
  GrantSummary,
  LoginPurpose,
  LoginRequestRecord,
  PushedRequestRecord,
  RefreshLookup,
  RefreshTokenRecord,
  RegisteredClientMetadata,
  RegisteredClientRecord,
  SessionRecord,
  StoredKey,
  SubjectClaims,
} from './types.js';

/** SQLite gives numbers; PostgreSQL gives BIGINT as text. */
type Numeric = number | string | bigint;

/** SQLite gives 0 or 1 for a BOOLEAN column; PostgreSQL true or false. */
const isTrue = (value: number | boolean): boolean => value === true || value === 1;

/** A boolean parameter as both accept it (better-sqlite3 binds no booleans; PostgreSQL reads 1 and 0 as boolean). */
const booleanParam = (value: boolean): number => (value ? 1 : 0);

/** Grant columns as selected by the lookups (aliased `g_*` so they can be joined with a child row). */
export const GRANT_COLUMNS =
  'g.id AS g_id, g.client_id AS g_client_id, g.subject AS g_subject, g.scope AS g_scope, g.resources AS g_resources, ' +
  'g.claims AS g_claims, g.auth_time AS g_auth_time, g.created_at AS g_created_at, g.expires_at AS g_expires_at';

export interface GrantRow {
  g_id: string | null;
  g_client_id: string | null;
  g_subject: string | null;
  g_scope: string | null;
  g_resources: string | null;
  g_claims: string | null;
  g_auth_time: Numeric | null;
  g_created_at: Numeric | null;
  g_expires_at: Numeric | null;
}

/** The grant of a row selected with GRANT_COLUMNS; undefined when the join found none. */
export function grantFromRow(row: GrantRow): Grant | undefined {
  if (row.g_id === null || row.g_client_id === null || row.g_subject === null) return undefined;
  return {
    id: row.g_id,
    clientId: row.g_client_id,
    subject: row.g_subject,
    scope: JSON.parse(row.g_scope ?? '[]') as string[],
    resources: JSON.parse(row.g_resources ?? '[]') as string[],
    claims: JSON.parse(row.g_claims ?? '{}') as SubjectClaims,
    authTime: Number(row.g_auth_time),
    createdAt: Number(row.g_created_at),
    expiresAt: Number(row.g_expires_at),
  };
}

export interface GrantHoldingRow {
  client_id: string;
  subject: string;
  expires_at: Numeric;
  /** EXISTS: 0 or 1 in SQLite, a boolean in PostgreSQL. */
  token_revoked: number | boolean;
}

export const grantHoldingFromRow = (row: GrantHoldingRow): GrantHolding => ({ clientId: row.client_id, subject: row.subject, tokenRevoked: isTrue(row.token_revoked) });

export interface GrantSummaryRow extends GrantRow {
  last_refresh_at: Numeric | null;
}

/** A row of listGrants: a live grant and when its newest refresh token was issued. */
export function grantSummaryFromRow(row: GrantSummaryRow): GrantSummary | undefined {
  const grant = grantFromRow(row);
  if (grant === undefined) return undefined;
  return row.last_refresh_at === null ? { grant } : { grant, lastRefreshAt: Number(row.last_refresh_at) };
}

/** Insert parameters, in the column order of the grants table. */
export const grantParams = (grant: Grant): unknown[] => [
  grant.id,
  grant.clientId,
  grant.subject,
  JSON.stringify(grant.scope),
  JSON.stringify(grant.resources),
  JSON.stringify(grant.claims),
  grant.authTime,
  grant.createdAt,
  grant.expiresAt,
];

export interface KeyRow {
  kid: string;
  alg: string;
  private_jwk: string;
  created_at: Numeric;
  retired_at: Numeric | null;
}

/** Insert parameters, in the column order of the keys table. */
export const keyParams = (key: StoredKey): unknown[] => [key.kid, key.alg, key.privateJwk, key.createdAt, key.retiredAt ?? null];

export const keyFromRow = (row: KeyRow): StoredKey => ({
  kid: row.kid,
  alg: row.alg === 'RS256' ? 'RS256' : 'ES256',
  privateJwk: row.private_jwk,
  createdAt: Number(row.created_at),
  ...(row.retired_at === null ? {} : { retiredAt: Number(row.retired_at) }),
});

export interface CodeRow extends GrantRow {
  code_digest: string;
  code_grant_id: string;
  code_client_id: string;
  redirect_uri: string;
  code_challenge: string;
  nonce: string | null;
  code_expires_at: Numeric;
  used: number | boolean;
  code_dpop_jkt: string | null;
}

/**
 * findCode's answer for a code row joined with its grant: a used code stays `used` past its expiry for as long as
 * its grant exists (DESIGN.md §6: replay revokes also after 60 s); an unused one is `active` until it expires.
 */
export function codeLookupFromRow(row: CodeRow | undefined, now: number): CodeLookup {
  if (row === undefined) return { status: 'unknown' };
  const grant = grantFromRow(row);
  if (grant === undefined) return { status: 'unknown' };
  const code: AuthorizationCodeRecord = {
    digest: row.code_digest,
    grantId: row.code_grant_id,
    clientId: row.code_client_id,
    redirectUri: row.redirect_uri,
    codeChallenge: row.code_challenge,
    ...(row.nonce === null ? {} : { nonce: row.nonce }),
    expiresAt: Number(row.code_expires_at),
    ...(row.code_dpop_jkt === null ? {} : { boundKey: row.code_dpop_jkt }),
  };
  if (isTrue(row.used)) return { status: 'used', code };
  return code.expiresAt > now ? { status: 'active', code, grant } : { status: 'unknown' };
}

/** Insert parameters, in the column order of the authorization_codes table. */
export const codeParams = (code: AuthorizationCodeRecord): unknown[] => [
  code.digest,
  code.grantId,
  code.clientId,
  code.redirectUri,
  code.codeChallenge,
  code.nonce ?? null,
  code.expiresAt,
  code.boundKey ?? null,
];

export interface RefreshRow extends GrantRow {
  token_digest: string;
  token_grant_id: string;
  issued_at: Numeric;
  token_expires_at: Numeric;
  status: string;
  rotated_at: Numeric | null;
  dpop_jkt: string | null;
}

/** findRefreshToken's answer for a token row joined with its grant. */
export function refreshLookupFromRow(row: RefreshRow | undefined, now: number): RefreshLookup {
  if (row === undefined || Number(row.token_expires_at) <= now) return { status: 'unknown' };
  const grant = grantFromRow(row);
  if (grant === undefined) return { status: 'unknown' };
  const bound = row.dpop_jkt === null ? {} : { boundKey: row.dpop_jkt };
  // Rotated before migration 5 recorded when: long ago, so never within a reuse grace.
  if (row.status !== 'active') return { status: 'rotated', grantId: grant.id, clientId: grant.clientId, rotatedAt: Number(row.rotated_at ?? 0), ...bound };
  const token: RefreshTokenRecord = {
    digest: row.token_digest,
    grantId: row.token_grant_id,
    issuedAt: Number(row.issued_at),
    expiresAt: Number(row.token_expires_at),
    ...bound,
  };
  return { status: 'active', token, grant };
}

/** Insert parameters, in the column order of the refresh_tokens table (its first four columns). */
export const refreshTokenParams = (token: RefreshTokenRecord): unknown[] => [token.grantId, token.digest, token.issuedAt, token.expiresAt];

/** The parameters of sql.ts insertRefreshToken: refreshTokenParams, then the key it is bound to (RFC 9449 §5) or NULL. */
export const refreshTokenInsertParams = (token: RefreshTokenRecord): unknown[] => [...refreshTokenParams(token), token.boundKey ?? null];

export interface DeviceRow {
  device_code_digest: string;
  user_code: string;
  client_id: string;
  scope: string;
  status: string;
  interval_seconds: Numeric;
  last_polled_at: Numeric | null;
  subject: string | null;
  claims: string | null;
  auth_time: Numeric | null;
  created_at: Numeric;
  expires_at: Numeric;
}

export const DEVICE_COLUMNS =
  'device_code_digest, user_code, client_id, scope, status, interval_seconds, last_polled_at, subject, claims, auth_time, created_at, expires_at';

export const deviceFromRow = (row: DeviceRow): DeviceAuthorizationRecord => ({
  deviceCodeDigest: row.device_code_digest,
  userCode: row.user_code,
  clientId: row.client_id,
  scope: JSON.parse(row.scope) as string[],
  status: row.status as DeviceStatus,
  intervalSeconds: Number(row.interval_seconds),
  ...(row.last_polled_at === null ? {} : { lastPolledAt: Number(row.last_polled_at) }),
  ...(row.subject === null ? {} : { subject: row.subject }),
  ...(row.claims === null ? {} : { claims: JSON.parse(row.claims) as SubjectClaims }),
  ...(row.auth_time === null ? {} : { authTime: Number(row.auth_time) }),
  createdAt: Number(row.created_at),
  expiresAt: Number(row.expires_at),
});

/** Insert parameters, in the order of DEVICE_COLUMNS. */
export const deviceParams = (record: DeviceAuthorizationRecord): unknown[] => [
  record.deviceCodeDigest,
  record.userCode,
  record.clientId,
  JSON.stringify(record.scope),
  record.status,
  record.intervalSeconds,
  record.lastPolledAt ?? null,
  record.subject ?? null,
  record.claims === undefined ? null : JSON.stringify(record.claims),
  record.authTime ?? null,
  record.createdAt,
  record.expiresAt,
];

export interface SessionRow {
  digest: string;
  subject: string;
  claims: string;
  auth_time: Numeric;
  expires_at: Numeric;
}

export const sessionFromRow = (row: SessionRow): SessionRecord => ({
  digest: row.digest,
  subject: row.subject,
  claims: JSON.parse(row.claims) as SubjectClaims,
  authTime: Number(row.auth_time),
  expiresAt: Number(row.expires_at),
});

/** Insert parameters, in the column order of the sessions table. */
export const sessionParams = (session: SessionRecord): unknown[] => [
  session.digest,
  session.subject,
  JSON.stringify(session.claims),
  session.authTime,
  session.expiresAt,
];

export interface LoginRequestRow {
  id: string;
  purpose: string;
  browser: string;
  created_at: Numeric;
  expires_at: Numeric;
}

export const loginRequestFromRow = (row: LoginRequestRow): LoginRequestRecord => ({
  id: row.id,
  purpose: JSON.parse(row.purpose) as LoginPurpose,
  browser: row.browser,
  createdAt: Number(row.created_at),
  expiresAt: Number(row.expires_at),
});

/** Insert parameters, in the column order of the login_requests table. */
export const loginRequestParams = (record: LoginRequestRecord): unknown[] => [
  record.id,
  JSON.stringify(record.purpose),
  record.browser,
  record.createdAt,
  record.expiresAt,
];

export interface FederationStateRow {
  state: string;
  login_id: string;
  upstream: string;
  code_verifier: string;
  nonce: string;
  browser: string;
  expires_at: Numeric;
}

export const federationStateFromRow = (row: FederationStateRow): FederationStateRecord => ({
  state: row.state,
  loginId: row.login_id,
  upstream: row.upstream,
  codeVerifier: row.code_verifier,
  nonce: row.nonce,
  browser: row.browser,
  expiresAt: Number(row.expires_at),
});

/** Insert parameters, in the column order of the federation_states table. */
export const federationStateParams = (record: FederationStateRecord): unknown[] => [
  record.state,
  record.loginId,
  record.upstream,
  record.codeVerifier,
  record.nonce,
  record.browser,
  record.expiresAt,
];

export const REGISTERED_CLIENT_COLUMNS = 'client_id, secret_digest, metadata, created_at, expires_at';

export interface RegisteredClientRow {
  client_id: string;
  secret_digest: string | null;
  metadata: string;
  created_at: Numeric;
  expires_at: Numeric;
}

export const registeredClientFromRow = (row: RegisteredClientRow): RegisteredClientRecord => ({
  clientId: row.client_id,
  ...(row.secret_digest === null ? {} : { secretDigest: row.secret_digest }),
  metadata: JSON.parse(row.metadata) as RegisteredClientMetadata,
  createdAt: Number(row.created_at),
  expiresAt: Number(row.expires_at),
});

/** Insert parameters, in the order of REGISTERED_CLIENT_COLUMNS. */
export const registeredClientParams = (record: RegisteredClientRecord): unknown[] => [
  record.clientId,
  record.secretDigest ?? null,
  JSON.stringify(record.metadata),
  record.createdAt,
  record.expiresAt,
];

export const CONSENT_COLUMNS = 'subject, client_id, redirect_origin, scope, resources, whole_audience, granted_at';

export interface ConsentRow {
  subject: string;
  client_id: string;
  redirect_origin: string;
  scope: string;
  resources: string;
  whole_audience: number | boolean;
  granted_at: Numeric;
}

export const consentFromRow = (row: ConsentRow): ConsentRecord => ({
  subject: row.subject,
  clientId: row.client_id,
  redirectOrigin: row.redirect_origin,
  scope: JSON.parse(row.scope) as string[],
  resources: JSON.parse(row.resources) as string[],
  wholeAudience: isTrue(row.whole_audience),
  grantedAt: Number(row.granted_at),
});

/** Insert parameters, in the order of CONSENT_COLUMNS. */
export const consentParams = (record: ConsentRecord): unknown[] => [
  record.subject,
  record.clientId,
  record.redirectOrigin,
  JSON.stringify(record.scope),
  JSON.stringify(record.resources),
  booleanParam(record.wholeAudience),
  record.grantedAt,
];

export interface PushedRequestRow {
  digest: string;
  client_id: string;
  parameters: string;
  expires_at: Numeric;
}

export const pushedRequestFromRow = (row: PushedRequestRow): PushedRequestRecord => ({
  digest: row.digest,
  clientId: row.client_id,
  parameters: JSON.parse(row.parameters) as PushedRequestRecord['parameters'],
  expiresAt: Number(row.expires_at),
});

/** Insert parameters, in the column order of the pushed_requests table. */
export const pushedRequestParams = (record: PushedRequestRecord): unknown[] => [
  record.digest,
  record.clientId,
  JSON.stringify(record.parameters),
  record.expiresAt,
];

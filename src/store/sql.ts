/**
 * Every statement of the SQLite and PostgreSQL stores, written once: `$n` parameters, SQL both accept (ON CONFLICT,
 * RETURNING, CAST), unqualified table names (PostgreSQL finds them on the connection's search_path). dialect.ts
 * adapts a statement to SQLite; rows.ts maps the rows and parameters.
 */
import { SKIP_LOCKED } from './dialect.js';
import { CONSENT_COLUMNS, DEVICE_COLUMNS, GRANT_COLUMNS, REGISTERED_CLIENT_COLUMNS } from './rows.js';
import type { GrantFilter } from './types.js';

export interface Statement {
  /** Unique: PostgreSQL prepares the statement under this name once per connection. */
  readonly name: string;
  readonly text: string;
}

/** Rows per DELETE when sweeping, so no statement holds a lock for long. */
export const SWEEP_BATCH = 500;

/** Up to SWEEP_BATCH rows of `table` (keyed by `key`) meeting `condition`, skipping rows another transaction holds. */
const sweepBatch = (table: string, key: string, condition: string): string =>
  `DELETE FROM ${table} WHERE (${key}) IN (SELECT ${key} FROM ${table} WHERE ${condition} LIMIT ${SWEEP_BATCH} ${SKIP_LOCKED})`;

const EXPIRED_GRANTS = 'SELECT id FROM grants WHERE expires_at < $1';

/** A registered client the sweep removes: expired, and no grant of it left (DESIGN.md §9). */
const CLIENT_ABANDONED = 'expires_at < $1 AND NOT EXISTS (SELECT 1 FROM grants g WHERE g.client_id = registered_clients.client_id)';

/** Grants per transaction when revoking by user or client: each takes its codes and refresh tokens with it. */
export const REVOKE_BATCH = 100;

/** `$1, $2, ... $REVOKE_BATCH`: the ids of one revocation batch, padded with NULL (which matches nothing). */
const GRANT_ID_LIST = Array.from({ length: REVOKE_BATCH }, (_, i) => `$${i + 1}`).join(', ');

/** Extends grant `id` to `expiresAt` when it expires before `before` (rules.ts): never shortens it. */
const extendGrantWhere = (id: string, expiresAt: string, before: string): string =>
  `UPDATE grants SET expires_at = ${expiresAt} WHERE id = ${id} AND expires_at < ${before}`;

/** A new active refresh token; INSERT ... SELECT, so a data-modifying CTE can make it depend on its guard (atOnce). */
const insertRefreshTokenAs = (grantId: string, digest: string, issuedAt: string, expiresAt: string, boundKey: string, from = ''): string =>
  `INSERT INTO refresh_tokens (grant_id, digest, issued_at, expires_at, status, dpop_jkt)
    SELECT ${grantId}, ${digest}, CAST(${issuedAt} AS BIGINT), CAST(${expiresAt} AS BIGINT), 'active', CAST(${boundKey} AS TEXT)${from}`;

// $1 code, $2 now. A concurrent exchange of the same code waits for the row lock, then finds the code used.
const CONSUME_CODE = 'UPDATE authorization_codes SET used = TRUE WHERE digest = $1 AND used = FALSE AND expires_at > $2';
// $1 grant, $2 digest, $3 now.
const MARK_ROTATED =
  "UPDATE refresh_tokens SET status = 'rotated', rotated_at = $3 WHERE grant_id = $1 AND digest = $2 AND status = 'active' AND expires_at > $3";

/**
 * PostgreSQL pays a round trip per statement, so a hot script (guard, new refresh token, grant extension) runs there as
 * one statement: a data-modifying CTE of the same statements (SQLite has none, and runs the steps in-process). The
 * guard (its 2 or 3 parameters first) must return `grant_id`; the rest change something only when it changed its row,
 * and the answer has one row exactly then. Then the token's 5 parameters, then the extension's 2. Each sub-statement
 * changes another row, as a CTE needs (one row changed twice in one statement is undefined in PostgreSQL).
 */
function atOnce(guard: string, guardParameters: number, then: { readonly token: boolean; readonly extension: boolean }): string {
  let next = guardParameters;
  const parameter = (): string => `$${(next += 1)}`;
  const parts = [`guarded AS (${guard} RETURNING grant_id)`];
  if (then.token) parts.push(`added AS (${insertRefreshTokenAs(parameter(), parameter(), parameter(), parameter(), parameter(), ' FROM guarded')})`);
  if (then.extension) parts.push(`extended AS (${extendGrantWhere('(SELECT grant_id FROM guarded)', parameter(), parameter())})`);
  return `WITH ${parts.join(', ')} SELECT grant_id FROM guarded`;
}

const texts = {
  ping: 'SELECT 1',

  selectKeys: 'SELECT kid, alg, private_jwk, created_at, retired_at FROM keys',
  // The gate of key creation: only into an empty table, so instances starting at once keep the first one's keys.
  insertFirstKey: `INSERT INTO keys (kid, alg, private_jwk, created_at, retired_at)
    SELECT $1, $2, $3, CAST($4 AS BIGINT), CAST($5 AS BIGINT) WHERE NOT EXISTS (SELECT 1 FROM keys)`,
  insertKey: 'INSERT INTO keys (kid, alg, private_jwk, created_at, retired_at) VALUES ($1, $2, $3, $4, $5)',
  retireKey: 'UPDATE keys SET retired_at = $2 WHERE kid = $1 AND retired_at IS NULL',
  // A key event is recorded once: the first process to record it writes its audit line. The row of kid '' (no key's
  // thumbprint) marks that a first call has recorded the keys a server started with, which are no change.
  recordKeyEvent: 'INSERT INTO key_events (kid, event, recorded_at) VALUES ($1, $2, $3) ON CONFLICT (kid, event) DO NOTHING',

  insertGrant:
    'INSERT INTO grants (id, client_id, subject, scope, resources, claims, auth_time, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)',
  // rules.ts grantExtension: $1 grant, $2 new expiry, $3 the expiry it must be before.
  extendGrant: extendGrantWhere('$1', '$2', '$3'),
  // rules.ts grantKeptUntil: $1 the code, $2 new expiry, $3 the expiry it must be before.
  extendGrantOfCode: extendGrantWhere('(SELECT grant_id FROM authorization_codes WHERE digest = $1)', '$2', '$3'),
  // The guard of a sibling refresh token (addRefreshToken): it changes the grant's row whenever the grant lives (rules.ts
  // grantLives, $4 now), extending it as extendGrant does, so its row lock orders it against a concurrent revocation,
  // which deletes that row first: one that committed leaves no row to change, one still running waits for this.
  holdLiveGrant: 'UPDATE grants SET expires_at = CASE WHEN expires_at < $3 THEN $2 ELSE expires_at END WHERE id = $1 AND expires_at > $4',
  // rules.ts grantLives.
  findGrant: `SELECT ${GRANT_COLUMNS} FROM grants g WHERE g.id = $1 AND g.expires_at > $2`,
  // rules.ts grantLives, and isAccessTokenRevoked of $3 when there is one, in one read: what a presented access token
  // needs (tokens/access-token-state.ts). CASE evaluates lazily in both databases: no probe for a token passing no jti.
  findGrantHolding: `SELECT g.client_id, g.subject, g.expires_at,
      CASE WHEN CAST($3 AS TEXT) IS NULL THEN FALSE
        ELSE EXISTS (SELECT 1 FROM revoked_access_tokens r WHERE r.jti = $3 AND r.expires_at > $2) END AS token_revoked
    FROM grants g WHERE g.id = $1 AND g.expires_at > $2`,
  deleteGrant: 'DELETE FROM grants WHERE id = $1',
  deleteCodesOfGrant: 'DELETE FROM authorization_codes WHERE grant_id = $1',
  deleteRefreshTokensOfGrant: 'DELETE FROM refresh_tokens WHERE grant_id = $1',
  deleteGrantsIn: `DELETE FROM grants WHERE id IN (${GRANT_ID_LIST})`,
  deleteCodesOfGrantsIn: `DELETE FROM authorization_codes WHERE grant_id IN (${GRANT_ID_LIST})`,
  deleteRefreshTokensOfGrantsIn: `DELETE FROM refresh_tokens WHERE grant_id IN (${GRANT_ID_LIST})`,

  revokeAccessToken: 'INSERT INTO revoked_access_tokens (jti, expires_at) VALUES ($1, $2) ON CONFLICT (jti) DO NOTHING',
  isAccessTokenRevoked: 'SELECT 1 AS revoked FROM revoked_access_tokens WHERE jti = $1 AND expires_at > $2',

  insertCode:
    'INSERT INTO authorization_codes (digest, grant_id, client_id, redirect_uri, code_challenge, nonce, expires_at, dpop_jkt) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)',
  findCode: `SELECT c.digest AS code_digest, c.grant_id AS code_grant_id, c.client_id AS code_client_id, c.redirect_uri,
      c.code_challenge, c.nonce, c.expires_at AS code_expires_at, c.used, c.dpop_jkt AS code_dpop_jkt, ${GRANT_COLUMNS}
    FROM authorization_codes c LEFT JOIN grants g ON g.id = c.grant_id WHERE c.digest = $1`,
  // A concurrent exchange of the same code waits for the row lock, then finds the code used.
  consumeCode: CONSUME_CODE,

  findRefreshToken: `SELECT r.digest AS token_digest, r.grant_id AS token_grant_id, r.issued_at, r.expires_at AS token_expires_at,
      r.status, r.rotated_at, r.dpop_jkt, ${GRANT_COLUMNS}
    FROM refresh_tokens r LEFT JOIN grants g ON g.id = r.grant_id WHERE r.grant_id = $1 AND r.digest = $2`,
  insertRefreshToken: insertRefreshTokenAs('$1', '$2', '$3', '$4', '$5'),
  // A concurrent rotation of the same token waits for the row lock, then finds it no longer active.
  markRotated: MARK_ROTATED,

  releaseUserCode: 'DELETE FROM device_authorizations WHERE user_code = $1 AND expires_at <= $2',
  insertDevice: `INSERT INTO device_authorizations (${DEVICE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
  findByUserCode: `SELECT ${DEVICE_COLUMNS} FROM device_authorizations WHERE user_code = $1 AND expires_at > $2`,
  findByDeviceCode: `SELECT ${DEVICE_COLUMNS} FROM device_authorizations WHERE device_code_digest = $1`,
  recordPoll: 'UPDATE device_authorizations SET last_polled_at = $2, interval_seconds = interval_seconds + $3 WHERE device_code_digest = $1',
  approveDevice: `UPDATE device_authorizations SET status = 'approved', subject = $3, claims = $4, auth_time = $5
    WHERE user_code = $1 AND status = 'pending' AND expires_at > $2`,
  denyDevice: "UPDATE device_authorizations SET status = 'denied' WHERE user_code = $1 AND status = 'pending' AND expires_at > $2",
  redeemDevice: "UPDATE device_authorizations SET status = 'redeemed' WHERE device_code_digest = $1 AND status = 'approved' AND expires_at > $2",

  insertSession: 'INSERT INTO sessions (digest, subject, claims, auth_time, expires_at) VALUES ($1, $2, $3, $4, $5)',
  findSession: 'SELECT digest, subject, claims, auth_time, expires_at FROM sessions WHERE digest = $1 AND expires_at > $2',
  deleteSession: 'DELETE FROM sessions WHERE digest = $1',
  deleteSessionsOf: 'DELETE FROM sessions WHERE subject = $1',
  // $1 subject, $2 how many of its sessions stay: the ones that expire last (rules.ts MAX_SESSIONS_PER_SUBJECT).
  trimSessionsOf: 'DELETE FROM sessions WHERE subject = $1 AND digest NOT IN (SELECT digest FROM sessions WHERE subject = $1 ORDER BY expires_at DESC, digest LIMIT $2)',

  insertLoginRequest: 'INSERT INTO login_requests (id, purpose, browser, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)',
  findLoginRequest: 'SELECT id, purpose, browser, created_at, expires_at FROM login_requests WHERE id = $1 AND expires_at > $2',
  takeLoginRequest: 'DELETE FROM login_requests WHERE id = $1 RETURNING id, purpose, browser, created_at, expires_at',

  insertFederationState:
    'INSERT INTO federation_states (state, login_id, upstream, code_verifier, nonce, browser, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)',
  findFederationState: 'SELECT state, login_id, upstream, code_verifier, nonce, browser, expires_at FROM federation_states WHERE state = $1 AND expires_at > $2',
  takeFederationState: 'DELETE FROM federation_states WHERE state = $1 RETURNING state, login_id, upstream, code_verifier, nonce, browser, expires_at',

  saveSubjectClaims: `INSERT INTO subject_claims (subject, claims, expires_at) VALUES ($1, $2, $3)
    ON CONFLICT (subject) DO UPDATE SET claims = excluded.claims, expires_at = excluded.expires_at`,
  findSubjectClaims: 'SELECT claims FROM subject_claims WHERE subject = $1 AND expires_at > $2',

  insertRegisteredClient: `INSERT INTO registered_clients (${REGISTERED_CLIENT_COLUMNS}) VALUES ($1, $2, $3, $4, $5)`,
  findRegisteredClient: `SELECT ${REGISTERED_CLIENT_COLUMNS} FROM registered_clients WHERE client_id = $1`,
  keepRegisteredClient: 'UPDATE registered_clients SET expires_at = $2 WHERE client_id = $1 AND expires_at < $2',
  deleteRegisteredClient: 'DELETE FROM registered_clients WHERE client_id = $1',
  deleteConsentsOfClient: 'DELETE FROM consents WHERE client_id = $1',
  deleteConsentsOfSubjectAndClient: 'DELETE FROM consents WHERE client_id = $1 AND subject = $2',

  findConsent: `SELECT ${CONSENT_COLUMNS} FROM consents WHERE subject = $1 AND client_id = $2 AND redirect_origin = $3`,
  saveConsent: `INSERT INTO consents (${CONSENT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)
    ON CONFLICT (subject, client_id, redirect_origin) DO UPDATE SET scope = excluded.scope, resources = excluded.resources,
      whole_audience = excluded.whole_audience, granted_at = excluded.granted_at`,

  // A window that has ended starts over at 1.
  countAttempt: `INSERT INTO attempts (attempt_key, count, window_ends_at) VALUES ($1, 1, $2)
    ON CONFLICT (attempt_key) DO UPDATE SET
      count = CASE WHEN attempts.window_ends_at <= $3 THEN 1 ELSE attempts.count + 1 END,
      window_ends_at = CASE WHEN attempts.window_ends_at <= $3 THEN excluded.window_ends_at ELSE attempts.window_ends_at END
    RETURNING count`,
  peekAttempts: 'SELECT count FROM attempts WHERE attempt_key = $1 AND window_ends_at > $2',
  forgiveAttempt: 'UPDATE attempts SET count = count - 1 WHERE attempt_key = $1 AND window_ends_at > $2 AND count > 0',
  // A counter forgiven back to nothing is no record of anything: a refused request leaves no row (DESIGN.md §1).
  dropForgivenAttempt: 'DELETE FROM attempts WHERE attempt_key = $1 AND count <= 0',
  clearAttempts: 'DELETE FROM attempts WHERE attempt_key = $1',

  // $1 kind, $2 id, $3 expiry, $4 now: it changes a row only for the request that records the id (an expired record
  // is taken over), so one of two concurrent uses wins, also across instances (DESIGN.md §13).
  markUsedOnce: `INSERT INTO used_once (kind, id, expires_at) VALUES ($1, $2, $3)
    ON CONFLICT (kind, id) DO UPDATE SET expires_at = excluded.expires_at WHERE used_once.expires_at <= $4`,
  // $1 kind, $2 id, $3 now: whether that record is there and unexpired, read only to say which one a refused batch met.
  findUsedOnce: 'SELECT 1 AS used FROM used_once WHERE kind = $1 AND id = $2 AND expires_at > $3',

  insertPushedRequest: 'INSERT INTO pushed_requests (digest, client_id, parameters, expires_at) VALUES ($1, $2, $3, $4)',
  findPushedRequest: 'SELECT digest, client_id, parameters, expires_at FROM pushed_requests WHERE digest = $1 AND client_id = $2 AND expires_at > $3',
  // Single use (RFC 9126 §4): of two concurrent takes, the second finds no row.
  takePushedRequest: 'DELETE FROM pushed_requests WHERE digest = $1 AND client_id = $2 AND expires_at > $3',

  // Sweeping, each with the cutoff as $1. A used code stays while its grant does (DESIGN.md §6: replay revokes also
  // after 60 s) and goes with it; a grant goes once nothing of it is left.
  sweepUnusedCodes: sweepBatch('authorization_codes', 'digest', 'expires_at < $1 AND used = FALSE'),
  sweepCodesOfExpiredGrants: sweepBatch('authorization_codes', 'digest', `grant_id IN (${EXPIRED_GRANTS})`),
  sweepRefreshTokens: sweepBatch('refresh_tokens', 'grant_id, digest', 'expires_at < $1'),
  sweepRefreshTokensOfExpiredGrants: sweepBatch('refresh_tokens', 'grant_id, digest', `grant_id IN (${EXPIRED_GRANTS})`),
  sweepGrants: sweepBatch(
    'grants',
    'id',
    `expires_at < $1 AND NOT EXISTS (SELECT 1 FROM authorization_codes c WHERE c.grant_id = grants.id)
      AND NOT EXISTS (SELECT 1 FROM refresh_tokens r WHERE r.grant_id = grants.id)`,
  ),
  // A registration's consents go before it, while the statement can still tell which clients are going.
  sweepConsentsOfAbandonedClients: sweepBatch(
    'consents',
    'subject, client_id, redirect_origin',
    `client_id IN (SELECT client_id FROM registered_clients WHERE ${CLIENT_ABANDONED})`,
  ),
  sweepRegisteredClients: sweepBatch('registered_clients', 'client_id', CLIENT_ABANDONED),
  sweepDevices: sweepBatch('device_authorizations', 'device_code_digest', 'expires_at < $1'),
  sweepRevokedAccessTokens: sweepBatch('revoked_access_tokens', 'jti', 'expires_at < $1'),
  sweepSessions: sweepBatch('sessions', 'digest', 'expires_at < $1'),
  sweepLoginRequests: sweepBatch('login_requests', 'id', 'expires_at < $1'),
  sweepFederationStates: sweepBatch('federation_states', 'state', 'expires_at < $1'),
  sweepSubjectClaims: sweepBatch('subject_claims', 'subject', 'expires_at < $1'),
  sweepAttempts: sweepBatch('attempts', 'attempt_key', 'window_ends_at <= $1'),
  sweepUsedOnce: sweepBatch('used_once', 'kind, id', 'expires_at < $1'),
  sweepPushedRequests: sweepBatch('pushed_requests', 'digest', 'expires_at < $1'),

  // PostgreSQL only (atOnce): rotation ($1 grant, $2 old digest, $3 now) and code exchange ($1 code, $2 now).
  rotateAtOnce: atOnce(MARK_ROTATED, 3, { token: true, extension: false }),
  rotateExtendingAtOnce: atOnce(MARK_ROTATED, 3, { token: true, extension: true }),
  consumeCodeExtendingAtOnce: atOnce(CONSUME_CODE, 2, { token: false, extension: true }),
  consumeCodeWithTokenExtendingAtOnce: atOnce(CONSUME_CODE, 2, { token: true, extension: true }),
};

const named = <T extends Record<string, string>>(prefix: string, statements: T): { readonly [K in keyof T]: Statement } =>
  Object.fromEntries(Object.entries(statements).map(([key, text]) => [key, { name: `pinpoint_${prefix}${key}`, text }])) as {
    readonly [K in keyof T]: Statement;
  };

/** The statements, each named for PostgreSQL's per-connection prepared statements. */
export const SQL = named('', texts);

/**
 * The writes that cannot end what findGrantHolding answers: they add rows, extend a grant, or change other tables. A
 * commit of any other statement (a grant deleted, a token revoked, a sweep) changes the SQLite driver's holdings
 * version, so what the store remembers of that read is dropped (remembered-holdings.ts); one missing here costs
 * only a read.
 */
export const KEEPS_HOLDINGS: ReadonlySet<Statement> = new Set([
  SQL.insertGrant,
  SQL.extendGrant,
  SQL.extendGrantOfCode,
  SQL.holdLiveGrant,
  SQL.insertCode,
  SQL.consumeCode,
  SQL.insertRefreshToken,
  SQL.markRotated,
  SQL.releaseUserCode,
  SQL.insertDevice,
  SQL.recordPoll,
  SQL.approveDevice,
  SQL.denyDevice,
  SQL.redeemDevice,
  SQL.insertSession,
  SQL.trimSessionsOf,
  SQL.deleteSession,
  SQL.insertLoginRequest,
  SQL.takeLoginRequest,
  SQL.insertFederationState,
  SQL.takeFederationState,
  SQL.saveSubjectClaims,
  SQL.saveConsent,
  SQL.countAttempt,
  SQL.forgiveAttempt,
  SQL.dropForgivenAttempt,
  SQL.clearAttempts,
  SQL.markUsedOnce,
  SQL.insertPushedRequest,
  SQL.takePushedRequest,
  SQL.recordKeyEvent,
]);

/**
 * A GrantFilter as a condition on `grants g`, its values from $2 on (rules.ts grantMatches): one statement per
 * combination rather than `$2 IS NULL OR ...`, so each can use its index (grants_subject, grants_client_id).
 */
const GRANT_FILTERS = {
  every: 'TRUE',
  subject: 'g.subject = $2',
  client: 'g.client_id = $2',
  subjectAndClient: 'g.subject = $2 AND g.client_id = $3',
} as const;

type GrantFilterShape = keyof typeof GRANT_FILTERS;

const byGrantFilter = (statement: (condition: string) => string): Record<GrantFilterShape, string> => ({
  every: statement(GRANT_FILTERS.every),
  subject: statement(GRANT_FILTERS.subject),
  client: statement(GRANT_FILTERS.client),
  subjectAndClient: statement(GRANT_FILTERS.subjectAndClient),
});

// rules.ts grantLives, with $1 now; the newest refresh token's issued_at read through refresh_tokens' primary key.
const LIST_GRANTS = named(
  'listGrants_',
  byGrantFilter(
    (condition) => `SELECT ${GRANT_COLUMNS}, (SELECT MAX(r.issued_at) FROM refresh_tokens r WHERE r.grant_id = g.id) AS last_refresh_at
      FROM grants g WHERE g.expires_at > $1 AND ${condition}`,
  ),
);

// The next revocation batch, by id after $1 (the last id of the previous batch), so every batch reads a new range.
const GRANT_IDS = named(
  'grantIds_',
  byGrantFilter((condition) => `SELECT g.id FROM grants g WHERE g.id > $1 AND ${condition} ORDER BY g.id LIMIT ${REVOKE_BATCH}`),
);

/** The statements reading the grants `filter` names, and the filter's values (to follow $1). */
export function grantQueries(filter: GrantFilter): { readonly list: Statement; readonly ids: Statement; readonly values: readonly string[] } {
  const { subject, clientId } = filter;
  const [shape, values]: [GrantFilterShape, string[]] =
    subject !== undefined && clientId !== undefined
      ? ['subjectAndClient', [subject, clientId]]
      : subject !== undefined
        ? ['subject', [subject]]
        : clientId !== undefined
          ? ['client', [clientId]]
          : ['every', []];
  return { list: LIST_GRANTS[shape], ids: GRANT_IDS[shape], values };
}

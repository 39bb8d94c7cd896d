import { setImmediate as yieldToRequests } from 'node:timers/promises';
import pg from 'pg';
import type { ClientConfig, PoolClient, QueryResult, QueryResultRow } from 'pg';
import type { StateConfig } from '../config/types.js';
import { StoreUnavailableError } from '../errors.js';
import { migratePostgres, quoteIdentifier } from './migrations.js';
import {
  codeLookupFromRow,
  DEVICE_COLUMNS,
  DEVICE_EXPIRY_SLACK_MS,
  deviceFromRow,
  deviceParams,
  GRANT_COLUMNS,
  GRANT_EXPIRY_SLACK_MS,
  grantFromRow,
  grantParams,
  keyFromRow,
  refreshLookupFromRow,
  sessionFromRow,
  SWEEP_BATCH,
  type CodeRow,
  type DeviceRow,
  type GrantRow,
  type KeyRow,
  type RefreshRow,
  type SessionRow,
} from './rows.js';
import type {
  AuthorizationCodeRecord,
  CodeLookup,
  DeviceAuthorizationRecord,
  Grant,
  RefreshLookup,
  RefreshTokenRecord,
  SessionRecord,
  Store,
  StoredKey,
  SubjectClaims,
} from './types.js';

export type PostgresStateConfig = Extract<StateConfig, { kind: 'postgres' }>;

export interface StoreLog {
  warn(msg: string): void;
}

/** How long to wait for a connection before the store counts as unavailable (DESIGN.md §7: 503, not a hang). */
const CONNECT_TIMEOUT_MS = 2000;
/** A query that gets no answer this long means the server is gone (a dropped network sends no reset). */
const QUERY_TIMEOUT_MS = 15_000;
/** Serialises the first key creation of instances starting at once. */
const KEYS_LOCK = 7_041_984_431_002;

const NETWORK_ERROR_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'EHOSTDOWN',
  'ENETUNREACH',
  'ENETDOWN',
]);

/** The client was already broken when handed out: nothing was sent, so another client can run the work. */
const NOT_QUERYABLE = /not queryable/;

const CONNECTION_LOST = /Connection terminated|connection error|Connection is closed|Client was closed|Query read timeout|timeout exceeded when trying to connect|Cannot use a pool after calling end/i;

/**
 * True for failures of the connection or the server (not of the statement): network errors,
 * SQLSTATE class 08 (connection exception), 53 (insufficient resources), 57P (shutdown), 58 (system error).
 */
export function isConnectionError(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string') {
    if (NETWORK_ERROR_CODES.has(code)) return true;
    if (/^(08|53|57P|58)/.test(code)) return true;
  }
  return CONNECTION_LOST.test(error.message);
}

/** Deadlock or serialization failure: the transaction can simply run again. */
const isRetryable = (error: unknown): boolean => {
  const code = (error as { code?: unknown } | null)?.code;
  return code === '40P01' || code === '40001';
};

/** "postgres host:port/db (schema s)": what the startup log and `pinpoint check` show; never the password. */
export function describePostgres(url: string, schema: string): string {
  try {
    const parsed = new URL(url);
    const host = parsed.searchParams.get('host') ?? (parsed.hostname || process.env['PGHOST'] || 'localhost');
    const port = parsed.searchParams.get('port') ?? (parsed.port || process.env['PGPORT'] || '5432');
    const database = decodeURIComponent(parsed.pathname.replace(/^\//, '')) || process.env['PGDATABASE'] || decodeURIComponent(parsed.username);
    return `postgres ${host}:${port}/${database} (schema ${schema})`;
  } catch {
    return `postgres (schema ${schema})`;
  }
}

/**
 * pg lets a connection string's (empty) password override the `password` option, so a password
 * read from password_file is set on each client after its parameters are parsed.
 */
function clientWithPassword(password: string): typeof pg.Client {
  return class PasswordClient extends pg.Client {
    constructor(config?: string | ClientConfig) {
      super(config);
      Object.defineProperty(this, 'password', { value: password, writable: true, enumerable: false, configurable: true });
    }
  };
}

interface Statement {
  readonly name: string;
  readonly text: string;
}

/** Every statement, with table names qualified by the schema; each is prepared once per connection. */
function statements(schema: string) {
  const s = quoteIdentifier(schema);
  const grants = `${s}.grants`;
  const codes = `${s}.authorization_codes`;
  const tokens = `${s}.refresh_tokens`;
  const devices = `${s}.device_authorizations`;
  const sessions = `${s}.sessions`;
  const transient = `${s}.transient`;
  const attempts = `${s}.attempts`;
  const keys = `${s}.keys`;
  const grantValues = '$1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::bigint, $8::bigint, $9::bigint';
  const sweepBatch = (table: string, key: string, condition: string): string =>
    `DELETE FROM ${table} WHERE (${key}) IN (SELECT ${key} FROM ${table} WHERE ${condition} LIMIT ${SWEEP_BATCH} FOR UPDATE SKIP LOCKED)`;
  /** CTEs `inserted` and `extended`: the refresh token $3-$6 (digest, grant id, issued, expires) added and its grant extended, only when `gate` gave a row. */
  const addTokenAfter = (gate: string): string => `inserted AS (
        INSERT INTO ${tokens} (digest, grant_id, issued_at, expires_at, status)
        SELECT $3::text, $4::text, $5::bigint, $6::bigint, 'active' FROM ${gate} RETURNING digest
      ), extended AS (
        UPDATE ${grants} SET expires_at = $6::bigint + ${GRANT_EXPIRY_SLACK_MS}
        WHERE id = $4::text AND expires_at < $6::bigint AND EXISTS (SELECT 1 FROM inserted)
      )`;
  const texts = {
    ping: 'SELECT 1',
    selectKeys: `SELECT kid, alg, private_jwk, created_at FROM ${keys} ORDER BY created_at, kid COLLATE "C"`,
    insertKey: `INSERT INTO ${keys} (kid, alg, private_jwk, created_at) VALUES ($1, $2, $3, $4)`,
    lockKeys: `SELECT pg_advisory_xact_lock(${KEYS_LOCK})`,
    getGrant: `SELECT ${GRANT_COLUMNS} FROM ${grants} g WHERE g.id = $1`,
    insertGrant: `INSERT INTO ${grants} (id, client_id, subject, scope, resources, claims, auth_time, created_at, expires_at) VALUES (${grantValues})`,
    revokeGrant: `WITH c AS (DELETE FROM ${codes} WHERE grant_id = $1), r AS (DELETE FROM ${tokens} WHERE grant_id = $1)
      DELETE FROM ${grants} WHERE id = $1`,
    createGrantWithCode: `WITH g AS (
        INSERT INTO ${grants} (id, client_id, subject, scope, resources, claims, auth_time, created_at, expires_at) VALUES (${grantValues})
      )
      INSERT INTO ${codes} (digest, grant_id, client_id, redirect_uri, code_challenge, nonce, expires_at)
      VALUES ($10::text, $11::text, $12::text, $13::text, $14::text, $15::text, $16::bigint)`,
    findCode: `SELECT c.digest AS code_digest, c.grant_id AS code_grant_id, c.client_id AS code_client_id, c.redirect_uri,
        c.code_challenge, c.nonce, c.expires_at AS code_expires_at, c.used, ${GRANT_COLUMNS}
      FROM ${codes} c LEFT JOIN ${grants} g ON g.id = c.grant_id WHERE c.digest = $1`,
    consumeCode: `UPDATE ${codes} SET used = TRUE WHERE digest = $1 AND NOT used AND expires_at > $2`,
    // One statement: a concurrent exchange of the same code waits for the row lock, then finds it used.
    consumeCodeWithRefresh: `WITH used AS (
        UPDATE ${codes} SET used = TRUE WHERE digest = $1::text AND NOT used AND expires_at > $2::bigint RETURNING grant_id
      ), ${addTokenAfter('used')}
      SELECT count(*)::int AS consumed FROM used`,
    findRefreshToken: `SELECT r.digest AS token_digest, r.grant_id AS token_grant_id, r.issued_at, r.expires_at AS token_expires_at,
        r.status, ${GRANT_COLUMNS}
      FROM ${tokens} r LEFT JOIN ${grants} g ON g.id = r.grant_id WHERE r.grant_id = $1 AND r.digest = $2`,
    addRefreshToken: `WITH r AS (
        INSERT INTO ${tokens} (digest, grant_id, issued_at, expires_at, status) VALUES ($1::text, $2::text, $3::bigint, $4::bigint, 'active')
      )
      UPDATE ${grants} SET expires_at = $4::bigint + ${GRANT_EXPIRY_SLACK_MS} WHERE id = $2::text AND expires_at < $4::bigint`,
    // One statement: a concurrent rotation of the same token waits for the row lock, then finds it no longer active.
    rotateRefreshToken: `WITH old AS (
        UPDATE ${tokens} SET status = 'rotated'
        WHERE grant_id = $4::text AND digest = $1::text AND status = 'active' AND expires_at > $2::bigint RETURNING digest
      ), ${addTokenAfter('old')}
      SELECT count(*)::int AS rotated FROM inserted`,
    releaseUserCode: `DELETE FROM ${devices} WHERE user_code = $1 AND expires_at <= $2`,
    insertDevice: `INSERT INTO ${devices} (${DEVICE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
    findByUserCode: `SELECT ${DEVICE_COLUMNS} FROM ${devices} WHERE user_code = $1 AND expires_at > $2`,
    findByDeviceCode: `SELECT ${DEVICE_COLUMNS} FROM ${devices} WHERE device_code_digest = $1`,
    recordPoll: `UPDATE ${devices} SET last_polled_at = $1, interval_seconds = interval_seconds + $2 WHERE device_code_digest = $3`,
    approveDevice: `UPDATE ${devices} SET status = 'approved', subject = $1, claims = $2, auth_time = $3
      WHERE user_code = $4 AND status = 'pending' AND expires_at > $5`,
    denyDevice: `UPDATE ${devices} SET status = 'denied' WHERE user_code = $1 AND status = 'pending' AND expires_at > $2`,
    redeemDevice: `UPDATE ${devices} SET status = 'redeemed' WHERE device_code_digest = $1 AND status = 'approved' AND expires_at > $2`,
    createSession: `INSERT INTO ${sessions} (digest, subject, claims, auth_time, expires_at) VALUES ($1, $2, $3, $4, $5)`,
    findSession: `SELECT digest, subject, claims, auth_time, expires_at FROM ${sessions} WHERE digest = $1 AND expires_at > $2`,
    deleteSession: `DELETE FROM ${sessions} WHERE digest = $1`,
    putTransient: `INSERT INTO ${transient} (kind, id, value, expires_at) VALUES ($1, $2, $3, $4)
      ON CONFLICT (kind, id) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at`,
    getTransient: `SELECT value FROM ${transient} WHERE kind = $1 AND id = $2 AND expires_at > $3`,
    takeTransient: `DELETE FROM ${transient} WHERE kind = $1 AND id = $2 RETURNING value, expires_at`,
    // A window that has ended starts over at 1.
    countAttempt: `INSERT INTO ${attempts} AS a (attempt_key, count, window_ends_at) VALUES ($1::text, 1, $2::bigint)
      ON CONFLICT (attempt_key) DO UPDATE SET
        count = CASE WHEN a.window_ends_at <= $3::bigint THEN 1 ELSE a.count + 1 END,
        window_ends_at = CASE WHEN a.window_ends_at <= $3::bigint THEN $2::bigint ELSE a.window_ends_at END
      RETURNING count`,
    peekAttempts: `SELECT count FROM ${attempts} WHERE attempt_key = $1 AND window_ends_at > $2`,
    clearAttempts: `DELETE FROM ${attempts} WHERE attempt_key = $1`,
    sweepCodes: sweepBatch(codes, 'digest', 'expires_at < $1'),
    sweepRefreshTokens: sweepBatch(tokens, 'grant_id, digest', 'expires_at < $1'),
    sweepDevices: sweepBatch(devices, 'device_code_digest', 'expires_at < $1'),
    sweepSessions: sweepBatch(sessions, 'digest', 'expires_at < $1'),
    sweepTransient: sweepBatch(transient, 'kind, id', 'expires_at < $1'),
    sweepAttempts: sweepBatch(attempts, 'attempt_key', 'window_ends_at <= $1'),
    sweepGrants: `WITH doomed AS (
        SELECT id FROM ${grants} WHERE expires_at < $1 LIMIT ${SWEEP_BATCH} FOR UPDATE SKIP LOCKED
      ), c AS (
        DELETE FROM ${codes} WHERE grant_id IN (SELECT id FROM doomed)
      ), r AS (
        DELETE FROM ${tokens} WHERE grant_id IN (SELECT id FROM doomed)
      )
      DELETE FROM ${grants} WHERE id IN (SELECT id FROM doomed)`,
  };
  return Object.fromEntries(
    Object.entries(texts).map(([key, text]) => [key, { name: `pinpoint_${key}`, text }]),
  ) as { readonly [K in keyof typeof texts]: Statement };
}

type Statements = ReturnType<typeof statements>;

/** State in PostgreSQL, shared by every Pinpoint instance pointed at the same database and schema (DESIGN.md §6). */
export class PostgresStore implements Store {
  readonly description: string;
  readonly schema: string;
  readonly #pool: pg.Pool;
  readonly #sql: Statements;

  /** Creates the pool without connecting; `open` also migrates. */
  constructor(state: PostgresStateConfig, log?: StoreLog) {
    this.schema = state.schema;
    this.description = describePostgres(state.url, state.schema);
    this.#sql = statements(state.schema);
    this.#pool = new pg.Pool({
      connectionString: state.url,
      connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
      query_timeout: QUERY_TIMEOUT_MS,
      idleTimeoutMillis: 30_000,
      keepAlive: true,
      application_name: 'pinpoint',
      ...(state.password === undefined ? {} : { Client: clientWithPassword(state.password) }),
    });
    // An idle connection that breaks is dropped by the pool; report it instead of crashing.
    this.#pool.on('error', (error) => log?.warn(`postgres connection lost: ${error.message}`));
    // A checked-out connection that breaks also rejects its query; this listener keeps the error from being unhandled.
    this.#pool.on('connect', (client) => client.on('error', () => undefined));
  }

  /** Connects, creates the schema and tables when missing, and returns the store. */
  static async open(state: PostgresStateConfig, log?: StoreLog): Promise<PostgresStore> {
    const store = new PostgresStore(state, log);
    try {
      await store.migrate();
    } catch (error) {
      await store.close();
      throw error;
    }
    return store;
  }

  /** Applies missing migrations; returns the versions this call applied. */
  async migrate(): Promise<number[]> {
    return this.#withClient((client) => migratePostgres(client, this.schema));
  }

  async loadOrCreateKeys(candidates: readonly StoredKey[]): Promise<StoredKey[]> {
    return this.#transaction(async (client) => {
      await client.query(this.#sql.lockKeys);
      const stored = await client.query<KeyRow>(this.#sql.selectKeys);
      if (stored.rows.length > 0) return stored.rows.map(keyFromRow);
      for (const key of candidates) await client.query({ ...this.#sql.insertKey, values: [key.kid, key.alg, key.privateJwk, key.createdAt] });
      return (await client.query<KeyRow>(this.#sql.selectKeys)).rows.map(keyFromRow);
    });
  }

  async getGrant(grantId: string): Promise<Grant | undefined> {
    const row = (await this.#query<GrantRow>(this.#sql.getGrant, [grantId])).rows[0];
    return row === undefined ? undefined : grantFromRow(row);
  }

  async revokeGrant(grantId: string): Promise<void> {
    await this.#query(this.#sql.revokeGrant, [grantId]);
  }

  async createGrantWithCode(grant: Grant, code: AuthorizationCodeRecord): Promise<void> {
    await this.#query(this.#sql.createGrantWithCode, [
      ...grantParams(grant),
      code.digest,
      code.grantId,
      code.clientId,
      code.redirectUri,
      code.codeChallenge,
      code.nonce ?? null,
      code.expiresAt,
    ]);
  }

  async findCode(digest: string, now: number): Promise<CodeLookup> {
    return codeLookupFromRow((await this.#query<CodeRow>(this.#sql.findCode, [digest])).rows[0], now);
  }

  async consumeCode(digest: string, now: number, firstRefresh?: RefreshTokenRecord): Promise<boolean> {
    if (firstRefresh === undefined) return (await this.#query(this.#sql.consumeCode, [digest, now])).rowCount === 1;
    const { digest: refreshDigest, grantId, issuedAt, expiresAt } = firstRefresh;
    const result = await this.#query<{ consumed: number }>(this.#sql.consumeCodeWithRefresh, [digest, now, refreshDigest, grantId, issuedAt, expiresAt]);
    return result.rows[0]?.consumed === 1;
  }

  async findRefreshToken(grantId: string, digest: string, now: number): Promise<RefreshLookup> {
    return refreshLookupFromRow((await this.#query<RefreshRow>(this.#sql.findRefreshToken, [grantId, digest])).rows[0], now);
  }

  async addRefreshToken(token: RefreshTokenRecord): Promise<void> {
    await this.#query(this.#sql.addRefreshToken, [token.digest, token.grantId, token.issuedAt, token.expiresAt]);
  }

  async rotateRefreshToken(oldDigest: string, next: RefreshTokenRecord, now: number): Promise<boolean> {
    const result = await this.#query<{ rotated: number }>(this.#sql.rotateRefreshToken, [
      oldDigest,
      now,
      next.digest,
      next.grantId,
      next.issuedAt,
      next.expiresAt,
    ]);
    return result.rows[0]?.rotated === 1;
  }

  async createDeviceAuthorization(record: DeviceAuthorizationRecord): Promise<void> {
    await this.#transaction(async (client) => {
      // An expired record gives its user code up; a live one keeps it and the insert fails.
      await client.query({ ...this.#sql.releaseUserCode, values: [record.userCode, record.createdAt] });
      await client.query({ ...this.#sql.insertDevice, values: deviceParams(record) });
    });
  }

  async findByUserCode(userCode: string, now: number): Promise<DeviceAuthorizationRecord | undefined> {
    const row = (await this.#query<DeviceRow>(this.#sql.findByUserCode, [userCode, now])).rows[0];
    return row === undefined ? undefined : deviceFromRow(row);
  }

  async findByDeviceCode(deviceCodeDigest: string): Promise<DeviceAuthorizationRecord | undefined> {
    const row = (await this.#query<DeviceRow>(this.#sql.findByDeviceCode, [deviceCodeDigest])).rows[0];
    return row === undefined ? undefined : deviceFromRow(row);
  }

  async recordPoll(deviceCodeDigest: string, now: number, tooFast: boolean): Promise<void> {
    await this.#query(this.#sql.recordPoll, [now, tooFast ? 5 : 0, deviceCodeDigest]);
  }

  async decideDeviceAuthorization(
    userCode: string,
    decision: { approved: true; subject: string; claims: SubjectClaims; authTime: number } | { approved: false },
    now: number,
  ): Promise<boolean> {
    const result = decision.approved
      ? await this.#query(this.#sql.approveDevice, [decision.subject, JSON.stringify(decision.claims), decision.authTime, userCode, now])
      : await this.#query(this.#sql.denyDevice, [userCode, now]);
    return result.rowCount === 1;
  }

  async redeemDeviceCode(
    deviceCodeDigest: string,
    grant: Grant,
    refresh: RefreshTokenRecord | undefined,
    now: number,
  ): Promise<boolean> {
    return this.#transaction(async (client) => {
      const redeemed = await client.query({ ...this.#sql.redeemDevice, values: [deviceCodeDigest, now] });
      if (redeemed.rowCount !== 1) return false;
      await client.query({ ...this.#sql.insertGrant, values: grantParams(grant) });
      if (refresh !== undefined) {
        await client.query({ ...this.#sql.addRefreshToken, values: [refresh.digest, refresh.grantId, refresh.issuedAt, refresh.expiresAt] });
      }
      return true;
    });
  }

  async createSession(session: SessionRecord): Promise<void> {
    await this.#query(this.#sql.createSession, [
      session.digest,
      session.subject,
      JSON.stringify(session.claims),
      session.authTime,
      session.expiresAt,
    ]);
  }

  async findSession(digest: string, now: number): Promise<SessionRecord | undefined> {
    const row = (await this.#query<SessionRow>(this.#sql.findSession, [digest, now])).rows[0];
    return row === undefined ? undefined : sessionFromRow(row);
  }

  async deleteSession(digest: string): Promise<void> {
    await this.#query(this.#sql.deleteSession, [digest]);
  }

  async putTransient(kind: string, id: string, value: unknown, expiresAt: number): Promise<void> {
    await this.#query(this.#sql.putTransient, [kind, id, JSON.stringify(value), expiresAt]);
  }

  async getTransient<T>(kind: string, id: string, now: number): Promise<T | undefined> {
    const row = (await this.#query<{ value: string }>(this.#sql.getTransient, [kind, id, now])).rows[0];
    return row === undefined ? undefined : (JSON.parse(row.value) as T);
  }

  async takeTransient<T>(kind: string, id: string, now: number): Promise<T | undefined> {
    const row = (await this.#query<{ value: string; expires_at: string }>(this.#sql.takeTransient, [kind, id])).rows[0];
    return row === undefined || Number(row.expires_at) <= now ? undefined : (JSON.parse(row.value) as T);
  }

  async countAttempt(key: string, now: number, windowMs: number): Promise<number> {
    const row = (await this.#query<{ count: number }>(this.#sql.countAttempt, [key, now + windowMs, now])).rows[0];
    return row?.count ?? 1;
  }

  async peekAttempts(key: string, now: number): Promise<number> {
    const row = (await this.#query<{ count: number }>(this.#sql.peekAttempts, [key, now])).rows[0];
    return row?.count ?? 0;
  }

  async clearAttempts(key: string): Promise<void> {
    await this.#query(this.#sql.clearAttempts, [key]);
  }

  async ping(): Promise<void> {
    await this.#query(this.#sql.ping, []);
  }

  async sweep(now: number): Promise<void> {
    const batches: [Statement, number][] = [
      [this.#sql.sweepCodes, now],
      [this.#sql.sweepRefreshTokens, now],
      [this.#sql.sweepDevices, now - DEVICE_EXPIRY_SLACK_MS],
      [this.#sql.sweepSessions, now],
      [this.#sql.sweepTransient, now],
      [this.#sql.sweepAttempts, now],
      [this.#sql.sweepGrants, now],
    ];
    for (const [statement, cutoff] of batches) {
      while ((await this.#query(statement, [cutoff])).rowCount === SWEEP_BATCH) await yieldToRequests();
    }
  }

  async close(): Promise<void> {
    if (!this.#pool.ending) await this.#pool.end();
  }

  async #query<R extends QueryResultRow>(statement: Statement, values: unknown[]): Promise<QueryResult<R>> {
    return this.#withClient((client) => client.query<R>({ ...statement, values }));
  }

  async #transaction<T>(work: (client: PoolClient) => Promise<T>): Promise<T> {
    return this.#withClient(async (client) => {
      await client.query('BEGIN');
      try {
        const result = await work(client);
        await client.query('COMMIT');
        return result;
      } catch (error) {
        // A failed ROLLBACK leaves the client unqueryable, and the pool drops it on release.
        await client.query('ROLLBACK').catch(() => undefined);
        throw error;
      }
    });
  }

  /** Runs `work` on a pooled connection; connection failures become StoreUnavailableError, deadlocks run again. */
  async #withClient<T>(work: (client: PoolClient) => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt += 1) {
      let client: PoolClient;
      try {
        client = await this.#pool.connect();
      } catch (error) {
        throw new StoreUnavailableError(error);
      }
      try {
        const result = await work(client);
        client.release();
        return result;
      } catch (error) {
        const lost = isConnectionError(error) || (error instanceof Error && NOT_QUERYABLE.test(error.message));
        client.release(lost ? (error as Error) : undefined);
        if (lost && error instanceof Error && NOT_QUERYABLE.test(error.message) && attempt < 3) continue;
        if (lost) throw new StoreUnavailableError(error);
        if (isRetryable(error) && attempt < 3) continue;
        throw error;
      }
    }
  }
}

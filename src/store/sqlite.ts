import { closeSync, mkdirSync, openSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, resolve } from 'node:path';
import { setImmediate as yieldToRequests } from 'node:timers/promises';
import { Worker } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { StoreUnavailableError } from '../errors.js';
import { migrateSqlite } from './migrations.js';
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

/** How long a writer waits for another process's write lock before the store counts as unavailable. */
const BUSY_TIMEOUT_MS = 5000;

/** How often the checkpointer thread copies the WAL back into the database file (a page written often is copied once). */
const CHECKPOINT_INTERVAL_MS = 250;

/**
 * WAL pages (4 KiB) after which a commit checkpoints on the request path. Writers keep the WAL from being
 * fully copied while the checkpointer works, so this is what finally restarts it, finishing what the
 * checkpointer left: rarely, and with little to copy (bench/RESULTS.md).
 */
const FALLBACK_AUTOCHECKPOINT_PAGES = 30_000;

/**
 * The checkpointer: its own connection in a worker thread, so the checkpoint's copying and its fsyncs
 * (synchronous=NORMAL syncs only at checkpoints) stay off the event loop. Best effort: should it fail, the request
 * path checkpoints after FALLBACK_AUTOCHECKPOINT_PAGES.
 */
const CHECKPOINTER = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.module);
const db = new Database(workerData.file, { timeout: workerData.busyTimeoutMs });
db.pragma('synchronous = NORMAL');
const timer = setInterval(() => {
  try { db.pragma('wal_checkpoint(PASSIVE)'); } catch {}
}, workerData.intervalMs);
parentPort.once('close', () => { clearInterval(timer); db.close(); });
`;

/** SQLite result codes that mean "the database cannot serve now", not "this request is wrong". */
const UNAVAILABLE_CODES = /^SQLITE_(BUSY|LOCKED|IOERR|FULL|CANTOPEN|READONLY|PROTOCOL|NOMEM)/;

function unavailable(error: unknown): unknown {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && UNAVAILABLE_CODES.test(code)) return new StoreUnavailableError(error);
  if (error instanceof TypeError && /database connection is not open/.test(error.message)) return new StoreUnavailableError(error);
  return error;
}

/** Runs a synchronous database call, mapping outage-like failures to StoreUnavailableError. */
function guard<T>(call: () => T): T {
  try {
    return call();
  } catch (error) {
    throw unavailable(error);
  }
}

/** A write waiting for the end of the event-loop turn, when it commits with the others queued in that turn. */
interface PendingWrite {
  readonly run: () => unknown;
  readonly resolve: (value: never) => void;
  readonly reject: (reason: unknown) => void;
}

type WriteOutcome = { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly error: unknown };

/** Table, key (refresh_tokens has no rowid: its key is the grant's id and the digest) and what expired means. */
const sweptTables = [
  ['authorization_codes', 'rowid', 'expires_at < ?'],
  ['refresh_tokens', 'grant_id, digest', 'expires_at < ?'],
  ['device_authorizations', 'rowid', 'expires_at < ?'],
  ['sessions', 'rowid', 'expires_at < ?'],
  ['transient', 'rowid', 'expires_at < ?'],
  ['attempts', 'rowid', 'window_ends_at <= ?'],
] as const;

/** State in one SQLite file (better-sqlite3, WAL): the embedded default of DESIGN.md §6. */
export class SqliteStore implements Store {
  readonly description: string;
  readonly #db: Database.Database;
  readonly #statements;
  readonly #transactions;
  #pending: PendingWrite[] = [];
  readonly #checkpointer: Worker;

  /** Opens (creating folder and file, mode 0600, when missing) and migrates the database at `path`. */
  constructor(path: string) {
    const file = resolve(path);
    this.description = `sqlite ${file}`;
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    // Created before SQLite opens it so it never exists with a wider mode; -wal and -shm copy this mode.
    closeSync(openSync(file, 'a', 0o600));
    const db = new Database(file, { timeout: BUSY_TIMEOUT_MS });
    try {
      db.pragma('journal_mode = WAL');
      db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
      // NORMAL in WAL loses recent commits only on an OS crash or power loss; a killed process loses nothing.
      db.pragma('synchronous = NORMAL');
      db.pragma(`wal_autocheckpoint = ${FALLBACK_AUTOCHECKPOINT_PAGES}`);
      migrateSqlite(db);
    } catch (error) {
      db.close();
      throw unavailable(error);
    }
    this.#db = db;
    this.#statements = prepareStatements(db);
    this.#transactions = prepareTransactions(db, this.#statements);
    this.#checkpointer = new Worker(CHECKPOINTER, {
      eval: true,
      workerData: { module: createRequire(import.meta.url).resolve('better-sqlite3'), file, busyTimeoutMs: BUSY_TIMEOUT_MS, intervalMs: CHECKPOINT_INTERVAL_MS },
    });
    this.#checkpointer.on('error', () => undefined);
    this.#checkpointer.unref();
  }

  async loadOrCreateKeys(candidates: readonly StoredKey[]): Promise<StoredKey[]> {
    return guard(() => this.#transactions.loadOrCreateKeys.immediate(candidates));
  }

  async getGrant(grantId: string): Promise<Grant | undefined> {
    const row = guard(() => this.#statements.getGrant.get(grantId) as GrantRow | undefined);
    return row === undefined ? undefined : grantFromRow(row);
  }

  async revokeGrant(grantId: string): Promise<void> {
    return this.#write(() => this.#transactions.revokeGrant(grantId));
  }

  async createGrantWithCode(grant: Grant, code: AuthorizationCodeRecord): Promise<void> {
    return this.#write(() => this.#transactions.createGrantWithCode(grant, code));
  }

  async findCode(digest: string, now: number): Promise<CodeLookup> {
    return codeLookupFromRow(guard(() => this.#statements.findCode.get(digest) as CodeRow | undefined), now);
  }

  async consumeCode(digest: string, now: number, firstRefresh?: RefreshTokenRecord): Promise<boolean> {
    return this.#write(() => this.#transactions.consumeCode(digest, now, firstRefresh));
  }

  async findRefreshToken(grantId: string, digest: string, now: number): Promise<RefreshLookup> {
    return refreshLookupFromRow(guard(() => this.#statements.findRefreshToken.get(grantId, digest) as RefreshRow | undefined), now);
  }

  async addRefreshToken(token: RefreshTokenRecord): Promise<void> {
    return this.#write(() => this.#transactions.addRefreshToken(token));
  }

  async rotateRefreshToken(oldDigest: string, next: RefreshTokenRecord, now: number): Promise<boolean> {
    return this.#write(() => this.#transactions.rotateRefreshToken(oldDigest, next, now));
  }

  async createDeviceAuthorization(record: DeviceAuthorizationRecord): Promise<void> {
    return this.#write(() => this.#transactions.createDeviceAuthorization(record));
  }

  async findByUserCode(userCode: string, now: number): Promise<DeviceAuthorizationRecord | undefined> {
    const row = guard(() => this.#statements.findByUserCode.get(userCode, now) as DeviceRow | undefined);
    return row === undefined ? undefined : deviceFromRow(row);
  }

  async findByDeviceCode(deviceCodeDigest: string): Promise<DeviceAuthorizationRecord | undefined> {
    const row = guard(() => this.#statements.findByDeviceCode.get(deviceCodeDigest) as DeviceRow | undefined);
    return row === undefined ? undefined : deviceFromRow(row);
  }

  async recordPoll(deviceCodeDigest: string, now: number, tooFast: boolean): Promise<void> {
    return this.#write(() => void this.#statements.recordPoll.run(now, tooFast ? 5 : 0, deviceCodeDigest));
  }

  async decideDeviceAuthorization(
    userCode: string,
    decision: { approved: true; subject: string; claims: SubjectClaims; authTime: number } | { approved: false },
    now: number,
  ): Promise<boolean> {
    return this.#write(
      () =>
        (decision.approved
          ? this.#statements.approveDevice.run(decision.subject, JSON.stringify(decision.claims), decision.authTime, userCode, now)
          : this.#statements.denyDevice.run(userCode, now)
        ).changes === 1,
    );
  }

  async redeemDeviceCode(
    deviceCodeDigest: string,
    grant: Grant,
    refresh: RefreshTokenRecord | undefined,
    now: number,
  ): Promise<boolean> {
    return this.#write(() => this.#transactions.redeemDeviceCode(deviceCodeDigest, grant, refresh, now));
  }

  async createSession(session: SessionRecord): Promise<void> {
    return this.#write(
      () => void this.#statements.createSession.run(session.digest, session.subject, JSON.stringify(session.claims), session.authTime, session.expiresAt),
    );
  }

  async findSession(digest: string, now: number): Promise<SessionRecord | undefined> {
    const row = guard(() => this.#statements.findSession.get(digest, now) as SessionRow | undefined);
    return row === undefined ? undefined : sessionFromRow(row);
  }

  async deleteSession(digest: string): Promise<void> {
    return this.#write(() => void this.#statements.deleteSession.run(digest));
  }

  async putTransient(kind: string, id: string, value: unknown, expiresAt: number): Promise<void> {
    return this.#write(() => void this.#statements.putTransient.run(kind, id, JSON.stringify(value), expiresAt));
  }

  async getTransient<T>(kind: string, id: string, now: number): Promise<T | undefined> {
    const row = guard(() => this.#statements.getTransient.get(kind, id, now) as { value: string } | undefined);
    return row === undefined ? undefined : (JSON.parse(row.value) as T);
  }

  async takeTransient<T>(kind: string, id: string, now: number): Promise<T | undefined> {
    const row = await this.#write(() => this.#statements.takeTransient.get(kind, id) as { value: string; expires_at: number } | undefined);
    return row === undefined || row.expires_at <= now ? undefined : (JSON.parse(row.value) as T);
  }

  async countAttempt(key: string, now: number, windowMs: number): Promise<number> {
    const row = await this.#write(() => this.#statements.countAttempt.get({ key, windowEndsAt: now + windowMs, now }) as { count: number });
    return row.count;
  }

  async peekAttempts(key: string, now: number): Promise<number> {
    const row = guard(() => this.#statements.peekAttempts.get(key, now) as { count: number } | undefined);
    return row?.count ?? 0;
  }

  async clearAttempts(key: string): Promise<void> {
    return this.#write(() => void this.#statements.clearAttempts.run(key));
  }

  async ping(): Promise<void> {
    guard(() => this.#statements.ping.get());
  }

  async sweep(now: number): Promise<void> {
    for (const [table] of sweptTables) {
      const cutoff = table === 'device_authorizations' ? now - DEVICE_EXPIRY_SLACK_MS : now;
      const statement = this.#statements.sweep[table];
      while (guard(() => statement.run(cutoff).changes) === SWEEP_BATCH) await yieldToRequests();
    }
    while (guard(() => this.#transactions.sweepGrants.immediate(now)) === SWEEP_BATCH) await yieldToRequests();
  }

  async close(): Promise<void> {
    this.#commitPending();
    await this.#checkpointer.terminate();
    if (this.#db.open) this.#db.close();
  }

  /**
   * Group commit: a write waits for the end of the event-loop turn and commits in one transaction with
   * every write queued in that turn; one failing write leaves the others whole (see writeBatch). It
   * resolves only once committed (DESIGN.md §6: no answer before its state change is), and a commit
   * writes the WAL pages its writes share once, so under load a write costs far less (bench/RESULTS.md).
   */
  #write<T>(run: () => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (this.#pending.push({ run, resolve, reject }) === 1) setImmediate(this.#commitPending);
    });
  }

  readonly #commitPending = (): void => {
    const writes = this.#pending;
    if (writes.length === 0) return;
    this.#pending = [];
    let outcomes: WriteOutcome[];
    try {
      outcomes = this.#transactions.writeBatch.immediate(writes);
    } catch (error) {
      // BEGIN or COMMIT failed: none of the writes happened.
      const failure = unavailable(error);
      for (const write of writes) write.reject(failure);
      return;
    }
    outcomes.forEach((outcome, i) => {
      const write = writes[i] as PendingWrite;
      if (outcome.ok) write.resolve(outcome.value as never);
      else write.reject(unavailable(outcome.error));
    });
  };
}

function prepareStatements(db: Database.Database) {
  const sweep = Object.fromEntries(
    sweptTables.map(([table, key, condition]) => [
      table,
      db.prepare(`DELETE FROM ${table} WHERE (${key}) IN (SELECT ${key} FROM ${table} WHERE ${condition} LIMIT ${SWEEP_BATCH})`),
    ]),
  ) as Record<(typeof sweptTables)[number][0], Database.Statement>;
  return {
    ping: db.prepare('SELECT 1'),
    selectKeys: db.prepare('SELECT kid, alg, private_jwk, created_at FROM keys ORDER BY created_at, kid'),
    insertKey: db.prepare('INSERT INTO keys (kid, alg, private_jwk, created_at) VALUES (?, ?, ?, ?)'),
    getGrant: db.prepare(`SELECT ${GRANT_COLUMNS} FROM grants g WHERE g.id = ?`),
    insertGrant: db.prepare(
      'INSERT INTO grants (id, client_id, subject, scope, resources, claims, auth_time, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)',
    ),
    extendGrant: db.prepare(`UPDATE grants SET expires_at = @expiresAt + ${GRANT_EXPIRY_SLACK_MS} WHERE id = @grantId AND expires_at < @expiresAt`),
    deleteGrant: db.prepare('DELETE FROM grants WHERE id = ?'),
    deleteCodesOfGrant: db.prepare('DELETE FROM authorization_codes WHERE grant_id = ?'),
    deleteRefreshTokensOfGrant: db.prepare('DELETE FROM refresh_tokens WHERE grant_id = ?'),
    expiredGrants: db.prepare(`SELECT id FROM grants WHERE expires_at < ? LIMIT ${SWEEP_BATCH}`).pluck(),
    insertCode: db.prepare(
      'INSERT INTO authorization_codes (digest, grant_id, client_id, redirect_uri, code_challenge, nonce, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
    ),
    findCode: db.prepare(
      `SELECT c.digest AS code_digest, c.grant_id AS code_grant_id, c.client_id AS code_client_id, c.redirect_uri, c.code_challenge,
        c.nonce, c.expires_at AS code_expires_at, c.used, ${GRANT_COLUMNS}
       FROM authorization_codes c LEFT JOIN grants g ON g.id = c.grant_id WHERE c.digest = ?`,
    ),
    consumeCode: db.prepare('UPDATE authorization_codes SET used = TRUE WHERE digest = ? AND used = FALSE AND expires_at > ?'),
    findRefreshToken: db.prepare(
      `SELECT r.digest AS token_digest, r.grant_id AS token_grant_id, r.issued_at, r.expires_at AS token_expires_at, r.status, ${GRANT_COLUMNS}
       FROM refresh_tokens r LEFT JOIN grants g ON g.id = r.grant_id WHERE r.grant_id = ? AND r.digest = ?`,
    ),
    insertRefreshToken: db.prepare("INSERT INTO refresh_tokens (grant_id, digest, issued_at, expires_at, status) VALUES (?, ?, ?, ?, 'active')"),
    markRotated: db.prepare("UPDATE refresh_tokens SET status = 'rotated' WHERE grant_id = ? AND digest = ? AND status = 'active' AND expires_at > ?"),
    releaseUserCode: db.prepare('DELETE FROM device_authorizations WHERE user_code = ? AND expires_at <= ?'),
    insertDevice: db.prepare(`INSERT INTO device_authorizations (${DEVICE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
    findByUserCode: db.prepare(`SELECT ${DEVICE_COLUMNS} FROM device_authorizations WHERE user_code = ? AND expires_at > ?`),
    findByDeviceCode: db.prepare(`SELECT ${DEVICE_COLUMNS} FROM device_authorizations WHERE device_code_digest = ?`),
    recordPoll: db.prepare(
      'UPDATE device_authorizations SET last_polled_at = ?, interval_seconds = interval_seconds + ? WHERE device_code_digest = ?',
    ),
    approveDevice: db.prepare(
      `UPDATE device_authorizations SET status = 'approved', subject = ?, claims = ?, auth_time = ?
       WHERE user_code = ? AND status = 'pending' AND expires_at > ?`,
    ),
    denyDevice: db.prepare("UPDATE device_authorizations SET status = 'denied' WHERE user_code = ? AND status = 'pending' AND expires_at > ?"),
    redeemDevice: db.prepare(
      "UPDATE device_authorizations SET status = 'redeemed' WHERE device_code_digest = ? AND status = 'approved' AND expires_at > ?",
    ),
    createSession: db.prepare('INSERT INTO sessions (digest, subject, claims, auth_time, expires_at) VALUES (?, ?, ?, ?, ?)'),
    findSession: db.prepare('SELECT digest, subject, claims, auth_time, expires_at FROM sessions WHERE digest = ? AND expires_at > ?'),
    deleteSession: db.prepare('DELETE FROM sessions WHERE digest = ?'),
    putTransient: db.prepare(
      'INSERT INTO transient (kind, id, value, expires_at) VALUES (?, ?, ?, ?) ON CONFLICT (kind, id) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at',
    ),
    getTransient: db.prepare('SELECT value FROM transient WHERE kind = ? AND id = ? AND expires_at > ?'),
    takeTransient: db.prepare('DELETE FROM transient WHERE kind = ? AND id = ? RETURNING value, expires_at'),
    // A window that has ended starts over at 1.
    countAttempt: db.prepare(
      `INSERT INTO attempts (attempt_key, count, window_ends_at) VALUES (@key, 1, @windowEndsAt)
       ON CONFLICT (attempt_key) DO UPDATE SET
         count = CASE WHEN attempts.window_ends_at <= @now THEN 1 ELSE attempts.count + 1 END,
         window_ends_at = CASE WHEN attempts.window_ends_at <= @now THEN @windowEndsAt ELSE attempts.window_ends_at END
       RETURNING count`,
    ),
    peekAttempts: db.prepare('SELECT count FROM attempts WHERE attempt_key = ? AND window_ends_at > ?'),
    clearAttempts: db.prepare('DELETE FROM attempts WHERE attempt_key = ?'),
    sweep,
  };
}

type Statements = ReturnType<typeof prepareStatements>;

function prepareTransactions(db: Database.Database, s: Statements) {
  const insertGrant = (grant: Grant): void => void s.insertGrant.run(...grantParams(grant));
  const insertRefreshToken = (token: RefreshTokenRecord): void => {
    s.insertRefreshToken.run(token.grantId, token.digest, token.issuedAt, token.expiresAt);
    s.extendGrant.run({ expiresAt: token.expiresAt, grantId: token.grantId });
  };
  const revokeGrant = (grantId: string): void => {
    s.deleteCodesOfGrant.run(grantId);
    s.deleteRefreshTokensOfGrant.run(grantId);
    s.deleteGrant.run(grantId);
  };
  return {
    loadOrCreateKeys: db.transaction((candidates: readonly StoredKey[]): StoredKey[] => {
      const stored = s.selectKeys.all() as KeyRow[];
      if (stored.length > 0) return stored.map(keyFromRow);
      for (const key of candidates) s.insertKey.run(key.kid, key.alg, key.privateJwk, key.createdAt);
      return (s.selectKeys.all() as KeyRow[]).map(keyFromRow);
    }),
    revokeGrant: db.transaction(revokeGrant),
    createGrantWithCode: db.transaction((grant: Grant, code: AuthorizationCodeRecord): void => {
      insertGrant(grant);
      s.insertCode.run(code.digest, code.grantId, code.clientId, code.redirectUri, code.codeChallenge, code.nonce ?? null, code.expiresAt);
    }),
    addRefreshToken: db.transaction(insertRefreshToken),
    consumeCode: db.transaction((digest: string, now: number, firstRefresh: RefreshTokenRecord | undefined): boolean => {
      if (s.consumeCode.run(digest, now).changes !== 1) return false;
      if (firstRefresh !== undefined) insertRefreshToken(firstRefresh);
      return true;
    }),
    rotateRefreshToken: db.transaction((oldDigest: string, next: RefreshTokenRecord, now: number): boolean => {
      // Nothing else is written when the old token was not active (RFC 9700 §4.14.2 reuse).
      if (s.markRotated.run(next.grantId, oldDigest, now).changes !== 1) return false;
      insertRefreshToken(next);
      return true;
    }),
    createDeviceAuthorization: db.transaction((record: DeviceAuthorizationRecord): void => {
      // An expired record gives its user code up; a live one keeps it and the insert fails.
      s.releaseUserCode.run(record.userCode, record.createdAt);
      s.insertDevice.run(...deviceParams(record));
    }),
    redeemDeviceCode: db.transaction(
      (deviceCodeDigest: string, grant: Grant, refresh: RefreshTokenRecord | undefined, now: number): boolean => {
        if (s.redeemDevice.run(deviceCodeDigest, now).changes !== 1) return false;
        insertGrant(grant);
        if (refresh !== undefined) insertRefreshToken(refresh);
        return true;
      },
    ),
    // A write of several statements is one of the transactions above, which nested here is a savepoint:
    // a failing write is rolled back alone (a single statement is atomic by itself).
    writeBatch: db.transaction((writes: readonly PendingWrite[]): WriteOutcome[] =>
      writes.map((write) => {
        try {
          return { ok: true, value: write.run() };
        } catch (error) {
          return { ok: false, error };
        }
      }),
    ),
    sweepGrants: db.transaction((now: number): number => {
      const ids = s.expiredGrants.all(now) as string[];
      for (const id of ids) revokeGrant(id);
      return ids.length;
    }),
  };
}

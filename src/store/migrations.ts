/**
 * Versioned schema migrations (DESIGN.md §6), applied at start by the SQLite and PostgreSQL stores.
 * The DDL is written in the subset both dialects accept, dialect.ts filling in where they differ. Times are epoch milliseconds (BIGINT);
 * JSON values (scope, resources, claims) are JSON text, so arrays keep their order.
 * Append new migrations; never change what a shipped one leaves behind in a way the code could tell apart.
 */
import type { Database } from 'better-sqlite3';
import type { ClientBase } from 'pg';
import { POSTGRES, POSTGRES_TRANSACTION_LOCK, SQLITE, sqliteStatement, type Dialect } from './dialect.js';

export interface Migration {
  readonly version: number;
  readonly description: string;
  /** The DDL (and data copies), in `dialect`; dialect.ts holds the few places where the two differ. */
  statements(dialect: Dialect): readonly string[];
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    description: 'initial tables',
    statements: () => [
      `CREATE TABLE keys (
        kid TEXT PRIMARY KEY,
        alg TEXT NOT NULL,
        private_jwk TEXT NOT NULL,
        created_at BIGINT NOT NULL
      )`,
      `CREATE TABLE grants (
        id TEXT PRIMARY KEY,
        client_id TEXT NOT NULL,
        subject TEXT NOT NULL,
        scope TEXT NOT NULL,
        resources TEXT NOT NULL,
        claims TEXT NOT NULL,
        auth_time BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL
      )`,
      'CREATE INDEX grants_expires_at ON grants (expires_at)',
      `CREATE TABLE authorization_codes (
        digest TEXT PRIMARY KEY,
        grant_id TEXT NOT NULL,
        client_id TEXT NOT NULL,
        redirect_uri TEXT NOT NULL,
        code_challenge TEXT NOT NULL,
        nonce TEXT,
        expires_at BIGINT NOT NULL,
        used BOOLEAN NOT NULL DEFAULT FALSE
      )`,
      'CREATE INDEX authorization_codes_grant_id ON authorization_codes (grant_id)',
      'CREATE INDEX authorization_codes_expires_at ON authorization_codes (expires_at)',
      `CREATE TABLE refresh_tokens (
        digest TEXT PRIMARY KEY,
        grant_id TEXT NOT NULL,
        issued_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'rotated'))
      )`,
      'CREATE INDEX refresh_tokens_grant_id ON refresh_tokens (grant_id)',
      'CREATE INDEX refresh_tokens_expires_at ON refresh_tokens (expires_at)',
      `CREATE TABLE device_authorizations (
        device_code_digest TEXT PRIMARY KEY,
        user_code TEXT NOT NULL UNIQUE,
        client_id TEXT NOT NULL,
        scope TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'redeemed')),
        interval_seconds INTEGER NOT NULL,
        last_polled_at BIGINT,
        subject TEXT,
        claims TEXT,
        auth_time BIGINT,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL
      )`,
      'CREATE INDEX device_authorizations_expires_at ON device_authorizations (expires_at)',
      `CREATE TABLE sessions (
        digest TEXT PRIMARY KEY,
        subject TEXT NOT NULL,
        claims TEXT NOT NULL,
        auth_time BIGINT NOT NULL,
        expires_at BIGINT NOT NULL
      )`,
      'CREATE INDEX sessions_expires_at ON sessions (expires_at)',
      `CREATE TABLE transient (
        kind TEXT NOT NULL,
        id TEXT NOT NULL,
        value TEXT NOT NULL,
        expires_at BIGINT NOT NULL,
        PRIMARY KEY (kind, id)
      )`,
      'CREATE INDEX transient_expires_at ON transient (expires_at)',
      `CREATE TABLE attempts (
        attempt_key TEXT PRIMARY KEY,
        count INTEGER NOT NULL,
        window_ends_at BIGINT NOT NULL
      )`,
      'CREATE INDEX attempts_window_ends_at ON attempts (window_ends_at)',
    ],
  },
  {
    version: 2,
    // In 0.2.0 this copied the 0.1 tokens, which no request reaches (their value names no grant): either way they are refused.
    description: 'refresh tokens keyed by grant and digest; the tokens of 0.1, which name no grant, are dropped and their clients sign in again',
    statements: (dialect) => [
      'DROP TABLE refresh_tokens',
      // Keyed by (grant_id, digest): a rotation reads and writes one index page, the one its grant's tokens share,
      // where a digest key put the old token, the new one and the grant_id index on three random pages.
      `CREATE TABLE refresh_tokens (
        grant_id TEXT NOT NULL,
        digest TEXT NOT NULL,
        issued_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'rotated')),
        PRIMARY KEY (grant_id, digest)
      )${dialect.keyOnlyTable}`,
      'CREATE INDEX refresh_tokens_expires_at ON refresh_tokens (expires_at)',
    ],
  },
  {
    version: 3,
    description:
      'named tables for login requests, upstream sign-in state and subject claims instead of transient, keeping ' +
      'subject claims and upstream sign-in state; login requests in flight (15 minutes) are dropped and those ' +
      'sign-ins start again; used codes stay with their grant',
    statements: (dialect) => [
      `CREATE TABLE login_requests (
        id TEXT PRIMARY KEY,
        purpose TEXT NOT NULL,
        browser TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL
      )`,
      'CREATE INDEX login_requests_expires_at ON login_requests (expires_at)',
      `CREATE TABLE federation_states (
        state TEXT PRIMARY KEY,
        login_id TEXT NOT NULL,
        upstream TEXT NOT NULL,
        code_verifier TEXT NOT NULL,
        nonce TEXT NOT NULL,
        browser TEXT NOT NULL,
        expires_at BIGINT NOT NULL
      )`,
      'CREATE INDEX federation_states_expires_at ON federation_states (expires_at)',
      `CREATE TABLE subject_claims (
        subject TEXT PRIMARY KEY,
        claims TEXT NOT NULL,
        expires_at BIGINT NOT NULL
      )`,
      'CREATE INDEX subject_claims_expires_at ON subject_claims (expires_at)',
      "INSERT INTO subject_claims (subject, claims, expires_at) SELECT id, value, expires_at FROM transient WHERE kind = 'subject-claims'",
      `INSERT INTO federation_states (state, login_id, upstream, code_verifier, nonce, browser, expires_at)
        SELECT id, ${['loginId', 'upstream', 'codeVerifier', 'nonce', 'browser'].map((key) => dialect.jsonText('value', key)).join(', ')}, expires_at
        FROM transient WHERE kind = 'federation'`,
      'DROP TABLE transient',
      // The sweep deletes unused codes when they expire; a used one goes with its grant, so only unused ones are indexed by expiry.
      'DROP INDEX authorization_codes_expires_at',
      'CREATE INDEX authorization_codes_unused_expires_at ON authorization_codes (expires_at) WHERE used = FALSE',
    ],
  },
  {
    version: 4,
    description:
      'token lifecycle: keys can be retired, revoked client_credentials access tokens are kept until they expire, ' +
      'grants are found by user and by client, sessions by user',
    statements: (dialect) => [
      'ALTER TABLE keys ADD COLUMN retired_at BIGINT',
      `CREATE TABLE revoked_access_tokens (
        jti TEXT PRIMARY KEY,
        expires_at BIGINT NOT NULL
      )${dialect.keyOnlyTable}`,
      'CREATE INDEX revoked_access_tokens_expires_at ON revoked_access_tokens (expires_at)',
      // `pinpoint grants list|revoke --user/--client` and the end of a user's sessions (DESIGN.md §2).
      'CREATE INDEX grants_subject ON grants (subject)',
      'CREATE INDEX grants_client_id ON grants (client_id)',
      'CREATE INDEX sessions_subject ON sessions (subject)',
    ],
  },
  {
    version: 5,
    description:
      'dynamic clients: when a refresh token was rotated (tokens rotated before this read as long ago, so they get ' +
      'no reuse grace), registered clients, and the consents people gave them',
    statements: (dialect) => [
      'ALTER TABLE refresh_tokens ADD COLUMN rotated_at BIGINT',
      `CREATE TABLE registered_clients (
        client_id TEXT PRIMARY KEY,
        secret_digest TEXT,
        metadata TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL
      )`,
      'CREATE INDEX registered_clients_expires_at ON registered_clients (expires_at)',
      `CREATE TABLE consents (
        subject TEXT NOT NULL,
        client_id TEXT NOT NULL,
        scope TEXT NOT NULL,
        resources TEXT NOT NULL,
        whole_audience BOOLEAN NOT NULL,
        granted_at BIGINT NOT NULL,
        PRIMARY KEY (subject, client_id)
      )${dialect.keyOnlyTable}`,
      // A client's consents go with its registration and with `pinpoint grants revoke --client`.
      'CREATE INDEX consents_client_id ON consents (client_id)',
    ],
  },
  {
    version: 6,
    description:
      'consents are remembered per redirect origin (DESIGN.md §8); a consent given before this says nowhere the codes ' +
      'went, so it is dropped and the person is asked again',
    statements: (dialect) => [
      'DROP TABLE consents',
      `CREATE TABLE consents (
        subject TEXT NOT NULL,
        client_id TEXT NOT NULL,
        redirect_origin TEXT NOT NULL,
        scope TEXT NOT NULL,
        resources TEXT NOT NULL,
        whole_audience BOOLEAN NOT NULL,
        granted_at BIGINT NOT NULL,
        PRIMARY KEY (subject, client_id, redirect_origin)
      )${dialect.keyOnlyTable}`,
      'CREATE INDEX consents_client_id ON consents (client_id)',
    ],
  },
  {
    version: 7,
    description:
      'DPoP and pushed authorization requests (DESIGN.md §13): a public client\'s refresh token may be bound to a key, ' +
      'proof and client assertion identifiers are kept while they could be replayed, pushed requests live 60 s',
    statements: (dialect) => [
      'ALTER TABLE refresh_tokens ADD COLUMN dpop_jkt TEXT',
      `CREATE TABLE used_once (
        kind TEXT NOT NULL,
        id TEXT NOT NULL,
        expires_at BIGINT NOT NULL,
        PRIMARY KEY (kind, id)
      )${dialect.keyOnlyTable}`,
      'CREATE INDEX used_once_expires_at ON used_once (expires_at)',
      `CREATE TABLE pushed_requests (
        digest TEXT PRIMARY KEY,
        client_id TEXT NOT NULL,
        parameters TEXT NOT NULL,
        expires_at BIGINT NOT NULL
      )`,
      'CREATE INDEX pushed_requests_expires_at ON pushed_requests (expires_at)',
    ],
  },
  {
    version: 8,
    description: 'DPoP-bound authorization codes (RFC 9449 §10): a code may be bound to the key its authorization request named',
    statements: () => ['ALTER TABLE authorization_codes ADD COLUMN dpop_jkt TEXT'],
  },
  {
    version: 9,
    description: 'key events recorded once (DESIGN.md §10): one key_rotation audit line per change across workers, instances and restarts',
    statements: (dialect) => [
      `CREATE TABLE key_events (
        kid TEXT NOT NULL,
        event TEXT NOT NULL,
        recorded_at BIGINT NOT NULL,
        PRIMARY KEY (kid, event)
      )${dialect.keyOnlyTable}`,
    ],
  },
];

const MIGRATIONS_TABLE = 'CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)';
const APPLIED_VERSIONS = 'SELECT version FROM schema_migrations';
const RECORD_VERSION = 'INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)';

/** The newest schema this version writes. */
export const NEWEST_SCHEMA_VERSION = Math.max(...MIGRATIONS.map((migration) => migration.version));

/** A database a newer Pinpoint has migrated: this version would misread it, or answer 500s from missing tables. */
export class NewerSchemaError extends Error {
  constructor(readonly version: number) {
    super(
      `the database was migrated by a newer Pinpoint (schema version ${version}; this version knows up to ${NEWEST_SCHEMA_VERSION}): ` +
        'run that version, or restore a backup made before the upgrade',
    );
    this.name = 'NewerSchemaError';
  }
}

/** Why a database whose applied versions go beyond this version's (a downgrade) cannot be used, or undefined. */
export function newerSchemaProblem(applied: Iterable<number>): NewerSchemaError | undefined {
  const newest = Math.max(0, ...applied);
  return newest > NEWEST_SCHEMA_VERSION ? new NewerSchemaError(newest) : undefined;
}

/** Refuses a newer schema before anything is written. */
function refuseNewerSchema(applied: Iterable<number>): void {
  const problem = newerSchemaProblem(applied);
  if (problem !== undefined) throw problem;
}

/** Serialises migrations of every Pinpoint instance sharing one PostgreSQL database. */
const POSTGRES_MIGRATION_LOCK = 7_041_984_431_001;

/** Quotes a PostgreSQL identifier (schema name). */
export const quoteIdentifier = (name: string): string => `"${name.replaceAll('"', '""')}"`;

/** Applies the missing migrations in one IMMEDIATE transaction (so a second process waits); returns the versions applied. */
export function migrateSqlite(db: Database, now = Date.now()): number[] {
  const migrate = db.transaction((): number[] => {
    db.exec(MIGRATIONS_TABLE);
    const done = new Set((db.prepare(APPLIED_VERSIONS).all() as { version: number }[]).map((row) => row.version));
    refuseNewerSchema(done);
    const applied: number[] = [];
    for (const migration of MIGRATIONS) {
      if (done.has(migration.version)) continue;
      for (const statement of migration.statements(SQLITE)) db.exec(statement);
      db.prepare(sqliteStatement(RECORD_VERSION).text).run(migration.version, now);
      applied.push(migration.version);
    }
    return applied;
  });
  return migrate.immediate();
}

/**
 * Creates `schema` if missing and applies the missing migrations in one transaction holding an
 * advisory lock, so instances starting at once apply each migration exactly once. Returns the versions applied.
 */
export async function migratePostgres(client: ClientBase, schema: string, now = Date.now()): Promise<number[]> {
  await client.query('BEGIN');
  try {
    await client.query(POSTGRES_TRANSACTION_LOCK, [POSTGRES_MIGRATION_LOCK]);
    // CREATE SCHEMA IF NOT EXISTS needs the CREATE privilege even when the schema exists.
    const exists = await client.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]);
    if (exists.rowCount === 0) await client.query(`CREATE SCHEMA ${quoteIdentifier(schema)}`);
    await client.query(`SET LOCAL search_path TO ${quoteIdentifier(schema)}`);
    await client.query(MIGRATIONS_TABLE);
    const rows = await client.query<{ version: number }>(APPLIED_VERSIONS);
    const done = new Set(rows.rows.map((row) => row.version));
    refuseNewerSchema(done);
    const applied: number[] = [];
    for (const migration of MIGRATIONS) {
      if (done.has(migration.version)) continue;
      for (const statement of migration.statements(POSTGRES)) await client.query(statement);
      await client.query(RECORD_VERSION, [migration.version, now]);
      applied.push(migration.version);
    }
    await client.query('COMMIT');
    return applied;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  }
}

/**
 * Versioned schema migrations (DESIGN.md §6), applied at start by the SQLite and PostgreSQL stores.
 * The DDL is written in the subset both dialects accept. Times are epoch milliseconds (BIGINT);
 * JSON values (scope, resources, claims) are JSON text, so arrays keep their order.
 * Append new migrations; never edit one that has shipped.
 */
import type { Database } from 'better-sqlite3';
import type { ClientBase } from 'pg';

export interface Migration {
  readonly version: number;
  readonly description: string;
  /** The same DDL for both dialects, or each one's own where they differ. */
  readonly statements: readonly string[] | { readonly sqlite: readonly string[]; readonly postgres: readonly string[] };
}

type Dialect = 'sqlite' | 'postgres';

const statementsFor = (migration: Migration, dialect: Dialect): readonly string[] =>
  'sqlite' in migration.statements ? migration.statements[dialect] : migration.statements;

/**
 * Refresh tokens keyed by (grant_id, digest): a rotation reads and writes one index page, the one its grant's
 * tokens share, where a digest key put the old token, the new one and the grant_id index on three random pages.
 */
const refreshTokensByGrant = (tableOptions: string): string[] => [
  `CREATE TABLE refresh_tokens_by_grant (
    grant_id TEXT NOT NULL,
    digest TEXT NOT NULL,
    issued_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'rotated')),
    PRIMARY KEY (grant_id, digest)
  )${tableOptions}`,
  `INSERT INTO refresh_tokens_by_grant (grant_id, digest, issued_at, expires_at, status)
    SELECT grant_id, digest, issued_at, expires_at, status FROM refresh_tokens`,
  'DROP TABLE refresh_tokens',
  'ALTER TABLE refresh_tokens_by_grant RENAME TO refresh_tokens',
  'CREATE INDEX refresh_tokens_expires_at ON refresh_tokens (expires_at)',
];

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    description: 'initial tables',
    statements: [
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
    // Tokens issued before carry no grant id: they are refused and their clients sign in again.
    description: 'refresh tokens keyed by grant and digest (refresh tokens name their grant)',
    // SQLite: WITHOUT ROWID makes the key the table itself, one B-tree instead of a table and an index.
    statements: { sqlite: refreshTokensByGrant(' WITHOUT ROWID'), postgres: refreshTokensByGrant('') },
  },
];

const MIGRATIONS_TABLE = 'CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)';

/** Serialises migrations of every Pinpoint instance sharing one PostgreSQL database. */
const POSTGRES_MIGRATION_LOCK = 7_041_984_431_001;

/** Quotes a PostgreSQL identifier (schema name). */
export const quoteIdentifier = (name: string): string => `"${name.replaceAll('"', '""')}"`;

/** Applies the missing migrations in one IMMEDIATE transaction (so a second process waits); returns the versions applied. */
export function migrateSqlite(db: Database, now = Date.now()): number[] {
  const migrate = db.transaction((): number[] => {
    db.exec(MIGRATIONS_TABLE);
    const done = new Set((db.prepare('SELECT version FROM schema_migrations').all() as { version: number }[]).map((row) => row.version));
    const applied: number[] = [];
    for (const migration of MIGRATIONS) {
      if (done.has(migration.version)) continue;
      for (const statement of statementsFor(migration, 'sqlite')) db.exec(statement);
      db.prepare('INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)').run(migration.version, now);
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
    await client.query('SELECT pg_advisory_xact_lock($1)', [POSTGRES_MIGRATION_LOCK]);
    // CREATE SCHEMA IF NOT EXISTS needs the CREATE privilege even when the schema exists.
    const exists = await client.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]);
    if (exists.rowCount === 0) await client.query(`CREATE SCHEMA ${quoteIdentifier(schema)}`);
    await client.query(`SET LOCAL search_path TO ${quoteIdentifier(schema)}`);
    await client.query(MIGRATIONS_TABLE);
    const rows = await client.query<{ version: number }>('SELECT version FROM schema_migrations');
    const done = new Set(rows.rows.map((row) => row.version));
    const applied: number[] = [];
    for (const migration of MIGRATIONS) {
      if (done.has(migration.version)) continue;
      for (const statement of statementsFor(migration, 'postgres')) await client.query(statement);
      await client.query('INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)', [migration.version, now]);
      applied.push(migration.version);
    }
    await client.query('COMMIT');
    return applied;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  }
}

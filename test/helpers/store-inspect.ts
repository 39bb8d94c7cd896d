/**
 * Reading a SQL store's rows from outside it, through a second connection, for what no store method shows (a
 * grant's row, how many rows a sweep left), and building the database of an older version to migrate. Tests only:
 * the stores themselves expose nothing for this, and the memory store has no outside to read from.
 */
import Database from 'better-sqlite3';
import pg from 'pg';
import { sqliteStatement, type Dialect } from '../../src/store/dialect.js';
import { MIGRATIONS, quoteIdentifier } from '../../src/store/migrations.js';
import { GRANT_COLUMNS, grantFromRow, type GrantRow } from '../../src/store/rows.js';
import type { Grant } from '../../src/store/types.js';

export interface StoreInspector {
  /** The grant's row, mapped as the store maps it; undefined when there is none. */
  grant(grantId: string): Promise<Grant | undefined>;
  /** How many rows `table` holds. */
  rows(table: string): Promise<number>;
  /** The names of the indexes on `table`, sorted. */
  indexes(table: string): Promise<string[]>;
}

const GRANT_BY_ID = `SELECT ${GRANT_COLUMNS} FROM grants g WHERE g.id = $1`;

/** Reads the SQLite file at `file` on its own read-only connection. */
export function sqliteInspector(file: string): StoreInspector {
  const read = <T>(work: (db: Database.Database) => T): T => {
    const db = new Database(file, { readonly: true, fileMustExist: true });
    try {
      return work(db);
    } finally {
      db.close();
    }
  };
  return {
    grant: async (grantId) => read((db) => {
      const row = db.prepare(sqliteStatement(GRANT_BY_ID).text).get(grantId) as GrantRow | undefined;
      return row === undefined ? undefined : grantFromRow(row);
    }),
    rows: async (table) => read((db) => (db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n),
    indexes: async (table) =>
      read((db) =>
        (db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? ORDER BY name").all(table) as { name: string }[]).map(
          (row) => row.name,
        ),
      ),
  };
}

/** Reads `schema` of the PostgreSQL database at `url` on a connection of its own. */
export function postgresInspector(url: string, schema: string): StoreInspector {
  const read = async <T>(work: (client: pg.Client) => Promise<T>): Promise<T> => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query(`SET search_path TO ${quoteIdentifier(schema)}`);
      return await work(client);
    } finally {
      await client.end();
    }
  };
  return {
    grant: (grantId) =>
      read(async (client) => {
        const row = (await client.query<GrantRow>(GRANT_BY_ID, [grantId])).rows[0];
        return row === undefined ? undefined : grantFromRow(row);
      }),
    rows: (table) => read(async (client) => Number((await client.query<{ n: string }>(`SELECT count(*) AS n FROM ${table}`)).rows[0]?.n)),
    indexes: (table) =>
      read(async (client) =>
        (
          await client.query<{ name: string }>('SELECT indexname AS name FROM pg_indexes WHERE schemaname = $1 AND tablename = $2', [schema, table])
        ).rows
          .map((row) => row.name)
          .sort(),
      ),
  };
}

/** The statements that make a database as Pinpoint left it at schema `version`, schema_migrations rows included. */
export function schemaAt(version: number, dialect: Dialect, appliedAt = Date.now()): string[] {
  const applied = MIGRATIONS.filter((migration) => migration.version <= version);
  return [
    'CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)',
    ...applied.flatMap((migration) => migration.statements(dialect)),
    ...applied.map((migration) => `INSERT INTO schema_migrations (version, applied_at) VALUES (${migration.version}, ${appliedAt})`),
  ];
}

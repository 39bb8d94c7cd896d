/**
 * Where SQLite and PostgreSQL differ, for the statements of sql.ts and the migrations: the one place that knows.
 * Statements are written in PostgreSQL's form (`$1` parameters, standard SQL both accept); SQLite gets them
 * through sqliteStatement.
 */

/** Row locks a sweep batch skips (PostgreSQL); SQLite has a single writer and no row locks, so it drops the clause. */
export const SKIP_LOCKED = 'FOR UPDATE SKIP LOCKED';

/** PostgreSQL's lock that serialises transactions across connections until they end; SQLite's writer is alone anyway. */
export const POSTGRES_TRANSACTION_LOCK = 'SELECT pg_advisory_xact_lock($1)';

export interface Dialect {
  readonly name: 'sqlite' | 'postgres';
  /** Table options of a table that is nothing but its primary key's B-tree (SQLite: no separate rowid table). */
  readonly keyOnlyTable: string;
  /** The text value of `key` in the JSON text held by `column`. */
  jsonText(column: string, key: string): string;
}

export const SQLITE: Dialect = {
  name: 'sqlite',
  keyOnlyTable: ' WITHOUT ROWID',
  jsonText: (column, key) => `(${column} ->> '${key}')`,
};

export const POSTGRES: Dialect = {
  name: 'postgres',
  keyOnlyTable: '',
  jsonText: (column, key) => `(CAST(${column} AS jsonb) ->> '${key}')`,
};

/**
 * A statement as better-sqlite3 runs it: `$n` becomes an anonymous `?` (better-sqlite3 binds `$n` only by name),
 * and `order` lists, for each `?`, the index of its value; undefined when that is 0, 1, 2... so values bind as given.
 * The statements hold no `$` other than parameters.
 */
export function sqliteStatement(text: string): { readonly text: string; readonly order: readonly number[] | undefined } {
  const order: number[] = [];
  const translated = text.replaceAll(` ${SKIP_LOCKED}`, '').replace(/\$(\d+)/g, (_, n: string) => {
    order.push(Number(n) - 1);
    return '?';
  });
  return { text: translated, order: order.every((index, i) => index === i) ? undefined : order };
}

/**
 * `pinpoint check --probe` for the state store (DESIGN.md §2): reaches it without changing it. SQLite: the file
 * opens read-only, or, before the first start, the folder it will be created in is writable; PostgreSQL: a connection
 * answers a query.
 */
import { constants } from 'node:fs';
import { access, lstat, stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { StateConfig } from '../config/types.js';
import { newerSchemaProblem } from './migrations.js';

export interface StoreProbe {
  readonly ok: boolean;
  readonly detail: string;
}

const reason = (error: unknown): string => {
  const cause = error instanceof Error && error.cause instanceof Error ? error.cause.message : undefined;
  return cause ?? (error instanceof Error ? error.message : String(error));
};

/**
 * The nearest existing folder on the way to `path`: where the first start creates what is missing; or the broken
 * symbolic link on the way, through which nothing can be created.
 */
async function nearestFolder(path: string): Promise<{ readonly folder: string } | { readonly brokenLink: string }> {
  for (let folder = dirname(path); ; folder = dirname(folder)) {
    if (await stat(folder).then(() => true, () => false)) return { folder };
    if (await lstat(folder).then(() => true, () => false)) return { brokenLink: folder };
    if (dirname(folder) === folder) return { folder };
  }
}

async function probeSqlite(path: string): Promise<StoreProbe> {
  const exists = await stat(path).then((found) => found.isFile(), () => false);
  if (!exists) {
    const nearest = await nearestFolder(path);
    if ('brokenLink' in nearest) return { ok: false, detail: `no database yet, and ${nearest.brokenLink} is a symbolic link to nothing, so none can be created` };
    const { folder } = nearest;
    try {
      await access(folder, constants.W_OK | constants.X_OK);
      return { ok: true, detail: `no database yet; it will be created in ${folder} at the first start` };
    } catch {
      return { ok: false, detail: `no database yet, and ${folder} is not writable, so none can be created` };
    }
  }
  const { default: Database } = await import('better-sqlite3');
  try {
    const db = new Database(path, { readonly: true, fileMustExist: true, timeout: 2000 });
    try {
      // Reading the schema fails on a file that is not a database.
      const tables = (db.prepare("SELECT count(*) AS n FROM sqlite_master WHERE type = 'table'").get() as { n: number }).n;
      const migrated = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'").get() !== undefined;
      const newest = migrated ? ((db.prepare('SELECT max(version) AS newest FROM schema_migrations').get() as { newest: number | null }).newest ?? 0) : 0;
      const newer = newerSchemaProblem([newest]);
      if (newer !== undefined) return { ok: false, detail: newer.message };
      return { ok: true, detail: `the database opens (${tables} tables)` };
    } finally {
      db.close();
    }
  } catch (error) {
    return { ok: false, detail: `${path} cannot be read as a database (${reason(error)})` };
  }
}

async function probePostgres(state: Extract<StateConfig, { kind: 'postgres' }>): Promise<StoreProbe> {
  const { PostgresStore } = await import('./postgres.js');
  // The constructor connects nothing and migrates nothing; ping runs one SELECT.
  const store = new PostgresStore(state);
  try {
    const newest = await store.newestAppliedVersion();
    const newer = newerSchemaProblem([newest]);
    if (newer !== undefined) return { ok: false, detail: newer.message };
    return { ok: true, detail: 'a connection answers' };
  } catch (error) {
    return { ok: false, detail: `no connection (${reason(error)})` };
  } finally {
    await store.close();
  }
}

/** Whether the store the `state` block names can be reached; undefined for memory state (nothing to reach). */
export async function probeStore(state: StateConfig): Promise<StoreProbe | undefined> {
  if (state.kind === 'sqlite') return probeSqlite(state.path);
  if (state.kind === 'postgres') return probePostgres(state);
  return undefined;
}

/** Stores of every kind for tests that must hold on each (DESIGN.md §6): memory, a SQLite file, a PostgreSQL database of their own. */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MemoryStore } from '../../src/store/memory.js';
import { openStore } from '../../src/store/open.js';
import type { Store } from '../../src/store/types.js';
import { createTestDatabase, type TestDatabase } from './process.js';
import { postgresInspector, sqliteInspector, type StoreInspector } from './store-inspect.js';

export const POSTGRES_URL = process.env['PINPOINT_TEST_POSTGRES_URL'];
export const POSTGRES_SKIP_REASON = 'PINPOINT_TEST_POSTGRES_URL not set: set it (e.g. postgres://postgres@127.0.0.1:5432/test) to run this on PostgreSQL';

/** A new PostgreSQL database of PINPOINT_TEST_POSTGRES_URL's server for one test file; `drop` removes it. */
export async function createPostgresDatabase(): Promise<TestDatabase> {
  if (POSTGRES_URL === undefined) throw new Error(POSTGRES_SKIP_REASON);
  return createTestDatabase(POSTGRES_URL, 'pinpoint_test');
}

export interface StoreKind {
  readonly name: 'memory' | 'sqlite' | 'postgres';
  /** Why this kind cannot run here, if it cannot. */
  readonly skip?: string;
  /** A fresh, empty store; close it, then call `cleanup`. */
  open(): Promise<OpenedStore>;
}

/** A store of one kind, and what reads its tables from outside (absent for the memory store). */
export interface OpenedStore {
  readonly store: Store;
  readonly inspector?: StoreInspector;
  cleanup(): Promise<void>;
}

export const STORE_KINDS: readonly StoreKind[] = [
  { name: 'memory', open: async () => ({ store: new MemoryStore(), cleanup: async () => undefined }) },
  {
    name: 'sqlite',
    open: async () => {
      const folder = await mkdtemp(join(tmpdir(), 'pinpoint-store-'));
      const path = join(folder, 'pinpoint.db');
      return { store: await openStore({ kind: 'sqlite', path }), inspector: sqliteInspector(path), cleanup: () => rm(folder, { recursive: true, force: true }) };
    },
  },
  {
    name: 'postgres',
    ...(POSTGRES_URL === undefined && { skip: POSTGRES_SKIP_REASON }),
    open: async () => {
      const database = await createPostgresDatabase();
      const store = await openStore({ kind: 'postgres', url: database.url, schema: 'public' });
      return { store, inspector: postgresInspector(database.url, 'public'), cleanup: database.drop };
    },
  },
];

import type { StateConfig } from '../config/types.js';
import { MemoryStore } from './memory.js';
import type { Store } from './types.js';

/**
 * Opens the store the `state` block names (DESIGN.md §6), creating its tables when missing.
 * A PostgreSQL server that cannot be reached rejects with StoreUnavailableError.
 */
export async function openStore(state: StateConfig, log?: { warn(msg: string): void }): Promise<Store> {
  switch (state.kind) {
    case 'memory':
      // The config loader warns that memory state dies with the process; no second warning here.
      return new MemoryStore();
    case 'sqlite': {
      // Loaded on demand so a memory or PostgreSQL deployment never loads the native SQLite module.
      const { SqliteStore } = await import('./sqlite.js');
      return new SqliteStore(state.path);
    }
    case 'postgres': {
      const { PostgresStore } = await import('./postgres.js');
      return PostgresStore.open(state, log);
    }
  }
}

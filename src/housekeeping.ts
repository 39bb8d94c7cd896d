/**
 * What a serving process does on timers (DESIGN.md §6, §10, §11). Every one re-reads the signing keys, since each signs
 * with them; only the housekeeper also sweeps expired state and writes the key_rotation audit line, so N workers give
 * one line per change of keys and one sweep, not N sweeps contending for the SQLite write lock.
 */
import type { Logger } from 'pino';
import type { KeyRing } from './crypto/keys.js';
import type { Store } from './store/types.js';

/** How often expired state is swept (DESIGN.md §6). */
export const SWEEP_INTERVAL_MS = 60_000;

export interface HousekeepingParts {
  readonly store: Pick<Store, 'sweep'>;
  readonly keys: Pick<KeyRing, 'start' | 'stop'>;
  readonly logger: Logger;
  /** Whether this process keeps house for the server: the one worker the primary chose, or a server started alone. */
  readonly housekeeper: boolean;
  readonly sweepIntervalMs?: number;
}

/** Starts the key reloads, and in the housekeeper the sweep and the key_rotation audit line; returns what stops them. */
export function startHousekeeping(parts: HousekeepingParts): () => void {
  const { store, keys, logger, housekeeper } = parts;
  keys.start(
    (error) => logger.warn({ err: { message: (error as Error).message } }, 'signing keys could not be re-read; the keys in use stay'),
    housekeeper ? (change) => logger.info({ audit: true, event: 'key_rotation', ...change }, 'signing keys changed') : undefined,
  );
  if (!housekeeper) return () => keys.stop();
  const sweep = setInterval(() => {
    store.sweep(Date.now()).catch((error: unknown) => logger.warn({ err: { message: (error as Error).message } }, 'sweep failed'));
  }, parts.sweepIntervalMs ?? SWEEP_INTERVAL_MS);
  sweep.unref();
  return () => {
    clearInterval(sweep);
    keys.stop();
  };
}

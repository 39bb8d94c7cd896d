/**
 * What a serving process does on timers (DESIGN.md §6, §10, §11). Every one re-reads the signing keys, since each signs
 * with them; only the housekeeper also sweeps expired state and writes the key_rotation audit line, so N workers give
 * one line per change of keys and one sweep, not N sweeps contending for the SQLite write lock.
 */
import type { Logger } from 'pino';
import { changeOf, type KeyRing, type KeyStore } from './crypto/keys.js';
import type { Store } from './store/types.js';

/** How often expired state is swept (DESIGN.md §6). */
export const SWEEP_INTERVAL_MS = 60_000;

export interface HousekeepingParts {
  readonly store: Pick<Store, 'sweep'> & Pick<KeyStore, 'recordKeyEvents'>;
  readonly keys: Pick<KeyRing, 'start' | 'stop' | 'events'>;
  readonly logger: Logger;
  /** Whether this process keeps house for the server: the one worker the primary chose, or a server started alone. */
  readonly housekeeper: boolean;
  readonly sweepIntervalMs?: number;
}

/**
 * Starts the key reloads, and in the housekeeper the sweep and the key_rotation audit line; returns what stops them.
 * The line is written for the key events the store had not recorded: a change made while no housekeeper ran (one being
 * replaced, or the server down) is written when the next one starts, and two housekeepers seeing one change (the old
 * and the new during a reload, or two instances) write one line between them.
 */
export function startHousekeeping(parts: HousekeepingParts): () => void {
  const { store, keys, logger, housekeeper } = parts;
  const warnKeys = (error: unknown): void => logger.warn({ err: { message: (error as Error).message } }, 'signing keys could not be re-read; the keys in use stay');
  if (!housekeeper) {
    keys.start(warnKeys);
    return () => keys.stop();
  }
  // Set until the store has recorded the events of the keys as last seen: a failed audit is tried again at the next reload.
  let unaudited = true;
  const audit = async (): Promise<void> => {
    unaudited = true;
    const recorded = await store.recordKeyEvents(keys.events(), Date.now());
    unaudited = false;
    if (recorded.length > 0) logger.info({ audit: true, event: 'key_rotation', ...changeOf(recorded) }, 'signing keys changed');
  };
  const auditLogged = (): Promise<void> =>
    audit().catch((error: unknown) => logger.warn({ err: { message: (error as Error).message } }, 'key changes could not be recorded; tried again at the next key reload'));
  void auditLogged();
  keys.start(warnKeys, (changed) => (changed || unaudited ? auditLogged() : undefined));
  const sweep = setInterval(() => {
    store.sweep(Date.now()).catch((error: unknown) => logger.warn({ err: { message: (error as Error).message } }, 'sweep failed'));
  }, parts.sweepIntervalMs ?? SWEEP_INTERVAL_MS);
  sweep.unref();
  return () => {
    clearInterval(sweep);
    keys.stop();
  };
}

/** `workers = N | "auto"` (DESIGN.md §3, §11): how many processes serve the one listener. */
import { availableParallelism } from 'node:os';
import { z } from 'zod';
import { wholeNumber } from './whole-number.js';

export type WorkersSetting = number | 'auto';

/** The most workers a server starts: beyond it each worker's share of memory and store connections buys nothing. */
export const MAX_WORKERS = 64;

const WORKERS_NOTE = ', or "auto" (the CPUs this process may use)';

/** `workers` in the config file: a number without quotes, or "auto". */
export const workersAttribute = z.union([z.literal('auto'), wholeNumber(MAX_WORKERS, 2, WORKERS_NOTE)], {
  error: (issue) => `is ${JSON.stringify(issue.input)}; use a whole number from 1 to ${MAX_WORKERS}${WORKERS_NOTE}`,
});

/** `serve --workers N|auto`; undefined when the text is neither. */
export function parseWorkersOption(text: string): WorkersSetting | undefined {
  if (text === 'auto') return 'auto';
  if (!/^\d{1,3}$/.test(text)) return undefined;
  const count = Number(text);
  return count >= 1 && count <= MAX_WORKERS ? count : undefined;
}

/** The number of worker processes a setting means here: "auto" is os.availableParallelism(), at most MAX_WORKERS. */
export function workerCount(setting: WorkersSetting, available = availableParallelism()): number {
  return setting === 'auto' ? Math.max(1, Math.min(available, MAX_WORKERS)) : setting;
}

/**
 * Why a setting cannot run on memory state (DESIGN.md §11: each worker would keep its own grants and sessions), or
 * undefined. "auto" is refused too, whatever this machine's CPUs: a config's validity does not depend on where it is checked.
 */
export function workersWithoutState(setting: WorkersSetting): string | undefined {
  if (setting !== 'auto' && setting <= 1) return undefined;
  return `needs a state block: with state in memory each worker would keep its own keys, grants and sessions; add state { path = "data/pinpoint.db" } or set workers = 1`;
}


/**
 * Reads one config file in a short-lived child process and sends the outcome to its parent (load-apart.ts): the HCL
 * parser costs a long-running primary about 60 MiB it would keep for nothing, so it never loads in the primary.
 */
import { loadConfig } from './load.js';
import { ConfigInvalid } from './problems.js';
import type { LoadOutcome } from './load-apart.js';

const file = process.argv[2];

async function outcome(): Promise<LoadOutcome> {
  try {
    return { ok: true, ...(await loadConfig(file ?? '')) };
  } catch (error) {
    if (error instanceof ConfigInvalid) return { ok: false, problems: error.problems, warnings: error.warnings };
    return { ok: false, failure: (error as Error).message };
  }
}

const answer = await outcome();
// Written to the channel once the callback runs: then nothing is left to do (the parser may hold timers of its own).
process.send?.(answer, undefined, {}, () => process.exit(0));

/**
 * loadConfig in a child process (load-child.ts), for the primary of `serve`, which keeps running for months: the
 * parser's memory goes away with the child. Same answers as loadConfig: the config and its warnings, or ConfigInvalid.
 */
import { fork } from 'node:child_process';
import { deepFreeze } from './frozen.js';
import { ConfigInvalid } from './problems.js';
import type { Config, ConfigProblem } from './types.js';

export type LoadOutcome =
  | { readonly ok: true; readonly config: Config; readonly warnings: string[] }
  | { readonly ok: false; readonly problems: readonly ConfigProblem[]; readonly warnings: readonly string[] }
  | { readonly ok: false; readonly failure: string };

/** The child's module beside this one: load-child.ts under the TypeScript sources (the parent's loader flags go along), .js in dist/. */
const CHILD = new URL(`./load-child${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url);

/** Reading a config takes well under a second; a reader still running after this is stuck (e.g. a file that never ends). */
const READER_TIMEOUT_MS = 60_000;

export function loadConfigApart(file: string): Promise<{ config: Config; warnings: string[] }> {
  return new Promise((resolve, reject) => {
    // Advanced serialization carries the config's Maps; the child inherits the parent's execArgv (e.g. tsx in tests).
    const child = fork(CHILD, [file], { serialization: 'advanced', stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    let answer: LoadOutcome | undefined;
    child.once('message', (message: LoadOutcome) => {
      answer = message;
    });
    child.once('error', reject);
    // A reader that neither answers nor ends is stopped: its exit then refuses the load.
    const stuck = setTimeout(() => child.kill('SIGKILL'), READER_TIMEOUT_MS);
    // The outcome counts once the reader is gone, so nothing acts on a config while its reader still runs.
    child.once('exit', (code) => {
      clearTimeout(stuck);
      if (answer === undefined) reject(new Error(`the config could not be read (the reader exited with ${code})`));
      else if (answer.ok) resolve({ config: deepFreeze(answer.config), warnings: answer.warnings });
      else if ('failure' in answer) reject(new Error(answer.failure));
      else reject(new ConfigInvalid(answer.problems, answer.warnings));
    });
  });
}

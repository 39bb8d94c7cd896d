/**
 * loadConfig in a child process (load-child.ts), for the primary of `serve`, which keeps running for months: the
 * parser's memory goes away with the child. Same answers as loadConfig: the config and its warnings, or ConfigInvalid.
 */
import { fork } from 'node:child_process';
import { refreeze } from './frozen.js';
import { ConfigInvalid } from './problems.js';
import type { Config, ConfigProblem } from './types.js';

export type LoadOutcome =
  | { readonly ok: true; readonly config: Config; readonly warnings: string[] }
  | { readonly ok: false; readonly problems: readonly ConfigProblem[]; readonly warnings: readonly string[] }
  | { readonly ok: false; readonly failure: string };

/** The child's module beside this one: load-child.ts under the TypeScript sources (the parent's loader flags go along), .js in dist/. */
const CHILD = new URL(`./load-child${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url);

export function loadConfigApart(file: string): Promise<{ config: Config; warnings: string[] }> {
  return new Promise((resolve, reject) => {
    // Advanced serialization carries the config's Maps; the child inherits the parent's execArgv (e.g. tsx in tests).
    const child = fork(CHILD, [file], { serialization: 'advanced', stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    let answered = false;
    child.once('message', (message: LoadOutcome) => {
      answered = true;
      if (message.ok) resolve({ config: refreeze(message.config), warnings: message.warnings });
      else if ('failure' in message) reject(new Error(message.failure));
      else reject(new ConfigInvalid(message.problems, message.warnings));
    });
    child.once('error', (error) => {
      if (!answered) reject(error);
    });
    child.once('exit', (code) => {
      if (!answered) reject(new Error(`the config could not be read (the reader exited with ${code})`));
    });
  });
}

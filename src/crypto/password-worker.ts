/**
 * A hashing thread of the PasswordPool (password-pool.ts): one check at a time, posted in, its answer posted back.
 * scryptSync blocks this thread only, which is the point: libuv's pool stays free for WebCrypto (DESIGN.md §11).
 */
import { parentPort } from 'node:worker_threads';
import { runPasswordCheck, type PasswordCheck } from './password.js';

/** What the thread answers for each check: the verdict, or why scrypt could not run (never the password). */
export type PasswordWorkerAnswer = { readonly matches: boolean } | { readonly failure: string };

const port = parentPort;
if (port === null) throw new Error('password-worker.js runs as a worker thread of the PasswordPool');
port.on('message', (check: PasswordCheck) => {
  let answer: PasswordWorkerAnswer;
  try {
    answer = { matches: runPasswordCheck(check) };
  } catch (error) {
    answer = { failure: (error as Error).message };
  }
  port.postMessage(answer);
});

/**
 * The SQLite checkpointer, a worker thread whose own connection copies the WAL back into the database file every
 * `intervalMs`, so the copying and its fsyncs (synchronous=NORMAL syncs only at checkpoints) stay off the event loop.
 * Best effort: should it fail, the request path checkpoints (wal_autocheckpoint).
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

export interface CheckpointerOptions {
  readonly file: string;
  readonly busyTimeoutMs: number;
  readonly intervalMs: number;
}

/**
 * The thread's code, plain JavaScript run with `eval`: it starts the same way from the TypeScript sources and from
 * dist/, with no loader (a worker gets no module hooks from its parent on Node 20).
 */
const CHECKPOINTER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
const db = new Database(workerData.file, { timeout: workerData.busyTimeoutMs });
db.pragma('synchronous = NORMAL');
const timer = setInterval(() => {
  try {
    db.pragma('wal_checkpoint(PASSIVE)'); // PASSIVE: copies what no reader still needs and never waits for a lock.
  } catch {}
}, workerData.intervalMs);
parentPort.once('close', () => {
  clearInterval(timer);
  db.close();
});
`;

/** Starts the checkpointer thread; it does not keep the process alive, and its failures are ignored (best effort). */
export function startCheckpointer(options: CheckpointerOptions): Worker {
  const driver = createRequire(import.meta.url).resolve('better-sqlite3');
  // No execArgv of the parent: a flag such as --input-type=module would make this CommonJS source fail.
  const worker = new Worker(CHECKPOINTER_SOURCE, { eval: true, execArgv: [], workerData: { ...options, driver } });
  worker.on('error', () => undefined);
  worker.unref();
  return worker;
}

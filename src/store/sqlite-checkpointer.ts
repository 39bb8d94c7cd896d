/**
 * The SQLite checkpointer (a worker thread started by sqlite.ts): its own connection copies the WAL back into the
 * database file every `intervalMs`, so the copying and its fsyncs (synchronous=NORMAL syncs only at checkpoints)
 * stay off the event loop. Best effort: should it fail, the request path checkpoints (wal_autocheckpoint).
 */
import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';

export interface CheckpointerData {
  readonly file: string;
  readonly busyTimeoutMs: number;
  readonly intervalMs: number;
}

const { file, busyTimeoutMs, intervalMs } = workerData as CheckpointerData;
const db = new Database(file, { timeout: busyTimeoutMs });
db.pragma('synchronous = NORMAL');
const timer = setInterval(() => {
  try {
    // PASSIVE: copies what no reader still needs and never waits for a lock.
    db.pragma('wal_checkpoint(PASSIVE)');
  } catch {
    // A busy or failing checkpoint is retried at the next tick.
  }
}, intervalMs);
parentPort?.once('close', () => {
  clearInterval(timer);
  db.close();
});

/**
 * `pinpoint backup --to FILE`: an online copy of the SQLite state with SQLite's backup API (better-sqlite3
 * `backup()`), consistent while a server keeps writing; a file copy of a live WAL database is not.
 */
import { closeSync, existsSync, openSync, rmSync } from 'node:fs';
import Database from 'better-sqlite3';
import type { Output } from './keys.js';

export async function backupSqlite(path: string, to: string, out: Output, err: Output): Promise<number> {
  if (existsSync(to)) {
    err.write(`pinpoint: ${to} exists; choose a new file (a backup never overwrites)\n`);
    return 1;
  }
  const db = new Database(path, { readonly: true, fileMustExist: true, timeout: 5000 });
  try {
    // The copy holds the private signing keys: created owner-only (as the live database is), never over another file.
    closeSync(openSync(to, 'wx', 0o600));
    // A failed copy leaves no file that could pass for a backup.
    const { totalPages } = await db.backup(to).catch((error: unknown) => {
      rmSync(to, { force: true });
      throw error;
    });
    out.write(`backed up ${path} to ${to} (${totalPages} pages)\n`);
    return 0;
  } finally {
    db.close();
  }
}

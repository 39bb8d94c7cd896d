/**
 * `pinpoint backup --to FILE`: an online copy of the SQLite state with SQLite's backup API (better-sqlite3
 * `backup()`), consistent while a server keeps writing; a file copy of a live WAL database is not.
 */
import { existsSync } from 'node:fs';
import Database from 'better-sqlite3';
import type { Output } from './keys.js';

export async function backupSqlite(path: string, to: string, out: Output, err: Output): Promise<number> {
  if (existsSync(to)) {
    err.write(`pinpoint: ${to} exists; choose a new file (a backup never overwrites)\n`);
    return 1;
  }
  const db = new Database(path, { readonly: true, fileMustExist: true, timeout: 5000 });
  try {
    const { totalPages } = await db.backup(to);
    out.write(`backed up ${path} to ${to} (${totalPages} pages)\n`);
    return 0;
  } finally {
    db.close();
  }
}

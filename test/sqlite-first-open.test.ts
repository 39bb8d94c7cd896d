/**
 * The first start of `workers = N` on SQLite: N processes open a file that does not exist yet, at the same moment.
 * Each must open it (WAL mode, tables made once), none may fail with "database is locked". Real processes, real files.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';

const STORE_MODULE = fileURLToPath(new URL('../src/store/sqlite.ts', import.meta.url));
const PROCESSES = 3;
const ROUNDS = 12;

/** Time between rounds: each process opens round r's file at startAt + r * ROUND_MS, so the opens of a round meet. */
const ROUND_MS = 300;

/** A process that opens (then closes) the store at files[r] at startAt + r * ROUND_MS, for every round r. */
function openEachAt(files: readonly string[], startAt: number): Promise<{ code: number | null; stderr: string }> {
  const source = `
    const { SqliteStore } = await import(${JSON.stringify(STORE_MODULE)});
    const files = ${JSON.stringify(files)};
    for (const [round, file] of files.entries()) {
      await new Promise((resolve) => setTimeout(resolve, ${startAt} + round * ${ROUND_MS} - Date.now()));
      try {
        await new SqliteStore(file).close();
      } catch (error) {
        console.error('round ' + round + ': ' + (error.cause?.message ?? error.message));
        process.exitCode = 1;
      }
    }`;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', source], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stderr }));
  });
}

let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'pinpoint-first-open-'));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

test(`${PROCESSES} processes opening one new SQLite file at the same moment all open it, ${ROUNDS} times over`, async () => {
  const files = Array.from({ length: ROUNDS }, (_, round) => join(dir, `round-${round}.db`));
  // Past every child's start-up (tsx and the store's modules load first), so the opens themselves meet.
  const startAt = Date.now() + 3000;
  const outcomes = await Promise.all(Array.from({ length: PROCESSES }, () => openEachAt(files, startAt)));
  for (const outcome of outcomes) assert.equal(outcome.code, 0, outcome.stderr.trim());
  for (const file of files) {
    const db = new Database(file, { readonly: true });
    try {
      assert.equal(db.pragma('journal_mode', { simple: true }), 'wal', file);
      const versions = db.prepare('SELECT version FROM schema_migrations').all() as { version: number }[];
      assert.ok(versions.length > 0 && new Set(versions.map((row) => row.version)).size === versions.length, `${file}: each migration applied once`);
    } finally {
      db.close();
    }
  }
});

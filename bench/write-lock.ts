/**
 * How long one refresh holds SQLite's write lock (DESIGN.md §11: what limits refresh across workers). The real
 * SqliteStore rotates refresh tokens (find, then rotate, as the refresh grant does) with `inFlight` rotations at once;
 * every group commit (better-sqlite3's IMMEDIATE transaction: BEGIN IMMEDIATE takes the write lock, COMMIT lets it go)
 * is timed by wrapping Database#transaction in this process only, so src/ is measured as it ships.
 * Run pinned: `taskset -c 0 node --import tsx bench/write-lock.ts` (LOCK_GRANTS, LOCK_ROTATIONS to size it).
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { newRefreshToken, refreshTokenKey } from '../src/crypto/refresh-token.js';
import { SqliteStore } from '../src/store/sqlite.js';
import { AUDIENCE, CLIENT_ID, REFRESH_LIFETIME_MS, SCOPE } from './common.js';

const GRANTS = Number(process.env.LOCK_GRANTS ?? 10_000);
const ROTATIONS = Number(process.env.LOCK_ROTATIONS ?? 20_000);

/** Every IMMEDIATE transaction's duration and size (the number of writes its batch commits). */
const commits: { ms: number; writes: number }[] = [];
type Transaction = ReturnType<Database.Database['transaction']>;
const transaction = Database.prototype.transaction as (this: Database.Database, fn: (...args: never[]) => unknown) => Transaction;
(Database.prototype as { transaction: unknown }).transaction = function timed(this: Database.Database, fn: (...args: never[]) => unknown): Transaction {
  const made = transaction.call(this, fn);
  const immediate = (...args: unknown[]): unknown => {
    const started = performance.now();
    try {
      return (made.immediate as (...a: unknown[]) => unknown)(...args);
    } finally {
      commits.push({ ms: performance.now() - started, writes: Array.isArray(args[0]) ? args[0].length : 1 });
    }
  };
  // better-sqlite3's transaction functions have read-only variants: a new function carries them, `immediate` timed.
  return Object.assign((...args: unknown[]) => (made as (...a: unknown[]) => unknown)(...args), {
    default: made.default,
    deferred: made.deferred,
    exclusive: made.exclusive,
    immediate,
  }) as unknown as Transaction;
};

const folder = mkdtempSync(join(tmpdir(), 'pinpoint-write-lock-'));
const store = new SqliteStore(join(folder, 'pinpoint.db'));
const now = Date.now();
let tokens: string[] = [];
for (let from = 0; from < GRANTS; from += 500) {
  await Promise.all(
    Array.from({ length: Math.min(500, GRANTS - from) }, async (_, i) => {
      const id = randomUUID();
      const grant = { id, clientId: CLIENT_ID, subject: `user-${from + i}`, scope: [SCOPE], resources: [...AUDIENCE], claims: {}, authTime: now, createdAt: now, expiresAt: now + REFRESH_LIFETIME_MS };
      await store.createGrantWithCode(grant, { digest: randomUUID(), grantId: id, clientId: CLIENT_ID, redirectUri: 'http://127.0.0.1/cb', codeChallenge: 'unused', expiresAt: now + 60_000 });
      const token = newRefreshToken(id, now, REFRESH_LIFETIME_MS);
      if (!(await store.addRefreshToken(token.record, now))) throw new Error('seeding failed');
      tokens.push(token.value);
    }),
  );
}

/** `count` rotations, `inFlight` at a time, each as the refresh grant makes it: find the token, then rotate it. */
async function rotate(count: number, inFlight: number): Promise<{ wallMs: number; cpuUs: number }> {
  const next: string[] = [];
  const cpu = process.cpuUsage();
  const started = performance.now();
  let taken = 0;
  const loop = async (): Promise<void> => {
    while (taken < count) {
      const value = tokens[taken++ % tokens.length] as string;
      const key = refreshTokenKey(value);
      if (key === undefined) throw new Error('not a refresh token');
      const at = Date.now();
      const found = await store.findRefreshToken(key.grantId, key.digest, at);
      if (found.status !== 'active') throw new Error(`token ${found.status}`);
      const successor = newRefreshToken(key.grantId, at, REFRESH_LIFETIME_MS);
      if (!(await store.rotateRefreshToken(found.token.digest, successor.record, at, found.grant.expiresAt))) throw new Error('rotation refused');
      next.push(successor.value);
    }
  };
  await Promise.all(Array.from({ length: inFlight }, loop));
  const used = process.cpuUsage(cpu);
  tokens = [...next, ...tokens.slice(count)];
  return { wallMs: performance.now() - started, cpuUs: used.user + used.system };
}

const fixed = (value: number, digits = 1): string => value.toFixed(digits);
for (const inFlight of [1, 4, 16]) {
  await rotate(Math.min(2000, ROTATIONS), inFlight);
  commits.length = 0;
  const count = Math.min(ROTATIONS, tokens.length);
  const { wallMs, cpuUs } = await rotate(count, inFlight);
  const held = commits.reduce((sum, commit) => sum + commit.ms, 0);
  const perBatch = commits.length === 0 ? 0 : commits.reduce((sum, commit) => sum + commit.writes, 0) / commits.length;
  const perRotationUs = (held * 1000) / count;
  process.stdout.write(
    `${String(inFlight).padStart(2)} in flight: write lock held ${fixed(perRotationUs)} us per rotation (${commits.length} commits of ${fixed(perBatch)} writes), ` +
      `${fixed((held / wallMs) * 100, 0)}% of the time; find+rotate ${fixed(cpuUs / count)} us of CPU each; ` +
      `ceiling for any number of processes on this file: ${Math.round(1e6 / perRotationUs)} rotations/s\n`,
  );
}
await store.close();
rmSync(folder, { recursive: true, force: true });

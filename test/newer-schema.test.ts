/**
 * A database a newer Pinpoint has migrated (a downgrade, or an older instance beside a newer one) is refused at open,
 * before anything is written, with a reason an operator can act on: by the store on SQLite and PostgreSQL, by
 * `check --probe`, and by `serve`, which exits 1 instead of answering 500s from tables it does not know.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import Database from 'better-sqlite3';
import pg from 'pg';
import { NEWEST_SCHEMA_VERSION, NewerSchemaError } from '../src/store/migrations.js';
import { openStore } from '../src/store/open.js';
import { probeStore } from '../src/store/probe.js';
import { createPostgresDatabase, POSTGRES_SKIP_REASON, POSTGRES_URL } from './helpers/databases.js';
import { cliArgs } from './helpers/cli-command.js';
import { createDeployment, removeDeployment, type Deployment } from './helpers/process.js';

const NEWER = NEWEST_SCHEMA_VERSION + 3;
const REASON = new RegExp(`migrated by a newer Pinpoint \\(schema version ${NEWER}; this version knows up to ${NEWEST_SCHEMA_VERSION}\\)`);

describe('a SQLite file of a newer schema', () => {
  let folder: string;
  let path: string;
  before(async () => {
    folder = await mkdtemp(join(tmpdir(), 'pinpoint-newer-'));
    path = join(folder, 'pinpoint.db');
    await (await openStore({ kind: 'sqlite', path })).close();
    const db = new Database(path);
    db.prepare('INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)').run(NEWER, Date.now());
    db.close();
  });
  after(async () => rm(folder, { recursive: true, force: true }));

  test('is refused at open, naming both versions, and left as it was', async () => {
    const before = new Database(path, { readonly: true }).prepare('SELECT count(*) AS n FROM schema_migrations').get();
    await assert.rejects(openStore({ kind: 'sqlite', path }), (error: unknown) => error instanceof NewerSchemaError && REASON.test(error.message));
    const after = new Database(path, { readonly: true }).prepare('SELECT count(*) AS n FROM schema_migrations').get();
    assert.deepEqual(after, before);
  });

  test('check --probe says so', async () => {
    const probe = await probeStore({ kind: 'sqlite', path });
    assert.equal(probe?.ok, false);
    assert.match(probe?.detail ?? '', REASON);
  });
});

describe('pinpoint serve on a SQLite file of a newer schema', () => {
  let deployment: Deployment;
  before(async () => {
    deployment = await createDeployment({ state: { path: 'data/pinpoint.db' } });
    const path = join(deployment.folder, 'data', 'pinpoint.db');
    await (await openStore({ kind: 'sqlite', path })).close();
    const db = new Database(path);
    db.prepare('INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)').run(NEWER, Date.now());
    db.close();
  });
  after(async () => removeDeployment(deployment));

  test('exits 1 saying why, before it serves', async () => {
    const child = spawn(process.execPath, cliArgs('serve', '--config', deployment.configFile), { env: { ...process.env, PINPOINT_CONFIG: '' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    assert.equal(code, 1, output);
    assert.match(output, /cannot open the state store \(sqlite [^)]*\): the database was migrated by a newer Pinpoint/);
    assert.doesNotMatch(output, /is serving/);
  });
});

describe('a PostgreSQL database of a newer schema', { skip: POSTGRES_URL === undefined ? POSTGRES_SKIP_REASON : undefined }, () => {
  let database: Awaited<ReturnType<typeof createPostgresDatabase>>;
  before(async () => {
    database = await createPostgresDatabase();
    await (await openStore({ kind: 'postgres', url: database.url, schema: 'public' })).close();
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    await client.query('INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)', [NEWER, Date.now()]);
    await client.end();
  });
  after(async () => database?.drop());

  test('is refused at open and by check --probe', async () => {
    await assert.rejects(openStore({ kind: 'postgres', url: database.url, schema: 'public' }), (error: unknown) => error instanceof NewerSchemaError && REASON.test(error.message));
    const probe = await probeStore({ kind: 'postgres', url: database.url, schema: 'public' });
    assert.equal(probe?.ok, false);
    assert.match(probe?.detail ?? '', REASON);
  });
});

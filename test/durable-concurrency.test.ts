/**
 * DESIGN.md §6: two concurrent uses of one refresh token give exactly one success, across instances
 * too, and the loser's reuse revokes the grant (RFC 9700 §4.14.2); a refused refresh writes nothing.
 * Real `pinpoint serve` processes over HTTP: SQLite with one process, PostgreSQL with two sharing a database.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import Database from 'better-sqlite3';
import pg from 'pg';
import { digestOf } from '../src/crypto/digest.js';
import {
  API,
  FILES,
  createDeployment,
  createTestDatabase,
  killAll,
  refreshAt,
  removeDeployment,
  signInForTokens,
  startPinpoint,
  type Deployment,
  type PinpointProcess,
  type TestDatabase,
  type TokenAnswer,
} from './helpers/process.js';

const POSTGRES_URL = process.env['PINPOINT_TEST_POSTGRES_URL'];
const RACERS = 50;

/** Sends RACERS refreshes of one token at once, spread round-robin over `servers`. */
async function race(servers: readonly PinpointProcess[], refreshToken: string): Promise<TokenAnswer[]> {
  return Promise.all(Array.from({ length: RACERS }, (_, i) => refreshAt((servers[i % servers.length] as PinpointProcess).baseUrl, refreshToken)));
}

/** Reads the stored rows of a grant straight from the database, behind the server's back. */
interface StoredRows {
  /** The grant a refresh token belongs to, found by its SHA-256 (the only form stored). */
  grantOf(refreshToken: string): Promise<string | undefined>;
  /** Rows of `grants` and `refresh_tokens` left for the grant. */
  rowsOf(grantId: string): Promise<{ grants: number; tokens: number }>;
}

function sqliteRows(file: string): StoredRows {
  const read = <T>(work: (db: Database.Database) => T): T => {
    const db = new Database(file, { readonly: true, fileMustExist: true });
    try {
      return work(db);
    } finally {
      db.close();
    }
  };
  return {
    grantOf: async (refreshToken) =>
      read((db) => db.prepare<[string], { grant_id: string }>('SELECT grant_id FROM refresh_tokens WHERE digest = ?').get(digestOf(refreshToken))?.grant_id),
    rowsOf: async (grantId) =>
      read((db) => ({
        grants: db.prepare<[string], { n: number }>('SELECT count(*) AS n FROM grants WHERE id = ?').get(grantId)?.n ?? -1,
        tokens: db.prepare<[string], { n: number }>('SELECT count(*) AS n FROM refresh_tokens WHERE grant_id = ?').get(grantId)?.n ?? -1,
      })),
  };
}

function postgresRows(url: string): StoredRows {
  const read = async <T>(work: (client: pg.Client) => Promise<T>): Promise<T> => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      return await work(client);
    } finally {
      await client.end();
    }
  };
  const count = async (client: pg.Client, sql: string, id: string): Promise<number> => (await client.query<{ n: number }>(sql, [id])).rows[0]?.n ?? -1;
  return {
    grantOf: (refreshToken) =>
      read(async (client) => (await client.query<{ grant_id: string }>('SELECT grant_id FROM refresh_tokens WHERE digest = $1', [digestOf(refreshToken)])).rows[0]?.grant_id),
    rowsOf: (grantId) =>
      read(async (client) => ({
        grants: await count(client, 'SELECT count(*)::int AS n FROM grants WHERE id = $1', grantId),
        tokens: await count(client, 'SELECT count(*)::int AS n FROM refresh_tokens WHERE grant_id = $1', grantId),
      })),
  };
}

/** Exactly one 200 and RACERS - 1 invalid_grant; then the grant is revoked and the log says so without the token. */
async function assertOneWinnerThenRevoked(servers: readonly PinpointProcess[], stored: StoredRows, refreshToken: string): Promise<string> {
  const grantId = await stored.grantOf(refreshToken);
  assert.ok(grantId !== undefined, 'the refresh token is stored (as its digest)');
  const answers = await race(servers, refreshToken);
  const statuses = answers.map((answer) => answer.status);
  const winners = answers.filter((answer) => answer.status === 200);
  assert.equal(winners.length, 1, `statuses: ${statuses.join(' ')}`);
  for (const loser of answers.filter((answer) => answer.status !== 200)) {
    assert.equal(loser.status, 400, loser.text);
    assert.equal(loser.body['error'], 'invalid_grant', loser.text);
  }
  const winner = winners[0] as TokenAnswer;
  const next = winner.body['refresh_token'];
  assert.equal(typeof next, 'string');
  assert.notEqual(next, refreshToken);

  // The losers were reuse: the grant is gone, so even the winner's fresh token is refused, at every instance.
  for (const server of servers) {
    const after = await refreshAt(server.baseUrl, next as string);
    assert.equal(after.status, 400, after.text);
    assert.equal(after.body['error'], 'invalid_grant');
  }
  assert.deepEqual(await stored.rowsOf(grantId), { grants: 0, tokens: 0 }, 'the grant and all its refresh tokens were deleted');

  // SIGTERM flushes the (asynchronously written) log before the process exits.
  for (const exit of await Promise.all(servers.map((server) => server.stop('SIGTERM')))) assert.equal(exit.code, 0);
  const warnings = servers.flatMap((server) => server.logs).filter((record) => record['level'] === 40 && record['event'] === 'reuse_detected');
  assert.ok(warnings.length >= 1, 'a warn line (audit) reports the reuse');
  for (const record of warnings) {
    assert.equal(record['client_id'], 'webapp');
    assert.equal(record['grant_id'], grantId);
  }
  for (const server of servers) {
    const refreshes = server.logs.filter((record) => record['msg'] === 'request' && record['path'] === '/token').length;
    assert.ok(refreshes >= RACERS / servers.length, `each instance answered its share of the race (${refreshes})`);
    for (const secret of [refreshToken, next as string, winner.body['access_token'] as string]) {
      assert.ok(!server.output.includes(secret), 'no log line holds a token');
    }
  }
  return `${warnings.length} reuse warnings (lost rotations and rotated tokens presented)`;
}

describe('SQLite, one pinpoint process', () => {
  let deployment: Deployment | undefined;
  let server: PinpointProcess | undefined;
  const database = (): string => join((deployment as Deployment).folder, 'state', 'pinpoint.db');

  before(async () => {
    deployment = await createDeployment({ state: { path: 'state/pinpoint.db' } });
    server = await startPinpoint(deployment);
  });
  after(async () => {
    await killAll();
    await removeDeployment(deployment);
  });

  test('a refused refresh writes nothing and leaves the refresh token usable', async () => {
    const live = server as PinpointProcess;
    const tokens = await signInForTokens(live.baseUrl, { resources: [API] });
    const snapshot = (): { grants: number; tokens: number; rows: unknown[] } => {
      const db = new Database(database(), { readonly: true, fileMustExist: true });
      try {
        return {
          grants: (db.prepare('SELECT count(*) AS n FROM grants').get() as { n: number }).n,
          tokens: (db.prepare('SELECT count(*) AS n FROM refresh_tokens').get() as { n: number }).n,
          rows: db.prepare('SELECT digest, grant_id, status, expires_at FROM refresh_tokens ORDER BY digest').all(),
        };
      } finally {
        db.close();
      }
    };
    const before = snapshot();
    assert.ok(before.grants >= 1 && before.tokens >= 1);

    const refused: [readonly string[], string, string][] = [
      [['https://evil.example.org/'], 'invalid_target', 'resource "https://evil.example.org/" is not one this client may ask a token for'],
      [[FILES], 'invalid_target', `resource "${FILES}" was not part of the authorization`],
      [['billing'], 'invalid_target', 'resource "billing" is not one this client may ask a token for'],
      [[API, API], 'invalid_request', 'resource appears more than once'],
    ];
    for (const [resources, error, description] of refused) {
      const answer = await refreshAt(live.baseUrl, tokens.refresh_token, resources);
      assert.equal(answer.status, 400, answer.text);
      assert.deepEqual(answer.body, { error, error_description: description });
    }
    assert.deepEqual(snapshot(), before, 'no row of grants or refresh_tokens changed');

    const again = await refreshAt(live.baseUrl, tokens.refresh_token, [API]);
    assert.equal(again.status, 200, again.text);
    const afterwards = snapshot();
    assert.equal(afterwards.grants, before.grants);
    assert.equal(afterwards.tokens, before.tokens + 1, 'the accepted refresh added its successor');
  });

  test(`${RACERS} concurrent refreshes of one token: exactly one 200, then the grant is revoked`, async (t) => {
    const live = server as PinpointProcess;
    const tokens = await signInForTokens(live.baseUrl, { resources: [API] });
    t.diagnostic(await assertOneWinnerThenRevoked([live], sqliteRows(database()), tokens.refresh_token));
  });
});

if (POSTGRES_URL === undefined) {
  test('PostgreSQL, two pinpoint processes sharing one database', (t) => {
    t.skip('PINPOINT_TEST_POSTGRES_URL not set: set it (e.g. postgres://postgres@127.0.0.1:5432/test) to race two instances on PostgreSQL');
  });
} else {
  const adminUrl = POSTGRES_URL;
  describe('PostgreSQL, two pinpoint processes sharing one database', () => {
    let database: TestDatabase | undefined;
    const deployments: Deployment[] = [];
    const servers: PinpointProcess[] = [];

    before(async () => {
      database = await createTestDatabase(adminUrl);
      for (let i = 0; i < 2; i += 1) deployments.push(await createDeployment({ state: { url: database.url } }));
      // Both start at once on the empty database: migrations and key creation must agree.
      servers.push(...(await Promise.all(deployments.map((deployment) => startPinpoint(deployment)))));
    });
    after(async () => {
      await killAll();
      for (const deployment of deployments) await removeDeployment(deployment);
      await database?.drop();
    });

    test(`${RACERS} concurrent refreshes of one token, half to each instance: exactly one 200, then the grant is revoked`, async (t) => {
      const [first, second] = servers as [PinpointProcess, PinpointProcess];
      const tokens = await signInForTokens(first.baseUrl, { resources: [API] });
      // The instances share the grant: the other one refreshes it too (and that rotation is the one raced).
      const handedOver = await refreshAt(second.baseUrl, tokens.refresh_token);
      assert.equal(handedOver.status, 200, handedOver.text);
      t.diagnostic(await assertOneWinnerThenRevoked(servers, postgresRows((database as TestDatabase).url), handedOver.body['refresh_token'] as string));
    });
  });
}

/**
 * An operator who upgrades from a release keeps what their people and clients hold (DESIGN.md §6: versioned
 * migrations; §5 persistence). The fixtures in test/fixtures/upgrade/ were written by the released builds themselves
 * (make-fixtures.ts says how and what they hold); this build starts on a copy of each, SQLite file or PostgreSQL dump,
 * and every recorded token must still do what it did: refresh within its grant, verify against /jwks, answer
 * /introspect, be refused when it was rotated away or revoked. From 0.3.0 also: a client registered at /register
 * keeps its secret and grant, a key rotation keeps the older keys published while the newer ones sign, and a revoked
 * access token stays revoked; a remembered consent is the one thing README says is not kept (migration 6). The
 * committed fixtures are never written.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { copyFile, chmod, cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { createLocalJWKSet, createRemoteJWKSet, decodeProtectedHeader, jwtVerify, type JSONWebKeySet } from 'jose';
import pg from 'pg';
import pino from 'pino';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { loadConfig } from '../src/config/load.js';
import type { Config } from '../src/config/types.js';
import { createMetrics } from '../src/http/metrics.js';
import { startServer, type RunningServer } from '../src/server.js';
import { NEWEST_SCHEMA_VERSION } from '../src/store/migrations.js';
import { openStore } from '../src/store/open.js';
import { basic, claimsOf, cookieJar, form, hiddenInput } from './helpers/app.js';
import { POSTGRES_SKIP_REASON, POSTGRES_URL } from './helpers/databases.js';
import { createTestDatabase, type TestDatabase } from './helpers/process.js';

const FIXTURES = fileURLToPath(new URL('fixtures/upgrade/', import.meta.url));
const API = 'https://api.example.org/';
const FILES = 'https://files.example.org/';
const DOCS = 'https://docs.example.org/';
const WEBAPP_REDIRECT = 'http://127.0.0.1:9000/callback';
const PKCE = { verifier: 'dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk', challenge: 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM' } as const;

interface Recorded {
  readonly kids: readonly string[];
  readonly browserCookies: string;
  readonly live: { readonly resources: readonly string[]; readonly refreshToken: string; readonly accessToken: string; readonly idToken: string };
  readonly rotated: { readonly rotatedRefreshToken: string; readonly refreshToken: string; readonly accessToken: string };
  readonly revoked: { readonly refreshToken: string; readonly accessToken: string };
  readonly device: { readonly refreshToken: string; readonly accessToken: string };
  readonly clientCredentials: { readonly accessToken: string };
  /** From 0.3.0 on: the kids `keys rotate` added after every token above was signed (all of `kids` but these signed them). */
  readonly rotatedKids?: readonly string[];
  /** From 0.3.0 on: a client_credentials token revoked at /revoke. */
  readonly revokedClientCredentials?: { readonly accessToken: string };
  /** From 0.3.0 on: a client registered at /register with a secret, the consent the person gave it, its code exchange's tokens. */
  readonly dynamic?: {
    readonly clientId: string;
    readonly clientSecret: string;
    readonly redirectUri: string;
    readonly resources: readonly string[];
    readonly refreshToken: string;
    readonly accessToken: string;
  };
}

interface Fixture {
  readonly release: string;
  readonly issuer: string;
  readonly sqlite: Recorded;
  readonly postgres?: Recorded;
}

/** A copy of a release's database that this build may change, and plain SQL on it from outside the store. */
interface Copy {
  /** The `state` block's attribute naming it. */
  readonly state: string;
  rows(sql: string): Promise<Record<string, unknown>[]>;
  run(sql: string): Promise<void>;
  remove(): Promise<void>;
}

async function sqliteCopy(release: string, folder: string): Promise<Copy> {
  const path = join(folder, 'pinpoint.db');
  await copyFile(join(FIXTURES, `${release}.sqlite`), path);
  const open = <T>(work: (db: Database.Database) => T): T => {
    const db = new Database(path, { fileMustExist: true });
    try {
      return work(db);
    } finally {
      db.close();
    }
  };
  return {
    state: 'path = "pinpoint.db"',
    rows: async (sql) => open((db) => db.prepare(sql).all() as Record<string, unknown>[]),
    run: async (sql) => open((db) => void db.exec(sql)),
    remove: async () => undefined,
  };
}

async function postgresCopy(release: string): Promise<Copy> {
  const database: TestDatabase = await createTestDatabase(POSTGRES_URL as string, 'pinpoint_upgrade');
  const withClient = async <T>(work: (client: pg.Client) => Promise<T>): Promise<T> => {
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    try {
      return await work(client);
    } finally {
      await client.end();
    }
  };
  try {
    // The dump qualifies every name with public. and clears search_path, so it loads as one simple query.
    await withClient(async (client) => void (await client.query(await readFile(join(FIXTURES, `${release}.postgres.sql`), 'utf8'))));
  } catch (error) {
    await database.drop();
    throw error;
  }
  return {
    state: `url = "${database.url}"`,
    rows: (sql) => withClient(async (client) => (await client.query(sql)).rows as Record<string, unknown>[]),
    run: (sql) => withClient(async (client) => void (await client.query(sql))),
    remove: database.drop,
  };
}

/** Rows as comparable text (PostgreSQL hands BIGINT back as strings, SQLite as numbers). */
const text = (rows: readonly Record<string, unknown>[]): string => JSON.stringify(rows.map((row) => Object.values(row).map(String)));

/** What must stay the same across a start that has nothing to migrate. */
async function snapshot(copy: Copy): Promise<string> {
  const queries = [
    'SELECT version, applied_at FROM schema_migrations ORDER BY version',
    'SELECT kid, alg, created_at, retired_at FROM keys ORDER BY kid',
    'SELECT id, client_id, subject, scope, resources, claims, expires_at FROM grants ORDER BY id',
    'SELECT grant_id, digest, status, expires_at FROM refresh_tokens ORDER BY grant_id, digest',
    'SELECT digest, subject, expires_at FROM sessions ORDER BY digest',
  ];
  return (await Promise.all(queries.map(async (sql) => text(await copy.rows(sql))))).join('\n');
}

/** Each release's database on each store it was recorded on (0.2 on SQLite only: its PostgreSQL path is 0.3's, and CI's time is short). */
const CASES = [
  ['v0.3.0', 'sqlite'],
  ['v0.3.0', 'postgres'],
  ['v0.2.0', 'sqlite'],
] as const;

/**
 * Releases whose access tokens do not name their grant: 0.2's `jti` is random, where 0.3 made it `<grant id>.<random>`
 * (tokens/claims.ts grantIdOfJti). Nothing can tell whether such a token's grant was revoked, so a person's one does
 * not stand after the upgrade (tokens/access-token-state.ts; an upgrade audit found them active after their grant was
 * revoked), and revoking it revokes no grant; a client's own (client_credentials) stands as before.
 */
const OLD_JTI: ReadonlySet<string> = new Set(['v0.2.0']);

for (const [release, kind] of CASES) {
  const skip = kind === 'postgres' && POSTGRES_URL === undefined ? POSTGRES_SKIP_REASON : undefined;
  describe(`upgrading from ${release} on ${kind}`, { skip }, () => {
    let folder: string;
    let copy: Copy;
    const fixture = JSON.parse(readFileSync(join(FIXTURES, `${release}.json`), 'utf8')) as Fixture;
    const recorded = fixture[kind] as Recorded;
    const { dynamic, rotatedKids, revokedClientCredentials } = recorded;
    const dynamicAuth = (): string => basic(dynamic?.clientId ?? '', dynamic?.clientSecret ?? '');
    let config: Config;
    let server: RunningServer | undefined;
    let app: FastifyInstance;
    /** What the server logged at warn or worse, audit lines aside (a detected reuse is one, and expected). */
    const problems: Record<string, unknown>[] = [];
    const audits: Record<string, unknown>[] = [];
    /** The newest refresh token of the recorded live grant, as the tests below rotate it. */
    let liveRefresh: string;
    /** The newest refresh token of the recorded device grant. */
    let deviceRefresh: string;

    const start = async (): Promise<void> => {
      const logger = pino(
        { level: 'info' },
        {
          write: (line: string) => {
            const entry = JSON.parse(line) as Record<string, unknown>;
            if (entry['audit'] === true) audits.push(entry);
            else if ((entry['level'] as number) >= 40) problems.push(entry);
          },
        },
      );
      server = await startServer(config, { logger, metrics: createMetrics({ processMetrics: false }) });
      app = server.app;
    };
    const stop = async (): Promise<void> => {
      await server?.close();
      server = undefined;
    };

    before(async () => {
      folder = await mkdtemp(join(tmpdir(), `pinpoint-upgrade-${release}-`));
      copy = kind === 'sqlite' ? await sqliteCopy(release, folder) : await postgresCopy(release);
      await cp(join(FIXTURES, 'secrets'), join(folder, 'secrets'), { recursive: true });
      for (const name of ['webapp', 'service', 'api']) await chmod(join(folder, 'secrets', name), 0o600);
      const hcl = (await readFile(join(FIXTURES, 'config.hcl'), 'utf8')).replace(/state \{[^}]*\}/, `state {\n  ${copy.state}\n}`);
      await writeFile(join(folder, 'config.hcl'), hcl);
      // Sessions live 12 hours and are not configurable, so the recorded browser's has long ended: make its row live
      // (the copy only) to see whether this build still reads it.
      await copy.run(`UPDATE sessions SET expires_at = ${Date.now() + 3600_000}`);
      const loaded = await loadConfig(join(folder, 'config.hcl'));
      assert.equal(loaded.config.baseUrl, fixture.issuer);
      config = { ...loaded.config, listen: { host: '127.0.0.1', port: 0 } };
      await start();
      // The server sweeps a minute after it starts; sweep now so that every assertion below holds after one.
      const store = await openStore(config.state);
      try {
        await store.sweep(Date.now());
      } finally {
        await store.close();
      }
    });

    after(async () => {
      await stop();
      await copy?.remove();
      await rm(folder, { recursive: true, force: true });
    });

    const token = (pairs: readonly (readonly [string, string])[], auth: string | null): Promise<LightMyRequestResponse> =>
      app.inject({
        method: 'POST',
        url: '/token',
        headers: { 'content-type': 'application/x-www-form-urlencoded', ...(auth !== null && { authorization: auth }) },
        payload: form(pairs),
      });
    const webapp = (): string => basic('webapp', 'upgrade-webapp-secret');
    const refreshOfWebapp = (refreshToken: string, resources: readonly string[] = []): Promise<LightMyRequestResponse> =>
      token([['grant_type', 'refresh_token'], ['refresh_token', refreshToken], ...resources.map((resource) => ['resource', resource] as const)], webapp());
    const introspect = async (tokenValue: string): Promise<Record<string, unknown>> => {
      const response = await app.inject({
        method: 'POST',
        url: '/introspect',
        headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic(API, 'upgrade-api-secret') },
        payload: form([['token', tokenValue]]),
      });
      assert.equal(response.statusCode, 200, response.body);
      return response.json() as Record<string, unknown>;
    };
    const assertRefused = (response: LightMyRequestResponse, error: string, description?: string): void => {
      assert.equal(response.statusCode, 400, response.body);
      const body = response.json() as { error: string; error_description: string };
      assert.equal(body.error, error, response.body);
      if (description !== undefined) assert.equal(body.error_description, description);
    };

    test('the database is migrated to the newest schema, every version once, and nothing went wrong at start', async () => {
      const versions = (await copy.rows('SELECT version FROM schema_migrations ORDER BY version')).map((row) => Number(row['version']));
      assert.deepEqual(versions, Array.from({ length: NEWEST_SCHEMA_VERSION }, (_, index) => index + 1));
      assert.deepEqual(problems, []);
      // README "Signing keys": the keys an upgraded store already holds give no key_rotation line. The start records
      // them in key_events (with the baseline row, kid '') without waiting: wait for that before judging the lines.
      for (let waited = 0; (await copy.rows("SELECT kid FROM key_events WHERE kid = ''")).length === 0; waited += 20) {
        assert.ok(waited < 5000, 'the start recorded no key events within 5 s');
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      assert.deepEqual(audits.filter((line) => line['event'] === 'key_rotation'), []);
    });

    test("the release's signing keys are published: its access, ID and client_credentials tokens verify against /jwks", async () => {
      const address = app.server.address();
      assert.ok(address !== null && typeof address === 'object');
      // Connection: close, so that stopping the server has no idle keep-alive connection to wait for.
      const url = `http://127.0.0.1:${address.port}/jwks`;
      const jwks = createRemoteJWKSet(new URL(url), { headers: { connection: 'close' } });
      const published = (await (await fetch(url, { headers: { connection: 'close' } })).json()) as { keys: { kid: string }[] };
      assert.deepEqual(published.keys.map((key) => key.kid).sort(), [...recorded.kids].sort());
      const access = await jwtVerify(recorded.live.accessToken, jwks, { issuer: fixture.issuer, audience: API, typ: 'at+jwt' });
      assert.equal(access.payload.sub, 'alice');
      assert.equal(access.protectedHeader.alg, 'ES256');
      const id = await jwtVerify(recorded.live.idToken, jwks, { issuer: fixture.issuer, audience: 'webapp' });
      assert.equal(decodeProtectedHeader(recorded.live.idToken).alg, 'RS256');
      assert.equal(id.payload['email'], 'alice@example.org');
      const service = await jwtVerify(recorded.clientCredentials.accessToken, jwks, { issuer: fixture.issuer, audience: API, typ: 'at+jwt' });
      assert.equal(service.payload['client_id'], 'service');
    });

    test("/introspect: the release's live access tokens are active, with their aud (a person's from 0.2: inactive)", async () => {
      const service = await introspect(recorded.clientCredentials.accessToken);
      assert.equal(service['active'], true, JSON.stringify(service));
      assert.equal(service['client_id'], 'service');
      if (OLD_JTI.has(release)) {
        assert.deepEqual(await introspect(recorded.live.accessToken), { active: false });
        assert.deepEqual(await introspect(recorded.device.accessToken), { active: false });
        return;
      }
      const live = await introspect(recorded.live.accessToken);
      assert.equal(live['active'], true, JSON.stringify(live));
      assert.equal(live['aud'], API);
      assert.equal(live['sub'], 'alice');
      assert.equal(live['client_id'], 'webapp');
      assert.equal(live['scope'], 'openid profile email');
      const device = await introspect(recorded.device.accessToken);
      assert.equal(device['active'], true, JSON.stringify(device));
      assert.deepEqual(device['aud'], [API, FILES]);
    });

    test('the recorded refresh token: bound to the resources named at /authorize; a named one is the aud; the whole grant after', async () => {
      // DESIGN.md §5: a refused refresh is checked before the token is touched and leaves it usable.
      assertRefused(await refreshOfWebapp(recorded.live.refreshToken, [DOCS]), 'invalid_target', `resource "${DOCS}" was not part of the authorization`);
      const named = await refreshOfWebapp(recorded.live.refreshToken, [API]);
      assert.equal(named.statusCode, 200, named.body);
      const narrowed = named.json() as { access_token: string; refresh_token: string; scope: string };
      assert.equal(claimsOf(narrowed.access_token)['aud'], API);
      assert.equal(claimsOf(narrowed.access_token)['sub'], 'alice');
      assert.equal(narrowed.scope, 'openid profile email');
      const whole = await refreshOfWebapp(narrowed.refresh_token);
      assert.equal(whole.statusCode, 200, whole.body);
      const wide = whole.json() as { access_token: string; refresh_token: string };
      assert.deepEqual(claimsOf(wide.access_token)['aud'], recorded.live.resources);
      liveRefresh = wide.refresh_token;
      assert.equal((await introspect(wide.access_token))['active'], true);
    });

    test("the device grant's refresh token refreshes, for the whole audience or one named server", async () => {
      const named = await token([['grant_type', 'refresh_token'], ['refresh_token', recorded.device.refreshToken], ['client_id', 'tv'], ['resource', FILES]], null);
      assert.equal(named.statusCode, 200, named.body);
      const body = named.json() as { access_token: string; refresh_token: string };
      assert.equal(claimsOf(body.access_token)['aud'], FILES);
      const whole = await token([['grant_type', 'refresh_token'], ['refresh_token', body.refresh_token], ['client_id', 'tv']], null);
      assert.equal(whole.statusCode, 200, whole.body);
      const wide = whole.json() as { access_token: string; refresh_token: string };
      assert.deepEqual(claimsOf(wide.access_token)['aud'], [API, FILES]);
      deviceRefresh = wide.refresh_token;
    });

    test("a refresh token the release rotated away is reuse: refused, and its grant revoked (DESIGN.md §6)", async () => {
      const before = await introspect(recorded.rotated.accessToken);
      assert.equal(before['active'], !OLD_JTI.has(release), JSON.stringify(before));
      assertRefused(await token([['grant_type', 'refresh_token'], ['refresh_token', recorded.rotated.rotatedRefreshToken], ['client_id', 'spa']], null), 'invalid_grant');
      assertRefused(await token([['grant_type', 'refresh_token'], ['refresh_token', recorded.rotated.refreshToken], ['client_id', 'spa']], null), 'invalid_grant');
    });

    test('the grant the release revoked stays refused', async () => {
      assertRefused(await refreshOfWebapp(recorded.revoked.refreshToken), 'invalid_grant');
    });

    /** This build's /jwks, as a resource server would read it. */
    const publishedKeys = async (): Promise<ReturnType<typeof createLocalJWKSet>> => {
      const response = await app.inject({ url: '/jwks' });
      assert.equal(response.statusCode, 200, response.body);
      return createLocalJWKSet(response.json() as JSONWebKeySet);
    };

    test(
      "the keys the release rotated: the older keys, which signed every recorded token, stay published; this build signs with the newer ones",
      { skip: rotatedKids === undefined ? `${release} has no \`keys rotate\`` : undefined },
      async () => {
        const newer = rotatedKids as readonly string[];
        const older = recorded.kids.filter((kid) => !newer.includes(kid));
        assert.equal(older.length, 2, `the older ES256 and RS256 keys: ${older.join(' ')}`);
        const jwks = await publishedKeys();
        for (const signed of [recorded.live.accessToken, recorded.live.idToken, recorded.clientCredentials.accessToken]) {
          const { payload, protectedHeader } = await jwtVerify(signed, jwks, { issuer: fixture.issuer });
          assert.ok(older.includes(protectedHeader.kid as string), `signed by ${protectedHeader.kid}, not an older key`);
          assert.equal(payload.iss, fixture.issuer);
        }
        // DESIGN.md §2: a rotated key signs new tokens within 60 s; these were rotated long before the upgrade.
        const issued = await token([['grant_type', 'client_credentials'], ['scope', 'read']], basic('service', 'upgrade-service-secret'));
        assert.equal(issued.statusCode, 200, issued.body);
        const fresh = (issued.json() as { access_token: string }).access_token;
        const { protectedHeader } = await jwtVerify(fresh, jwks, { issuer: fixture.issuer, audience: API, typ: 'at+jwt' });
        assert.equal(protectedHeader.alg, 'ES256');
        assert.ok(newer.includes(protectedHeader.kid as string), `this build signs with ${protectedHeader.kid}, not a rotated key (${newer.join(' ')})`);
      },
    );

    test(
      'the client_credentials token the release revoked at /revoke stays inactive at /introspect, though its signature holds',
      { skip: revokedClientCredentials === undefined ? `${release} does not revoke access tokens` : undefined },
      async () => {
        const revoked = (revokedClientCredentials as { accessToken: string }).accessToken;
        const { payload } = await jwtVerify(revoked, await publishedKeys(), { issuer: fixture.issuer, audience: API, typ: 'at+jwt' });
        assert.equal(payload['client_id'], 'service');
        assert.deepEqual(await introspect(revoked), { active: false });
      },
    );

    test(
      'the client the release registered at /register: its secret authenticates it, and its refresh token refreshes',
      { skip: dynamic === undefined ? `${release} has no /register` : undefined },
      async () => {
        const host = dynamic as NonNullable<Recorded['dynamic']>;
        const held = await introspect(host.accessToken);
        assert.equal(held['active'], true, JSON.stringify(held));
        assert.equal(held['client_id'], host.clientId);
        assert.equal(held['aud'], API);
        const refreshOfHost = (auth: string): Promise<LightMyRequestResponse> => token([['grant_type', 'refresh_token'], ['refresh_token', host.refreshToken]], auth);
        const wrong = await refreshOfHost(basic(host.clientId, `${host.clientSecret}x`));
        assert.equal(wrong.statusCode, 401, wrong.body);
        assert.equal((wrong.json() as { error: string }).error, 'invalid_client');
        const refreshed = await refreshOfHost(dynamicAuth());
        assert.equal(refreshed.statusCode, 200, refreshed.body);
        const body = refreshed.json() as { access_token: string; refresh_token: string; scope: string };
        const claims = claimsOf(body.access_token);
        assert.equal(claims['client_id'], host.clientId);
        assert.equal(claims['sub'], 'alice');
        assert.equal(claims['aud'], API);
        assert.equal(body.scope, 'openid profile email');
        assert.equal((await introspect(body.access_token))['active'], true);
      },
    );

    test(
      'the consent the release remembered for its registered client is dropped (migration 6: it names no redirect origin), so the person is asked again; the answer is then remembered',
      { skip: dynamic === undefined ? `${release} has no consent` : undefined },
      async () => {
        const host = dynamic as NonNullable<Recorded['dynamic']>;
        assert.deepEqual(await copy.rows(`SELECT subject FROM consents WHERE client_id = '${host.clientId}'`), []);
        const authorizeUrl = (prompt?: string): string =>
          `/authorize?${new URLSearchParams({
            response_type: 'code',
            client_id: host.clientId,
            redirect_uri: host.redirectUri,
            scope: 'openid profile email',
            resource: API,
            state: 'upgrade',
            code_challenge: PKCE.challenge,
            code_challenge_method: 'S256',
            ...(prompt !== undefined && { prompt }),
          })}`;
        const toClient = (response: LightMyRequestResponse): URL => {
          assert.equal(response.statusCode, 303, response.body);
          const location = new URL(String(response.headers.location), fixture.issuer);
          assert.equal(location.origin + location.pathname, host.redirectUri, `sent to ${location}, not the client`);
          return location;
        };
        const exchange = async (location: URL): Promise<void> => {
          const code = location.searchParams.get('code');
          assert.ok(code !== null, `no code: ${location}`);
          const exchanged = await token([['grant_type', 'authorization_code'], ['code', code], ['redirect_uri', host.redirectUri], ['code_verifier', PKCE.verifier]], dynamicAuth());
          assert.equal(exchanged.statusCode, 200, exchanged.body);
          assert.equal(claimsOf((exchanged.json() as { access_token: string }).access_token)['aud'], API);
        };
        // DESIGN.md §8: consent is remembered per redirect origin; README: migration 6 drops the ones without.
        const silent = toClient(await app.inject({ url: authorizeUrl('none'), headers: { cookie: recorded.browserCookies } }));
        assert.equal(silent.searchParams.get('error'), 'consent_required', String(silent));
        let cookies = recorded.browserCookies;
        const asked = await app.inject({ url: authorizeUrl(), headers: { cookie: cookies } });
        assert.equal(asked.statusCode, 303, asked.body);
        const consentUrl = String(asked.headers.location);
        assert.ok(consentUrl.startsWith('/consent?'), `signed in, the person is sent to ${consentUrl}`);
        cookies = cookieJar(cookies, asked);
        const page = await app.inject({ url: consentUrl, headers: { cookie: cookies } });
        assert.equal(page.statusCode, 200, page.body);
        cookies = cookieJar(cookies, page);
        const allowed = await app.inject({
          method: 'POST',
          url: '/consent',
          headers: { cookie: cookies, 'content-type': 'application/x-www-form-urlencoded' },
          payload: form([['csrf', hiddenInput(page.body, 'csrf')], ['login', hiddenInput(page.body, 'login')], ['decision', 'allow']]),
        });
        assert.equal(allowed.statusCode, 303, allowed.body);
        cookies = cookieJar(cookies, allowed);
        const resumed = await app.inject({ url: String(allowed.headers.location), headers: { cookie: cookies } });
        await exchange(toClient(resumed));
        await exchange(toClient(await app.inject({ url: authorizeUrl('none'), headers: { cookie: cookies } })));
      },
    );

    test(
      "the release's access tokens of a revoked grant are inactive at /introspect (DESIGN.md §8), revoked before the upgrade or after",
      async () => {
        assert.deepEqual(await introspect(recorded.revoked.accessToken), { active: false });
        assert.deepEqual(await introspect(recorded.rotated.accessToken), { active: false });
      },
    );

    test("the release's browser session signs the person in without a password (prompt=none)", async () => {
      const query = new URLSearchParams({
        response_type: 'code',
        client_id: 'webapp',
        redirect_uri: WEBAPP_REDIRECT,
        scope: 'openid email',
        prompt: 'none',
        code_challenge: PKCE.challenge,
        code_challenge_method: 'S256',
      });
      const response = await app.inject({ url: `/authorize?${query}`, headers: { cookie: recorded.browserCookies } });
      assert.equal(response.statusCode, 303, response.body);
      const location = new URL(String(response.headers.location));
      assert.equal(location.origin + location.pathname, WEBAPP_REDIRECT);
      assert.ok(location.searchParams.get('code') !== null, `no code: ${location}`);
      const exchanged = await token(
        [['grant_type', 'authorization_code'], ['code', location.searchParams.get('code') as string], ['redirect_uri', WEBAPP_REDIRECT], ['code_verifier', PKCE.verifier]],
        webapp(),
      );
      assert.equal(exchanged.statusCode, 200, exchanged.body);
      const id = claimsOf((exchanged.json() as { id_token: string }).id_token);
      assert.equal(id['sub'], 'alice');
      assert.equal(id['email'], 'alice@example.org');
    });

    test('the operator sees what people hold: the live grants of the release, and none of the revoked ones', async () => {
      const store = await openStore(config.state);
      try {
        const held = (await store.listGrants({}, Date.now())).map(({ grant }) => `${grant.clientId} ${grant.subject} ${grant.resources.join(',')}`);
        // The live webapp grant, the device grant and the new grant of the session test; the spa grant was revoked above.
        // The registered client's: the release's and the two of the consent test.
        const hosts = dynamic === undefined ? [] : Array.from({ length: 3 }, () => `${dynamic.clientId} alice ${API}`);
        assert.deepEqual([...held].sort(), ['tv alice ', 'webapp alice ', `webapp alice ${API},${FILES}`, ...hosts].sort());
      } finally {
        await store.close();
      }
    });

    test(
      "revoking one of the release's access tokens revokes its grant (DESIGN.md §8): the grant's refresh token stops (0.2's names no grant: it keeps working)",
      async () => {
        const revoked = await app.inject({
          method: 'POST',
          url: '/revoke',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
          payload: form([['token', recorded.device.accessToken], ['client_id', 'tv']]),
        });
        assert.equal(revoked.statusCode, 200, revoked.body);
        assert.deepEqual(await introspect(recorded.device.accessToken), { active: false });
        const refreshed = await token([['grant_type', 'refresh_token'], ['refresh_token', deviceRefresh], ['client_id', 'tv']], null);
        if (OLD_JTI.has(release)) assert.equal(refreshed.statusCode, 200, refreshed.body);
        else assertRefused(refreshed, 'invalid_grant');
      },
    );

    test('a second start migrates nothing and changes nothing: same schema, keys, grants, tokens', async () => {
      await stop();
      problems.length = 0;
      const before = await snapshot(copy);
      await start();
      assert.equal(await snapshot(copy), before);
      assert.deepEqual(problems, []);
      const again = await refreshOfWebapp(liveRefresh, [FILES]);
      assert.equal(again.statusCode, 200, again.body);
      assert.equal(claimsOf((again.json() as { access_token: string }).access_token)['aud'], FILES);
    });
  });
}

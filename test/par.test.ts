/** Pushed authorization requests (RFC 9126, DESIGN.md §13) over HTTP, on every store and across two instances. */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import type { Config } from '../src/config/types.js';
import { createMetrics, type Metrics } from '../src/http/metrics.js';
import { openStore } from '../src/store/open.js';
import type { Store } from '../src/store/types.js';
import { pushedRequestDigest } from '../src/oauth/par.js';
import { createPostgresDatabase, POSTGRES_SKIP_REASON, POSTGRES_URL, STORE_KINDS } from './helpers/databases.js';
import { newKey, proof, type ClientKey } from './helpers/proofs.js';
import {
  appPerSuite,
  AUDIENCE,
  basic,
  claimsOf,
  client,
  cookieJar,
  form,
  hiddenInput,
  ISSUER,
  PASSWORD,
  pkce,
  REDIRECT,
  resumeAuthorization,
  SECRET,
  testApp,
  type TestApp,
  testConfig,
} from './helpers/app.js';

const API = AUDIENCE[0] as string;
const PAR = `${ISSUER}/par`;
const TOKEN = `${ISSUER}/token`;
const URN = /^urn:ietf:params:oauth:request_uri:[A-Za-z0-9_-]{43}$/;

async function config(): Promise<Config> {
  const base = await testConfig();
  const clients = new Map(base.clients);
  clients.set('pushy', client({ clientId: 'pushy', requirePar: true }));
  return { ...base, clients };
}

/** The /authorize parameters of a good request of `clientId`, plus `extra`. */
function authorizationPairs(clientId: string, extra: readonly (readonly [string, string])[] = []): (readonly [string, string])[] {
  return [
    ['response_type', 'code'],
    ['client_id', clientId],
    ['redirect_uri', REDIRECT],
    ['scope', 'openid profile'],
    ['state', 'pushed-state'],
    ['code_challenge', pkce().challenge],
    ['code_challenge_method', 'S256'],
    ...extra,
  ];
}

function push(app: FastifyInstance, pairs: readonly (readonly [string, string])[], auth: string | null = null): Promise<LightMyRequestResponse> {
  return app.inject({
    method: 'POST',
    url: '/par',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...(auth === null ? {} : { authorization: auth }) },
    payload: form(pairs),
  });
}

const authorizeWith = (app: FastifyInstance, pairs: readonly (readonly [string, string])[]): Promise<LightMyRequestResponse> =>
  app.inject({ method: 'GET', url: `/authorize?${form(pairs)}` });

/** Follows /authorize (already answered by `start`) through the sign-in page to the redirect back to the client. */
async function signIn(app: FastifyInstance, start: LightMyRequestResponse): Promise<URL> {
  assert.equal(start.statusCode, 303, start.body);
  let cookies = cookieJar('', start);
  const page = await app.inject({ method: 'GET', url: start.headers.location as string, headers: { cookie: cookies } });
  cookies = cookieJar(cookies, page);
  const submitted = await app.inject({
    method: 'POST',
    url: '/login',
    headers: { cookie: cookies, 'content-type': 'application/x-www-form-urlencoded' },
    payload: form([['csrf', hiddenInput(page.body, 'csrf')], ['login', hiddenInput(page.body, 'login')], ['username', 'alice'], ['password', PASSWORD]]),
  });
  const resumed = await resumeAuthorization(app, submitted, cookieJar(cookies, submitted));
  return new URL(resumed.response.headers.location as string);
}

function assertErrorPage(response: LightMyRequestResponse, error: string, description?: RegExp): void {
  assert.equal(response.statusCode, 400, response.body);
  assert.match(String(response.headers['content-type']), /text\/html/);
  assert.match(response.body, new RegExp(`<strong>${error}</strong>`));
  if (description !== undefined) assert.match(response.body, description);
}

/** How many times the store was asked to keep a pushed request. */
async function pushesStored(metrics: Metrics): Promise<number> {
  const { values } = await metrics.storeOperations.get();
  return values.find((value) => value.labels.operation === 'savePushedRequest' && value.metricName?.endsWith('_count'))?.value ?? 0;
}

for (const kind of STORE_KINDS) {
  describe(`PAR on the ${kind.name} store`, { skip: kind.skip }, () => {
    let t: TestApp;
    let clock = Date.now();
    const metrics = createMetrics({ processMetrics: false });
    appPerSuite(kind, async () => ({ config: await config(), now: () => clock, metrics }), (opened) => {
      t = opened;
    });

    test('a public client pushes its request (201, a request_uri URN, expires_in 60); /authorize runs the pushed parameters and ignores the others', async () => {
      const pushed = await push(t.app, authorizationPairs('spa', [['resource', API]]));
      assert.equal(pushed.statusCode, 201, pushed.body);
      assert.equal(pushed.headers['cache-control'], 'no-store');
      assert.match(pushed.json().request_uri, URN);
      assert.equal(pushed.json().expires_in, 60);
      // Parameters beside client_id and request_uri are not read: not this state, not this (unregistered) redirect_uri.
      const start = await authorizeWith(t.app, [['client_id', 'spa'], ['request_uri', pushed.json().request_uri], ['state', 'ignored'], ['redirect_uri', 'https://evil.example/cb']]);
      const back = await signIn(t.app, start);
      assert.equal(`${back.origin}${back.pathname}`, REDIRECT);
      assert.equal(back.searchParams.get('state'), 'pushed-state');
      assert.ok(back.searchParams.get('code'));
    });

    test('only the parameters /authorize reads are kept: not client authentication, not a stranger\'s 40 KiB of unknown ones', async () => {
      const junk = 'x'.repeat(40_000);
      const pushed = await push(t.app, [...authorizationPairs('spa', [['resource', API]]), ['junk', junk], ['ui_locales', 'de']]);
      assert.equal(pushed.statusCode, 201, pushed.body);
      const digest = pushedRequestDigest(pushed.json().request_uri) as string;
      const record = await t.store.findPushedRequest(digest, 'spa', clock);
      const names = record?.parameters.map(([name]) => name).sort();
      assert.deepEqual(names, ['client_id', 'code_challenge', 'code_challenge_method', 'redirect_uri', 'resource', 'response_type', 'scope', 'state']);
    });

    test('a confidential client authenticates at /par as at /token; a wrong secret is 401 invalid_client and nothing is kept', async () => {
      const accepted = await push(t.app, authorizationPairs('webapp'), basic('webapp', SECRET));
      assert.equal(accepted.statusCode, 201, accepted.body);
      const before = await pushesStored(metrics);
      const wrong = await push(t.app, authorizationPairs('webapp'), basic('webapp', 'not-the-secret'));
      assert.equal(wrong.statusCode, 401);
      assert.equal(wrong.json().error, 'invalid_client');
      assert.equal(wrong.headers['www-authenticate'], 'Basic realm="pinpoint"');
      const unauthenticated = await push(t.app, authorizationPairs('webapp'));
      assert.equal(unauthenticated.statusCode, 401);
      assert.equal(await pushesStored(metrics), before);
    });

    test('a pushed request is checked as /authorize checks it, with the same error and description, as JSON 400; nothing is kept', async () => {
      const before = await pushesStored(metrics);
      const drop = (name: string) => authorizationPairs('spa').filter(([key]) => key !== name);
      const cases: [(readonly [string, string])[], string, string][] = [
        [drop('code_challenge'), 'invalid_request', 'code_challenge is required (PKCE with S256)'],
        [authorizationPairs('spa', [['resource', 'https://elsewhere.example/']]), 'invalid_target', 'resource "https://elsewhere.example/" is not one this client may ask a token for'],
        [authorizationPairs('spa').map(([key, value]) => [key, key === 'scope' ? 'openid admin' : value] as const), 'invalid_scope', ''],
        [authorizationPairs('spa').map(([key, value]) => [key, key === 'redirect_uri' ? 'https://evil.example/cb' : value] as const), 'invalid_request', 'redirect_uri is not registered for this client'],
        [authorizationPairs('spa', [['request', 'eyJhbGciOiJub25lIn0.e30.']]), 'request_not_supported', 'request objects are not supported'],
        [authorizationPairs('spa', [['state', 'again']]), 'invalid_request', 'state appears more than once'],
      ];
      for (const [pairs, error, description] of cases) {
        const response = await push(t.app, pairs);
        assert.equal(response.statusCode, 400, response.body);
        assert.equal(response.json().error, error, response.body);
        if (description !== '') assert.equal(response.json().error_description, description);
        // /authorize, given the same, says the same (a redirect, or the page for a bad redirect_uri or a repeat).
        const direct = await authorizeWith(t.app, pairs);
        const said = direct.statusCode === 303 ? new URL(direct.headers.location as string).searchParams : undefined;
        if (said !== undefined) {
          assert.equal(said.get('error'), error);
          assert.equal(said.get('error_description'), response.json().error_description);
        } else assertErrorPage(direct, error);
      }
      const nested = await push(t.app, authorizationPairs('spa', [['request_uri', 'urn:ietf:params:oauth:request_uri:abc']]));
      assert.deepEqual(nested.json(), { error: 'invalid_request', error_description: 'request_uri cannot be pushed to /par' });
      assert.equal(await pushesStored(metrics), before);
    });

    test('a request_uri is single-use: the second /authorize gets the error page', async () => {
      const requestUri = (await push(t.app, authorizationPairs('spa'))).json().request_uri as string;
      assert.equal((await authorizeWith(t.app, [['client_id', 'spa'], ['request_uri', requestUri]])).statusCode, 303);
      assertErrorPage(await authorizeWith(t.app, [['client_id', 'spa'], ['request_uri', requestUri]]), 'invalid_request_uri', /already used/);
    });

    test("another client's request_uri is the error page and stays usable by its own client", async () => {
      const requestUri = (await push(t.app, authorizationPairs('spa'))).json().request_uri as string;
      assertErrorPage(await authorizeWith(t.app, [['client_id', 'webapp'], ['request_uri', requestUri]]), 'invalid_request_uri');
      assert.equal((await authorizeWith(t.app, [['client_id', 'spa'], ['request_uri', requestUri]])).statusCode, 303);
    });

    test('a request_uri lives 60 s', async () => {
      const requestUri = (await push(t.app, authorizationPairs('spa'))).json().request_uri as string;
      clock += 61_000;
      try {
        assertErrorPage(await authorizeWith(t.app, [['client_id', 'spa'], ['request_uri', requestUri]]), 'invalid_request_uri', /expired/);
      } finally {
        clock -= 61_000;
      }
    });

    test('a request_uri Pinpoint did not issue, or without client_id, or sent twice, is the error page', async () => {
      const requestUri = (await push(t.app, authorizationPairs('spa'))).json().request_uri as string;
      assertErrorPage(await authorizeWith(t.app, [['client_id', 'spa'], ['request_uri', 'https://client.example/request.jwt']]), 'invalid_request_uri');
      const altered = `${requestUri.slice(0, -1)}${requestUri.endsWith('A') ? 'B' : 'A'}`;
      assertErrorPage(await authorizeWith(t.app, [['client_id', 'spa'], ['request_uri', altered]]), 'invalid_request_uri');
      assertErrorPage(await authorizeWith(t.app, [['request_uri', requestUri]]), 'invalid_request', /client_id is required/);
      assertErrorPage(await authorizeWith(t.app, [['client_id', 'spa'], ['request_uri', requestUri], ['request_uri', requestUri]]), 'invalid_request', /more than once/);
      // None of these used it up.
      assert.equal((await authorizeWith(t.app, [['client_id', 'spa'], ['request_uri', requestUri]])).statusCode, 303);
    });

    test('require_par: /authorize without a request_uri is the error page; through /par it works', async () => {
      assertErrorPage(await authorizeWith(t.app, authorizationPairs('pushy')), 'invalid_request', /must push its authorization requests to \/par/);
      const requestUri = (await push(t.app, authorizationPairs('pushy'))).json().request_uri as string;
      const back = await signIn(t.app, await authorizeWith(t.app, [['client_id', 'pushy'], ['request_uri', requestUri]]));
      assert.ok(back.searchParams.get('code'));
    });

    /** A push by `spa` carrying DPoP `proofs` (RFC 9449 §10.1), and the verifier its code will need. */
    const pushWithProof = async (proofs: string | string[], extra: readonly (readonly [string, string])[] = []): Promise<{ pushed: LightMyRequestResponse; verifier: string }> => {
      const { verifier, challenge } = pkce();
      const pairs = authorizationPairs('spa', [...extra]).map(([name, value]) => [name, name === 'code_challenge' ? challenge : value] as const);
      const pushed = await t.app.inject({ method: 'POST', url: '/par', headers: { 'content-type': 'application/x-www-form-urlencoded', dpop: proofs }, payload: form(pairs) });
      return { pushed, verifier };
    };
    const parProof = (key: ClientKey, htu = PAR): Promise<string> => proof(key, { htu, iat: Math.floor(clock / 1000) });
    const exchange = (code: string, verifier: string, dpop?: string): Promise<LightMyRequestResponse> =>
      t.app.inject({
        method: 'POST',
        url: '/token',
        headers: { 'content-type': 'application/x-www-form-urlencoded', ...(dpop !== undefined && { dpop }) },
        payload: form([['grant_type', 'authorization_code'], ['code', code], ['redirect_uri', REDIRECT], ['code_verifier', verifier], ['client_id', 'spa']]),
      });

    test("a DPoP proof at /par binds the code to its key (RFC 9449 §10.1): the exchange needs that key's proof", async () => {
      const key = await newKey('ES256');
      const { pushed, verifier } = await pushWithProof(await parProof(key));
      assert.equal(pushed.statusCode, 201, pushed.body);
      const back = await signIn(t.app, await authorizeWith(t.app, [['client_id', 'spa'], ['request_uri', pushed.json().request_uri]]));
      const code = back.searchParams.get('code') as string;
      const unproven = await exchange(code, verifier);
      assert.deepEqual(unproven.json(), { error: 'invalid_grant', error_description: 'the authorization code is bound to a DPoP key; send a DPoP proof made with that key' });
      const other = await exchange(code, verifier, await proof(await newKey('ES256'), { htu: TOKEN, iat: Math.floor(clock / 1000) }));
      assert.equal(other.json().error, 'invalid_grant');
      const exchanged = await exchange(code, verifier, await proof(key, { htu: TOKEN, iat: Math.floor(clock / 1000) }));
      assert.equal(exchanged.statusCode, 200, exchanged.body);
      assert.equal(exchanged.json().token_type, 'DPoP');
      assert.deepEqual(claimsOf(exchanged.json().access_token).cnf, { jkt: key.jkt });
    });

    test('at /par, dpop_jkt beside a proof of another key is invalid_request; a bad, repeated or reused proof is invalid_dpop_proof; nothing is kept', async () => {
      const key = await newKey('ES256');
      const before = await pushesStored(metrics);
      const mismatch = (await pushWithProof(await parProof(key), [['dpop_jkt', (await newKey('ES256')).jkt]])).pushed;
      assert.equal(mismatch.statusCode, 400);
      assert.deepEqual(mismatch.json(), { error: 'invalid_request', error_description: 'dpop_jkt names another key than the one of the DPoP proof' });
      for (const refused of [
        (await pushWithProof(await parProof(key, TOKEN))).pushed,
        (await pushWithProof([await parProof(key), await parProof(key)])).pushed,
        (await pushWithProof('not-a-proof')).pushed,
      ]) {
        assert.equal(refused.statusCode, 400, refused.body);
        assert.equal(refused.json().error, 'invalid_dpop_proof', refused.body);
      }
      assert.equal(await pushesStored(metrics), before);
      // The same dpop_jkt as the proof's key is fine, and a proof is taken once.
      const once = await parProof(key);
      assert.equal((await pushWithProof(once, [['dpop_jkt', key.jkt]])).pushed.statusCode, 201);
      const again = (await pushWithProof(once)).pushed;
      assert.equal(again.json().error, 'invalid_dpop_proof');
      assert.match(again.json().error_description, /already used/);
      assert.equal(await pushesStored(metrics), before + 1);
    });
  });
}

const SHARED = [
  {
    name: 'one SQLite file',
    open: async (): Promise<{ stores: [Store, Store]; cleanup: () => Promise<void> }> => {
      const folder = await mkdtemp(join(tmpdir(), 'pinpoint-par-'));
      const path = join(folder, 'pinpoint.db');
      return { stores: [await openStore({ kind: 'sqlite', path }), await openStore({ kind: 'sqlite', path })], cleanup: () => rm(folder, { recursive: true, force: true }) };
    },
  },
  {
    name: 'one PostgreSQL database',
    ...(POSTGRES_URL === undefined && { skip: POSTGRES_SKIP_REASON }),
    open: async (): Promise<{ stores: [Store, Store]; cleanup: () => Promise<void> }> => {
      const database = await createPostgresDatabase();
      const open = () => openStore({ kind: 'postgres', url: database.url, schema: 'public' });
      return { stores: [await open(), await open()], cleanup: database.drop };
    },
  },
] as const;

for (const shared of SHARED) {
  describe(`PAR across two instances on ${shared.name}`, { skip: 'skip' in shared ? shared.skip : undefined }, () => {
    let apps: [TestApp, TestApp];
    let cleanup: () => Promise<void>;
    before(async () => {
      const opened = await shared.open();
      cleanup = opened.cleanup;
      const cfg = await config();
      apps = [await testApp({ store: opened.stores[0], config: cfg }), await testApp({ store: opened.stores[1], config: cfg })];
    });
    after(async () => {
      for (const each of apps) {
        await each.app.close();
        await each.store.close();
      }
      await cleanup();
    });

    test('a request pushed to one instance is used at the other, once; two browsers racing with it: one goes on', async () => {
      const [a, b] = apps;
      const requestUri = (await push(a.app, authorizationPairs('spa'))).json().request_uri as string;
      assert.equal((await authorizeWith(b.app, [['client_id', 'spa'], ['request_uri', requestUri]])).statusCode, 303);
      assertErrorPage(await authorizeWith(a.app, [['client_id', 'spa'], ['request_uri', requestUri]]), 'invalid_request_uri');

      const raced = (await push(a.app, authorizationPairs('spa'))).json().request_uri as string;
      const answers = await Promise.all([a, b].map((each) => authorizeWith(each.app, [['client_id', 'spa'], ['request_uri', raced]])));
      assert.deepEqual(answers.map((answer) => answer.statusCode).sort(), [303, 400]);
    });
  });
}

for (const kind of STORE_KINDS) {
  describe(`PAR pushes against the address limit on the ${kind.name} store`, { skip: kind.skip }, () => {
    const LIMIT = 5;
    let t: TestApp;
    const metrics = createMetrics({ processMetrics: false });
    appPerSuite(
      kind,
      async () => {
        const base = await config();
        return { config: { ...base, limits: { ...base.limits, addressFailures: LIMIT } }, metrics };
      },
      (opened) => {
        t = opened;
      },
    );

    test('a burst of pushes at once keeps at most address_failures of them (each counted before it is written, an audit found them counted after)', async () => {
      const responses = await Promise.all(Array.from({ length: 30 }, () => push(t.app, authorizationPairs('spa'))));
      const created = responses.filter((response) => response.statusCode === 201).length;
      assert.equal(created, LIMIT, responses.map((response) => response.statusCode).join(','));
      assert.ok(responses.every((response) => response.statusCode === 201 || response.statusCode === 429));
      assert.equal(await pushesStored(metrics), LIMIT, 'nothing more was written');
    });
  });
}

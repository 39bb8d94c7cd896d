import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { createLocalJWKSet, jwtVerify } from 'jose';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AppLimits } from '../src/context.js';
import { SqliteStore } from '../src/store/sqlite.js';
import type { Store } from '../src/store/types.js';
import { digestOf } from '../src/crypto/digest.js';
import {
  AUDIENCE,
  ISSUER,
  PASSWORD,
  claimsOf,
  client,
  cookieJar,
  form,
  hiddenInput,
  testApp,
  testConfig,
  type TestApp,
} from './helpers/app.js';

const DEVICE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code';
const API = 'https://api.example.org/';
const REFUSED_BY_GRANT = 'resource indicators are taken with the authorization_code and refresh_token grants';
const USER_CODE = /^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/;
const FORM = { 'content-type': 'application/x-www-form-urlencoded' };
const START = Date.parse('2030-01-01T00:00:00Z');

/** An app whose clock the test moves, with a second device client (`console`) that has the whole test audience. */
async function deviceApp(options: { limits?: Partial<AppLimits>; store?: Store } = {}): Promise<TestApp & { advance(seconds: number): void }> {
  const base = await testConfig();
  const clients = new Map(base.clients);
  clients.set('console', client({ clientId: 'console', kind: 'device', redirectUris: [], scopes: ['openid', 'profile', 'email', 'nfs'], displayName: 'Living-room <console>' }));
  let clock = START;
  const t = await testApp({ config: { ...base, clients }, now: () => clock, limits: options.limits, store: options.store });
  return { ...t, advance: (seconds) => void (clock += seconds * 1000) };
}

async function authorizeDevice(app: FastifyInstance, pairs: readonly (readonly [string, string])[] = [['client_id', 'tv']], headers: Record<string, string> = {}): Promise<LightMyRequestResponse> {
  return app.inject({ method: 'POST', url: '/device_authorization', headers: { ...FORM, ...headers }, payload: form(pairs) });
}

async function startDevice(app: FastifyInstance, clientId = 'tv', scope = 'openid profile'): Promise<{ deviceCode: string; userCode: string }> {
  const response = await authorizeDevice(app, [['client_id', clientId], ['scope', scope]]);
  assert.equal(response.statusCode, 200, response.body);
  const body = response.json();
  return { deviceCode: body.device_code, userCode: body.user_code };
}

/** POST /token as a public client: client_id in the body, no Authorization header. */
async function postPublic(app: FastifyInstance, pairs: readonly (readonly [string, string])[]): Promise<LightMyRequestResponse> {
  return app.inject({ method: 'POST', url: '/token', headers: FORM, payload: form(pairs) });
}

async function poll(app: FastifyInstance, deviceCode: string, extra: readonly (readonly [string, string])[] = [], clientId = 'tv'): Promise<LightMyRequestResponse> {
  return postPublic(app, [['grant_type', DEVICE_GRANT], ['client_id', clientId], ['device_code', deviceCode], ...extra]);
}

async function refreshAsTv(app: FastifyInstance, refreshToken: string, resources: readonly string[]): Promise<LightMyRequestResponse> {
  return postPublic(app, [['grant_type', 'refresh_token'], ['client_id', 'tv'], ['refresh_token', refreshToken], ...resources.map((r) => ['resource', r] as [string, string])]);
}

function assertError(response: LightMyRequestResponse, status: number, error: string, description?: string): void {
  assert.equal(response.statusCode, status, response.body);
  const body = response.json();
  assert.equal(body.error, error, response.body);
  if (description !== undefined) assert.equal(body.error_description, description);
}

function assertPageHeaders(response: LightMyRequestResponse): void {
  assert.match(String(response.headers['content-security-policy']), /frame-ancestors 'none'/);
  assert.equal(response.headers['x-frame-options'], 'DENY');
  assert.match(String(response.headers['content-type']), /^text\/html/);
}

/** The person's side, as a browser: /device form -> code typed loosely -> sign-in -> approval page -> decision. */
async function decideThroughPages(app: FastifyInstance, userCode: string, decision: 'approve' | 'deny'): Promise<LightMyRequestResponse> {
  const entry = await app.inject({ method: 'GET', url: '/device' });
  assert.equal(entry.statusCode, 200);
  assertPageHeaders(entry);
  assert.equal((entry.body.match(/name="user_code"/g) ?? []).length, 1);
  let cookies = cookieJar('', entry);

  const typed = userCode.replace('-', '').toLowerCase();
  const submitted = await app.inject({
    method: 'POST',
    url: '/device',
    headers: { ...FORM, cookie: cookies },
    payload: form([['csrf', hiddenInput(entry.body, 'csrf')], ['user_code', typed]]),
  });
  assert.equal(submitted.statusCode, 303, submitted.body);
  const loginPage = await app.inject({ method: 'GET', url: submitted.headers.location as string, headers: { cookie: cookies } });
  assert.equal(loginPage.statusCode, 200);
  cookies = cookieJar(cookies, loginPage);
  const signedIn = await app.inject({
    method: 'POST',
    url: '/login',
    headers: { ...FORM, cookie: cookies },
    payload: form([
      ['csrf', hiddenInput(loginPage.body, 'csrf')],
      ['login', hiddenInput(loginPage.body, 'login')],
      ['username', 'alice'],
      ['password', PASSWORD],
    ]),
  });
  assert.equal(signedIn.statusCode, 303, signedIn.body);
  cookies = cookieJar(cookies, signedIn);
  const back = signedIn.headers.location as string;
  assert.equal(back, `/device?user_code=${userCode.replace('-', '')}`);

  const approval = await app.inject({ method: 'GET', url: back, headers: { cookie: cookies } });
  assert.equal(approval.statusCode, 200, approval.body);
  assertPageHeaders(approval);
  // DESIGN.md §3: a client's display_name (escaped) where it has one, else its client_id.
  assert.match(approval.body, /<strong>tv<\/strong>|<strong>Living-room &#60;console&#62;<\/strong>/);
  assert.match(approval.body, /<code>openid<\/code>/);
  assert.ok(approval.body.includes(userCode), 'the approval page shows the code to compare');
  assert.match(approval.body, /name="decision" value="approve"/);
  assert.match(approval.body, /name="decision" value="deny"/);

  const decided = await app.inject({
    method: 'POST',
    url: '/device',
    headers: { ...FORM, cookie: cookies },
    payload: form([['csrf', hiddenInput(approval.body, 'csrf')], ['user_code', hiddenInput(approval.body, 'user_code')], ['decision', decision]]),
  });
  assert.equal(decided.statusCode, 200, decided.body);
  assertPageHeaders(decided);
  return decided;
}

describe('POST /device_authorization', () => {
  let t: Awaited<ReturnType<typeof deviceApp>>;
  before(async () => {
    t = await deviceApp();
  });
  after(async () => t.app.close());

  test('answers RFC 8628 §3.2 fields; the store keeps only the digest of the device code', async () => {
    const response = await authorizeDevice(t.app, [['client_id', 'tv'], ['scope', 'openid profile']]);
    assert.equal(response.statusCode, 200, response.body);
    assert.equal(response.headers['cache-control'], 'no-store');
    const body = response.json();
    assert.deepEqual(Object.keys(body).sort(), ['device_code', 'expires_in', 'interval', 'user_code', 'verification_uri', 'verification_uri_complete']);
    assert.match(body.device_code, /^[A-Za-z0-9_-]{43}$/);
    assert.match(body.user_code, USER_CODE);
    assert.equal(body.verification_uri, `${ISSUER}/device`);
    assert.equal(body.verification_uri_complete, `${ISSUER}/device?user_code=${body.user_code}`);
    assert.equal(body.expires_in, 600);
    assert.equal(body.interval, 5);

    assert.equal(await t.store.findByDeviceCode(body.device_code), undefined);
    const record = await t.store.findByDeviceCode(digestOf(body.device_code));
    assert.ok(record);
    assert.equal(record.userCode, body.user_code.replace('-', ''));
    assert.deepEqual(record.scope, ['openid', 'profile']);
    assert.equal(record.status, 'pending');
    assert.equal(record.expiresAt, START + 600_000);
  });

  test('user codes differ between requests', async () => {
    const codes = new Set<string>();
    for (let i = 0; i < 20; i++) codes.add((await startDevice(t.app)).userCode);
    assert.equal(codes.size, 20);
  });

  test('any resource gives invalid_target with the exact text, an empty one too', async () => {
    for (const resource of [API, '', 'https://elsewhere.example']) {
      const response = await authorizeDevice(t.app, [['client_id', 'tv'], ['resource', resource]]);
      assertError(response, 400, 'invalid_target', REFUSED_BY_GRANT);
    }
    const twice = await authorizeDevice(t.app, [['client_id', 'tv'], ['resource', API], ['resource', API]]);
    assertError(twice, 400, 'invalid_target', REFUSED_BY_GRANT);
  });

  test('a client that is not a device client gets unauthorized_client', async () => {
    assertError(await authorizeDevice(t.app, [['client_id', 'spa']]), 400, 'unauthorized_client');
    const basic = `Basic ${Buffer.from('webapp:webapp-secret').toString('base64')}`;
    assertError(await authorizeDevice(t.app, [], { authorization: basic }), 400, 'unauthorized_client');
  });

  test('an unknown or missing client gets 401 invalid_client with a Basic challenge', async () => {
    for (const pairs of [[['client_id', 'nobody']], []] as [string, string][][]) {
      const response = await authorizeDevice(t.app, pairs);
      assertError(response, 401, 'invalid_client');
      assert.equal(response.headers['www-authenticate'], 'Basic realm="pinpoint"');
    }
  });

  test('a scope the client may not ask gives invalid_scope', async () => {
    assertError(await authorizeDevice(t.app, [['client_id', 'tv'], ['scope', 'openid ssh']]), 400, 'invalid_scope', 'scope "ssh" is not one this client may ask');
    assertError(await authorizeDevice(t.app, [['client_id', 'tv'], ['scope', 'open"id']]), 400, 'invalid_scope');
  });

  test('a repeated parameter gives invalid_request', async () => {
    const response = await authorizeDevice(t.app, [['client_id', 'tv'], ['scope', 'openid'], ['scope', 'openid']]);
    assertError(response, 400, 'invalid_request', 'scope appears more than once');
  });

  test('a body that is not form-encoded gets 415 as JSON', async () => {
    const response = await t.app.inject({ method: 'POST', url: '/device_authorization', headers: { 'content-type': 'application/json' }, payload: '{"client_id":"tv"}' });
    assertError(response, 415, 'invalid_request');
  });

  test('metadata lists the endpoint and the grant type', async () => {
    const metadata = (await t.app.inject({ url: '/.well-known/oauth-authorization-server' })).json();
    assert.equal(metadata.device_authorization_endpoint, `${ISSUER}/device_authorization`);
    assert.ok(metadata.grant_types_supported.includes(DEVICE_GRANT));
  });
});

describe('device code polling (RFC 8628 §3.4-3.5)', () => {
  let t: Awaited<ReturnType<typeof deviceApp>>;
  before(async () => {
    // A tight failure limit per client: waiting answers must not count as failures, or a polling device would be
    // locked out. The address's is looser, as each device authorization these tests start counts against it.
    t = await deviceApp({ limits: { clientFailures: 3, addressFailures: 20 } });
  });
  after(async () => t.app.close());

  test('pending, then slow_down when faster than the interval, which grows by 5 s each time', async () => {
    const { deviceCode } = await startDevice(t.app);
    const digest = digestOf(deviceCode);
    assertError(await poll(t.app, deviceCode), 400, 'authorization_pending');
    assert.equal((await t.store.findByDeviceCode(digest))?.lastPolledAt, START);

    t.advance(1);
    assertError(await poll(t.app, deviceCode), 400, 'slow_down');
    assert.equal((await t.store.findByDeviceCode(digest))?.intervalSeconds, 10);

    t.advance(6); // more than the old interval, less than the new one
    assertError(await poll(t.app, deviceCode), 400, 'slow_down');
    const record = await t.store.findByDeviceCode(digest);
    assert.equal(record?.intervalSeconds, 15);
    assert.equal(record?.lastPolledAt, START + 7000);

    t.advance(15);
    assertError(await poll(t.app, deviceCode), 400, 'authorization_pending');
    assert.equal((await t.store.findByDeviceCode(digest))?.intervalSeconds, 15);
  });

  test('a resource while polling gives the exact invalid_target text and writes nothing', async () => {
    const { deviceCode } = await startDevice(t.app);
    t.advance(30);
    const response = await poll(t.app, deviceCode, [['resource', API]]);
    assertError(response, 400, 'invalid_target', REFUSED_BY_GRANT);
    const record = await t.store.findByDeviceCode(digestOf(deviceCode));
    assert.equal(record?.lastPolledAt, undefined);
    // Checked first: even without a device_code.
    const bare = await postPublic(t.app, [['grant_type', DEVICE_GRANT], ['client_id', 'tv'], ['resource', API]]);
    assertError(bare, 400, 'invalid_target', REFUSED_BY_GRANT);
  });

  test('a repeated parameter while polling is invalid_request and writes nothing', async () => {
    const { deviceCode } = await startDevice(t.app);
    t.advance(30);
    assertError(await poll(t.app, deviceCode, [['device_code', deviceCode]]), 400, 'invalid_request', 'device_code appears more than once');
    assert.equal((await t.store.findByDeviceCode(digestOf(deviceCode)))?.lastPolledAt, undefined);
  });

  test('unknown device code, another client\'s, or a missing one', async () => {
    t.advance(60);
    assertError(await poll(t.app, 'x'.repeat(43)), 400, 'invalid_grant');
    const { deviceCode } = await startDevice(t.app, 'console');
    assertError(await poll(t.app, deviceCode), 400, 'invalid_grant');
    assertError(await postPublic(t.app, [['grant_type', DEVICE_GRANT], ['client_id', 'tv']]), 400, 'invalid_request', 'device_code is required');
  });

  test('a client that is not a device client gets unauthorized_client', async () => {
    t.advance(60);
    const { deviceCode } = await startDevice(t.app);
    assertError(await poll(t.app, deviceCode, [], 'spa'), 400, 'unauthorized_client');
  });

  test('an expired device code gives expired_token', async () => {
    const { deviceCode } = await startDevice(t.app);
    t.advance(601);
    assertError(await poll(t.app, deviceCode), 400, 'expired_token');
  });
});

describe('device flow through the /device pages', () => {
  let t: Awaited<ReturnType<typeof deviceApp>>;
  before(async () => {
    t = await deviceApp();
  });
  after(async () => t.app.close());

  test('approve -> tokens for the whole audience, once; refresh follows the refresh rule', async () => {
    const { deviceCode, userCode } = await startDevice(t.app, 'tv', 'openid profile');
    assertError(await poll(t.app, deviceCode), 400, 'authorization_pending');
    const done = await decideThroughPages(t.app, userCode, 'approve');
    assert.match(done.body, /Return to your device/);

    t.advance(5);
    const tokens = await poll(t.app, deviceCode);
    assert.equal(tokens.statusCode, 200, tokens.body);
    assert.equal(tokens.headers['cache-control'], 'no-store');
    const body = tokens.json();
    assert.equal(body.token_type, 'Bearer');
    assert.equal(body.scope, 'openid profile');
    assert.equal(typeof body.refresh_token, 'string');
    const jwks = createLocalJWKSet((await t.app.inject({ url: '/jwks' })).json());
    const { payload } = await jwtVerify(body.access_token, jwks, { issuer: ISSUER, audience: API, typ: 'at+jwt', currentDate: new Date(START) });
    assert.equal(payload.aud, API, 'one audience entry: aud is a string');
    assert.equal(payload.sub, 'alice');
    assert.equal(payload.client_id, 'tv');
    assert.equal(claimsOf(body.id_token).aud, 'tv');
    assert.equal(claimsOf(body.id_token).name, 'Alice Example');

    t.advance(5);
    assertError(await poll(t.app, deviceCode), 400, 'invalid_grant');

    const named = await refreshAsTv(t.app, body.refresh_token, [API]);
    assert.equal(named.statusCode, 200, named.body);
    assert.equal(claimsOf(named.json().access_token).aud, API);
    const outside = await refreshAsTv(t.app, named.json().refresh_token, ['https://files.example.org']);
    assertError(outside, 400, 'invalid_target', 'resource "https://files.example.org" is not one this client may ask a token for');
    // A refused refresh leaves the token usable (DESIGN.md §5).
    const again = await refreshAsTv(t.app, named.json().refresh_token, []);
    assert.equal(again.statusCode, 200, again.body);
    assert.equal(claimsOf(again.json().access_token).aud, API);
  });

  test('a client with several audience entries gets all of them, in config order', async () => {
    const { deviceCode, userCode } = await startDevice(t.app, 'console', 'openid');
    const decided = await decideThroughPages(t.app, userCode, 'approve');
    assert.ok(decided.body.includes('<strong>Living-room &#60;console&#62;</strong> is approved'), 'pages name the client by its display_name');
    t.advance(5);
    const tokens = await poll(t.app, deviceCode, [], 'console');
    assert.equal(tokens.statusCode, 200, tokens.body);
    assert.deepEqual(claimsOf(tokens.json().access_token).aud, AUDIENCE);
    assert.equal(tokens.json().refresh_token, undefined, 'console has no refresh_lifetime');
    assert.equal((await t.store.findByDeviceCode(digestOf(deviceCode)))?.status, 'redeemed');
  });

  test('offline_access (DESIGN.md §9): taken from a device client that gets refresh tokens, kept by its refreshes; refused from one that does not', async () => {
    const { deviceCode, userCode } = await startDevice(t.app, 'tv', 'openid offline_access');
    await decideThroughPages(t.app, userCode, 'approve');
    t.advance(5);
    const tokens = await poll(t.app, deviceCode);
    assert.equal(tokens.statusCode, 200, tokens.body);
    assert.equal(tokens.json().scope, 'openid offline_access');
    const sentBack = await postPublic(t.app, [['grant_type', 'refresh_token'], ['client_id', 'tv'], ['refresh_token', tokens.json().refresh_token], ['scope', 'openid offline_access']]);
    assert.equal(sentBack.statusCode, 200, sentBack.body);
    assert.equal(sentBack.json().scope, 'openid offline_access');
    assertError(await authorizeDevice(t.app, [['client_id', 'console'], ['scope', 'openid offline_access']]), 400, 'invalid_scope');
  });

  test('deny -> access_denied', async () => {
    const { deviceCode, userCode } = await startDevice(t.app);
    const done = await decideThroughPages(t.app, userCode, 'deny');
    assert.match(done.body, /denied/i);
    t.advance(5);
    assertError(await poll(t.app, deviceCode), 400, 'access_denied');
  });
});

describe('the /device pages', () => {
  let t: Awaited<ReturnType<typeof deviceApp>>;
  before(async () => {
    t = await deviceApp({ limits: { userCodeFailures: 3 } });
  });
  after(async () => t.app.close());

  test('GET prefills the one user_code input and escapes what it was given', async () => {
    const page = await t.app.inject({ url: `/device?user_code=${encodeURIComponent('"><script>alert(1)</script>')}` });
    assert.equal(page.statusCode, 200);
    assertPageHeaders(page);
    assert.equal((page.body.match(/name="user_code"/g) ?? []).length, 1);
    assert.ok(!page.body.includes('<script>'));
    assert.ok(page.body.includes('value="&#34;&#62;&#60;script&#62;alert(1)&#60;/script&#62;"'));
  });

  test('a POST without the CSRF token, or with another, is refused and starts no sign-in', async () => {
    const { deviceCode, userCode } = await startDevice(t.app);
    const entry = await t.app.inject({ url: '/device' });
    const cookies = cookieJar('', entry);
    for (const pairs of [[['user_code', userCode]], [['user_code', userCode], ['csrf', 'A'.repeat(43)]]] as [string, string][][]) {
      const response = await t.app.inject({ method: 'POST', url: '/device', headers: { ...FORM, cookie: cookies }, payload: form(pairs) });
      assert.equal(response.statusCode, 400);
      assertPageHeaders(response);
      assert.equal(response.headers.location, undefined);
      assert.match(response.body, /form expired/);
    }
    // A decision without CSRF changes nothing either.
    const decision = await t.app.inject({
      method: 'POST',
      url: '/device',
      headers: { ...FORM, cookie: cookies },
      payload: form([['user_code', userCode], ['decision', 'approve']]),
    });
    assert.equal(decision.statusCode, 400);
    assert.equal((await t.store.findByDeviceCode(digestOf(deviceCode)))?.status, 'pending');
  });

  test('a wrong code shows the form again (400) with the typed text escaped; too many per address give 429', async () => {
    const { userCode } = await startDevice(t.app);
    const entry = await t.app.inject({ url: '/device' });
    const cookies = cookieJar('', entry);
    const csrf = hiddenInput(entry.body, 'csrf');
    const submit = (typed: string, ip = '203.0.113.7'): Promise<LightMyRequestResponse> =>
      t.app.inject({ method: 'POST', url: '/device', remoteAddress: ip, headers: { ...FORM, cookie: cookies }, payload: form([['csrf', csrf], ['user_code', typed]]) });

    const first = await submit('<b>nope</b>');
    assert.equal(first.statusCode, 400);
    assertPageHeaders(first);
    assert.ok(first.body.includes('&#60;b&#62;nope&#60;/b&#62;'));
    assert.ok(!first.body.includes('<b>nope'));
    assert.equal((await submit('BCDF-GHJK')).statusCode, 400);
    assert.equal((await submit('ZZZZZZZZ')).statusCode, 400);

    const limited = await submit(userCode);
    assert.equal(limited.statusCode, 429);
    assert.ok(Number(limited.headers['retry-after']) > 0);
    assertPageHeaders(limited);
    // Another address is not affected.
    const elsewhere = await submit(userCode, '203.0.113.8');
    assert.equal(elsewhere.statusCode, 303);

    t.advance(15 * 60 + 1);
    const later = await submit(userCode.toLowerCase());
    assert.equal(later.statusCode, 400, 'the code expired meanwhile; the window reopened');
  });

  test('a non-form POST renders as a page', async () => {
    const response = await t.app.inject({ method: 'POST', url: '/device', headers: { 'content-type': 'application/json' }, payload: '{}' });
    assert.equal(response.statusCode, 415);
    assertPageHeaders(response);
  });
});

describe('device flow on a real SQLite file', () => {
  let t: Awaited<ReturnType<typeof deviceApp>>;
  let folder: string;
  before(async () => {
    folder = await mkdtemp(join(tmpdir(), 'pinpoint-device-'));
    t = await deviceApp({ store: new SqliteStore(join(folder, 'state.db')) });
  });
  after(async () => {
    await t.app.close();
    await t.store.close();
    await rm(folder, { recursive: true, force: true });
  });

  test('pending, slow_down, approve, tokens once, refresh', async () => {
    const { deviceCode, userCode } = await startDevice(t.app);
    assertError(await poll(t.app, deviceCode), 400, 'authorization_pending');
    assertError(await poll(t.app, deviceCode), 400, 'slow_down');
    assert.equal((await t.store.findByDeviceCode(digestOf(deviceCode)))?.intervalSeconds, 10);
    await decideThroughPages(t.app, userCode, 'approve');
    t.advance(10);
    const tokens = await poll(t.app, deviceCode);
    assert.equal(tokens.statusCode, 200, tokens.body);
    assert.equal(claimsOf(tokens.json().access_token).aud, API);
    assertError(await poll(t.app, deviceCode), 400, 'invalid_grant');
    const refreshed = await refreshAsTv(t.app, tokens.json().refresh_token, []);
    assert.equal(refreshed.statusCode, 200, refreshed.body);
    assert.equal(claimsOf(refreshed.json().access_token).aud, API);
  });
});

describe('what the device flow keeps counts against the address (DESIGN.md §4; an audit found both uncounted)', () => {
  test('device authorizations: at most address_failures kept per address, even all at once', async () => {
    const t = await deviceApp({ limits: { addressFailures: 4 } });
    try {
      const responses = await Promise.all(Array.from({ length: 12 }, () => authorizeDevice(t.app)));
      assert.deepEqual(responses.map((response) => response.statusCode).sort(), [...Array(4).fill(200), ...Array(8).fill(429)]);
    } finally {
      await t.app.close();
    }
  });

  test('POST /device with a good code and no session: each sign-in request it keeps counts, then the page says slow down', async () => {
    const t = await deviceApp({ limits: { addressFailures: 4 } });
    try {
      const { userCode } = await startDevice(t.app);
      const entry = await t.app.inject({ method: 'GET', url: '/device' });
      const cookies = cookieJar('', entry);
      const statuses: number[] = [];
      for (let i = 0; i < 6; i += 1) {
        const submitted = await t.app.inject({ method: 'POST', url: '/device', headers: { ...FORM, cookie: cookies }, payload: form([['csrf', hiddenInput(entry.body, 'csrf')], ['user_code', userCode]]) });
        statuses.push(submitted.statusCode);
      }
      // One of the four went to the device authorization itself.
      assert.deepEqual(statuses, [303, 303, 303, 429, 429, 429]);
    } finally {
      await t.app.close();
    }
  });
});

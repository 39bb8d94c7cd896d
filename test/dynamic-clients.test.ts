/**
 * Clients that are not in the config (DESIGN.md §9): registration (RFC 7591), loopback redirect URIs on any port,
 * default_scope, consent (§8), and the refresh reuse grace (§6) for clients that refresh in parallel.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { decodeJwt } from 'jose';
import type { Config, DynamicClientsConfig } from '../src/config/types.js';
import { KeyRing } from '../src/crypto/keys.js';
import { openStore } from '../src/store/open.js';
import type { Store } from '../src/store/types.js';
import { createPostgresDatabase, POSTGRES_SKIP_REASON, POSTGRES_URL, STORE_KINDS } from './helpers/databases.js';
import { authorizeUrl, cookieJar, form, hiddenInput, PASSWORD, pkce, testApp, testConfig, type TestApp } from './helpers/app.js';

const MCP = 'https://mcp.example.org/mcp';
const CALLBACK = 'http://127.0.0.1:33418/callback';

function dynamicConfig(overrides: Partial<DynamicClientsConfig> = {}): Promise<Config> {
  return testConfig({
    dynamicClients: {
      audience: [MCP],
      metadataDocuments: false,
      registration: 'open',
      scopes: ['openid', 'profile', 'mcp'],
      defaultScope: ['mcp'],
      refreshLifetimeMs: 720 * 3600_000,
      refreshReuseGraceMs: 10_000,
      allowPrivateAddresses: false,
      ...overrides,
    },
  });
}

const register = (app: FastifyInstance, body: unknown, headers: Record<string, string> = {}): Promise<LightMyRequestResponse> =>
  app.inject({ method: 'POST', url: '/register', headers: { 'content-type': 'application/json', ...headers }, payload: JSON.stringify(body) });

const registerMcpHost = async (app: FastifyInstance, extra: Record<string, unknown> = {}): Promise<string> => {
  const response = await register(app, { redirect_uris: [CALLBACK], client_name: 'Test <Host>', grant_types: ['authorization_code', 'refresh_token'], ...extra });
  assert.equal(response.statusCode, 201, response.body);
  return response.json().client_id as string;
};

/** A browser: /authorize on `port` -> sign-in (when needed) -> consent (when due, answering `decision`) -> the client's redirect. */
async function authorizeAsBrowser(
  app: FastifyInstance,
  clientId: string,
  options: { port?: number; scope?: string; decision?: 'allow' | 'deny'; cookies?: string; prompt?: string } = {},
): Promise<{ location: URL; cookies: string; verifier: string; sawConsent: boolean; consentPage?: string }> {
  const { verifier, challenge } = pkce();
  const redirect = `http://127.0.0.1:${options.port ?? 51000}/callback`;
  let cookies = options.cookies ?? '';
  let url = authorizeUrl([
    ['response_type', 'code'],
    ['client_id', clientId],
    ['redirect_uri', redirect],
    ['code_challenge', challenge],
    ['code_challenge_method', 'S256'],
    ['state', 'st-dyn'],
    ...(options.scope === undefined ? [] : [['scope', options.scope] as [string, string]]),
    ...(options.prompt === undefined ? [] : [['prompt', options.prompt] as [string, string]]),
  ]);
  let sawConsent = false;
  let consentPage: string | undefined;
  for (let hop = 0; hop < 10; hop++) {
    const response = await app.inject({ url, headers: { cookie: cookies } });
    cookies = cookieJar(cookies, response);
    if (response.statusCode === 303) {
      const next = String(response.headers.location);
      if (next.startsWith('http://127.0.0.1:')) return { location: new URL(next), cookies, verifier, sawConsent, ...(consentPage !== undefined && { consentPage }) };
      url = next;
      continue;
    }
    assert.equal(response.statusCode, 200, response.body);
    const action = /<form method="post" action="([^"]+)"/.exec(response.body)?.[1];
    const fields: [string, string][] =
      action === '/login'
        ? [['csrf', hiddenInput(response.body, 'csrf')], ['login', hiddenInput(response.body, 'login')], ['username', 'alice'], ['password', PASSWORD]]
        : [['csrf', hiddenInput(response.body, 'csrf')], ['login', hiddenInput(response.body, 'login')], ['decision', options.decision ?? 'allow']];
    if (action === '/consent') {
      sawConsent = true;
      consentPage = response.body;
    }
    const posted = await app.inject({ method: 'POST', url: String(action), headers: { cookie: cookies, 'content-type': 'application/x-www-form-urlencoded' }, payload: form(fields) });
    cookies = cookieJar(cookies, posted);
    assert.equal(posted.statusCode, 303, posted.body);
    const next = String(posted.headers.location);
    if (next.startsWith('http://127.0.0.1:')) return { location: new URL(next), cookies, verifier, sawConsent, ...(consentPage !== undefined && { consentPage }) };
    url = next;
  }
  throw new Error('no redirect to the client after 10 hops');
}

const exchange = (app: FastifyInstance, clientId: string, code: string, verifier: string, port = 51000): Promise<LightMyRequestResponse> =>
  app.inject({
    method: 'POST',
    url: '/token',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    payload: form([['grant_type', 'authorization_code'], ['client_id', clientId], ['code', code], ['redirect_uri', `http://127.0.0.1:${port}/callback`], ['code_verifier', verifier]]),
  });

const refreshAs = (app: FastifyInstance, clientId: string, token: string): Promise<LightMyRequestResponse> =>
  app.inject({
    method: 'POST',
    url: '/token',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    payload: form([['grant_type', 'refresh_token'], ['client_id', clientId], ['refresh_token', token]]),
  });

describe('POST /register (RFC 7591)', () => {
  let t: TestApp;
  before(async () => {
    t = await testApp({ config: await dynamicConfig() });
  });
  after(async () => t.app.close());

  test('a public client: 201 with the stored metadata, a client_id and client_id_issued_at, no secret', async () => {
    const response = await register(t.app, { redirect_uris: [CALLBACK, 'cursor://anysphere.cursor-mcp/oauth/callback'], client_name: 'Cursor', grant_types: ['authorization_code', 'refresh_token'] });
    assert.equal(response.statusCode, 201, response.body);
    const body = response.json();
    assert.match(body.client_id, /^dyn_/);
    assert.equal(typeof body.client_id_issued_at, 'number');
    assert.deepEqual(body.redirect_uris, [CALLBACK, 'cursor://anysphere.cursor-mcp/oauth/callback']);
    assert.equal(body.token_endpoint_auth_method, 'none');
    assert.equal(body.client_secret, undefined);
    assert.equal(response.headers['cache-control'], 'no-store');
  });

  test('a confidential registration returns a secret that authenticates at /token (client_secret_post)', async () => {
    const response = await register(t.app, { redirect_uris: ['https://app.example.org/cb'], token_endpoint_auth_method: 'client_secret_post' });
    assert.equal(response.statusCode, 201, response.body);
    const { client_id: clientId, client_secret: secret } = response.json();
    assert.equal(typeof secret, 'string');
    const wrong = await t.app.inject({ method: 'POST', url: '/token', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: form([['grant_type', 'refresh_token'], ['client_id', clientId], ['client_secret', 'nope'], ['refresh_token', 'x.y']]) });
    assert.equal(wrong.statusCode, 401);
    const right = await t.app.inject({ method: 'POST', url: '/token', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: form([['grant_type', 'authorization_code'], ['client_id', clientId], ['client_secret', secret], ['code', 'x'], ['redirect_uri', 'https://app.example.org/cb'], ['code_verifier', 'v'.repeat(43)]]) });
    assert.equal(right.json().error, 'invalid_grant', 'authenticated; only the code is wrong');
  });

  test('refused registrations: 400 JSON invalid_redirect_uri / invalid_client_metadata, nothing stored', async () => {
    const cases: [unknown, string][] = [
      [{}, 'invalid_redirect_uri'],
      [{ redirect_uris: [] }, 'invalid_redirect_uri'],
      [{ redirect_uris: ['javascript:alert(1)'] }, 'invalid_redirect_uri'],
      [{ redirect_uris: ['data:text/html,hi'] }, 'invalid_redirect_uri'],
      [{ redirect_uris: ['file:///etc/passwd'] }, 'invalid_redirect_uri'],
      // Never a stranger's redirect target: the error redirects of /authorize would launch them from this origin.
      [{ redirect_uris: ['ms-msdt:/id PCWDiagnostic'] }, 'invalid_redirect_uri'],
      [{ redirect_uris: ['search-ms:query=invoice&crumb=location:\\\\evil.example\\share'] }, 'invalid_redirect_uri'],
      [{ redirect_uris: ['http://app.example.org/cb'] }, 'invalid_redirect_uri'],
      [{ redirect_uris: ['https://app.example.org/cb#frag'] }, 'invalid_redirect_uri'],
      [{ redirect_uris: [CALLBACK], application_type: 'web' }, 'invalid_redirect_uri'],
      [{ redirect_uris: [CALLBACK], scope: 'openid admin' }, 'invalid_client_metadata'],
      [{ redirect_uris: [CALLBACK], token_endpoint_auth_method: 'private_key_jwt' }, 'invalid_client_metadata'],
      [{ redirect_uris: [CALLBACK], grant_types: ['client_credentials'] }, 'invalid_client_metadata'],
      [[1, 2], 'invalid_client_metadata'],
      // RFC 3986: what a browser's URL parser would quietly turn into another URL.
      [{ redirect_uris: ['https://app.example.org/cb\n'] }, 'invalid_redirect_uri'],
      [{ redirect_uris: ['https://app.example.org/c\tb'] }, 'invalid_redirect_uri'],
      [{ redirect_uris: ['https://app.example.org/cb '] }, 'invalid_redirect_uri'],
      [{ redirect_uris: ['https://app.example.org\\@evil.example/cb'] }, 'invalid_redirect_uri'],
      [{ redirect_uris: ['https:///cb'] }, 'invalid_redirect_uri'],
      [{ redirect_uris: [CALLBACK], grant_types: ['refresh_token'] }, 'invalid_client_metadata'],
    ];
    for (const [body, error] of cases) {
      const response = await register(t.app, body);
      assert.equal(response.statusCode, 400, JSON.stringify(body));
      assert.equal(response.json().error, error, JSON.stringify(body));
      assert.equal(typeof response.json().error_description, 'string');
    }
    const notJson = await t.app.inject({ method: 'POST', url: '/register', headers: { 'content-type': 'application/json' }, payload: '{not json' });
    assert.equal(notJson.statusCode, 400);
    const form415 = await t.app.inject({ method: 'POST', url: '/register', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: 'redirect_uris=x' });
    assert.equal(form415.statusCode, 415, form415.body);
    assert.equal(form415.json().error, 'invalid_client_metadata');
  });

  test('exact descriptions: over 20 redirect URIs, a grant list without authorization_code, a URI with a space', async () => {
    const many = await register(t.app, { redirect_uris: Array.from({ length: 21 }, (_, i) => `https://app.example.org/cb${i}`) });
    assert.deepEqual(many.json(), { error: 'invalid_redirect_uri', error_description: 'redirect_uris: redirect_uris may hold at most 20 URIs' });
    const missing = await register(t.app, { redirect_uris: 'https://app.example.org/cb' });
    assert.deepEqual(missing.json(), { error: 'invalid_redirect_uri', error_description: 'redirect_uris: redirect_uris is required: a list of redirect URIs' });
    const refreshOnly = await register(t.app, { redirect_uris: [CALLBACK], grant_types: ['refresh_token'] });
    assert.deepEqual(refreshOnly.json(), { error: 'invalid_client_metadata', error_description: 'grant_types must include authorization_code (the code response type needs it)' });
    const spaced = await register(t.app, { redirect_uris: ['https://app.example.org/cb '] });
    assert.match(spaced.json().error_description, /^"https:\/\/app\.example\.org\/cb " holds a character a URI cannot/);
    const nativeScheme = await register(t.app, { redirect_uris: ['com.example.app:///oauth/cb', 'com.example.app:/oauth/cb'] });
    assert.equal(nativeScheme.statusCode, 201, 'a private-use scheme may have an empty authority');
  });

  test('grant_types are registered once each; offline_access is kept for a client that gets refresh tokens, dropped (and answered so) for one that does not', async () => {
    const twice = await register(t.app, { redirect_uris: [CALLBACK], grant_types: ['authorization_code', 'authorization_code'] });
    assert.equal(twice.statusCode, 201, twice.body);
    assert.deepEqual(twice.json().grant_types, ['authorization_code']);
    // VS Code asks for every grant type the metadata lists: what a dynamic client cannot have is left out, and answered so.
    const vscode = await register(t.app, { redirect_uris: [CALLBACK, 'https://vscode.dev/redirect'], grant_types: ['authorization_code', 'refresh_token', 'urn:ietf:params:oauth:grant-type:device_code'], token_endpoint_auth_method: 'none', client_name: 'Visual Studio Code' });
    assert.equal(vscode.statusCode, 201, vscode.body);
    assert.deepEqual(vscode.json().grant_types, ['authorization_code', 'refresh_token']);
    const refreshing = await register(t.app, { redirect_uris: [CALLBACK], grant_types: ['authorization_code', 'refresh_token'], scope: 'mcp offline_access' });
    assert.equal(refreshing.json().scope, 'mcp offline_access');
    const notRefreshing = await register(t.app, { redirect_uris: [CALLBACK], scope: 'mcp offline_access' });
    assert.equal(notRefreshing.statusCode, 201, notRefreshing.body);
    assert.equal(notRefreshing.json().scope, 'mcp', 'RFC 7591 §3.2.1: the scope registered, without what it could never use');
    const onlyOffline = await register(t.app, { redirect_uris: [CALLBACK], scope: 'offline_access' });
    assert.equal(onlyOffline.json().scope, undefined);
    // The registered scope works as the request's default: the client is usable.
    const { challenge } = pkce();
    const asked = await t.app.inject({
      url: `/authorize?${new URLSearchParams({ response_type: 'code', client_id: notRefreshing.json().client_id, redirect_uri: CALLBACK, code_challenge: challenge, code_challenge_method: 'S256', state: 's' })}`,
    });
    assert.equal(asked.statusCode, 303, asked.body);
    assert.doesNotMatch(String(asked.headers.location), /error=/);
  });

  test('answers CORS from any origin', async () => {
    const preflight = await t.app.inject({ method: 'OPTIONS', url: '/register', headers: { origin: 'https://inspector.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' } });
    assert.equal(preflight.headers['access-control-allow-origin'], '*');
    const response = await register(t.app, { redirect_uris: [CALLBACK] }, { origin: 'https://inspector.example' });
    assert.equal(response.headers['access-control-allow-origin'], '*');
  });

  test('metadata names the registration endpoint and offline_access', async () => {
    const metadata = (await t.app.inject({ url: '/.well-known/oauth-authorization-server' })).json();
    assert.equal(metadata.registration_endpoint, 'http://127.0.0.1:8080/register');
    assert.ok(metadata.scopes_supported.includes('mcp') && metadata.scopes_supported.includes('offline_access'));
    assert.deepEqual(metadata.prompt_values_supported, ['none', 'login', 'consent']);
  });
});

describe("CORS for a dynamic client's page at every process, whichever saw it first (an interop audit: the MCP SDK in a browser)", () => {
  const WEB = 'https://web.example.org';
  const tokenRequest = (app: FastifyInstance, origin: string, pairs: [string, string][]): Promise<LightMyRequestResponse> =>
    app.inject({ method: 'POST', url: '/token', headers: { 'content-type': 'application/x-www-form-urlencoded', origin }, payload: form(pairs) });

  test("a code exchanged, and a token refreshed, at a process that never saw the client answer its redirect origin's page; no other origin's", async () => {
    const first = await testApp({ config: await dynamicConfig() });
    let store = first.store;
    let host: string;
    let signedIn: Awaited<ReturnType<typeof authorizeAsBrowser>>;
    try {
      host = await registerMcpHost(first.app, { redirect_uris: [CALLBACK, `${WEB}/cb`] });
      signedIn = await authorizeAsBrowser(first.app, host);
    } finally {
      await first.app.close();
    }
    // Another worker (or the same server after a restart): the same store, nothing remembered in memory.
    const other = await testApp({ config: await dynamicConfig(), store });
    let refreshToken: string;
    try {
      const code = signedIn.location.searchParams.get('code') ?? '';
      const pairs: [string, string][] = [['grant_type', 'authorization_code'], ['client_id', host], ['code', code], ['redirect_uri', 'http://127.0.0.1:51000/callback'], ['code_verifier', signedIn.verifier]];
      const foreign = await tokenRequest(other.app, 'https://evil.example', [...pairs.slice(0, 2), ['code', 'not-a-code'], ...pairs.slice(3)]);
      assert.equal(foreign.headers['access-control-allow-origin'], undefined, 'another origin naming the client');
      const exchanged = await tokenRequest(other.app, WEB, pairs);
      assert.equal(exchanged.statusCode, 200, exchanged.body);
      assert.equal(exchanged.headers['access-control-allow-origin'], WEB);
      assert.match(String(exchanged.headers['access-control-expose-headers']), /WWW-Authenticate/);
      assert.match(String(exchanged.headers.vary), /Origin/);
      refreshToken = exchanged.json().refresh_token as string;
    } finally {
      await other.app.close();
    }
    store = other.store;
    const restarted = await testApp({ config: await dynamicConfig(), store });
    try {
      const refreshed = await tokenRequest(restarted.app, WEB, [['grant_type', 'refresh_token'], ['client_id', host], ['refresh_token', refreshToken]]);
      assert.equal(refreshed.statusCode, 200, refreshed.body);
      assert.equal(refreshed.headers['access-control-allow-origin'], WEB);
      // A refusal the page must read is readable too.
      const refused = await tokenRequest(restarted.app, WEB, [['grant_type', 'refresh_token'], ['client_id', host], ['refresh_token', 'not-a-token']]);
      assert.equal(refused.json().error, 'invalid_grant');
      assert.equal(refused.headers['access-control-allow-origin'], WEB);
    } finally {
      await restarted.app.close();
    }
  });
});

describe('registration modes and limits', () => {
  test('"token" needs the initial access token; "off" has no endpoint; registrations count against the address', async () => {
    const guarded = await testApp({ config: await dynamicConfig({ registration: 'token', registrationToken: 'initial-access-token' }) });
    try {
      assert.equal((await register(guarded.app, { redirect_uris: [CALLBACK] })).statusCode, 401);
      assert.equal((await register(guarded.app, { redirect_uris: [CALLBACK] }, { authorization: 'Bearer wrong' })).statusCode, 401);
      assert.equal((await register(guarded.app, { redirect_uris: [CALLBACK] }, { authorization: 'Bearer initial-access-token' })).statusCode, 201);
    } finally {
      await guarded.app.close();
    }
    const off = await testApp({ config: await dynamicConfig({ registration: 'off' }) });
    try {
      assert.equal((await register(off.app, { redirect_uris: [CALLBACK] })).statusCode, 404);
      assert.equal((await off.app.inject({ url: '/.well-known/oauth-authorization-server' })).json().registration_endpoint, undefined);
    } finally {
      await off.app.close();
    }
    const limited = await testApp({ config: await dynamicConfig(), limits: { addressFailures: 3 } });
    try {
      for (let i = 0; i < 3; i++) assert.equal((await register(limited.app, { redirect_uris: [CALLBACK] })).statusCode, 201);
      assert.equal((await register(limited.app, { redirect_uris: [CALLBACK] })).statusCode, 429);
    } finally {
      await limited.app.close();
    }
  });
});

describe('a registered MCP host signs a person in', () => {
  let t: TestApp;
  let clientId: string;
  before(async () => {
    t = await testApp({ config: await dynamicConfig() });
    clientId = await registerMcpHost(t.app);
  });
  after(async () => t.app.close());

  test('any loopback port, default scope, consent naming the client, then tokens for the MCP server', async () => {
    const first = await authorizeAsBrowser(t.app, clientId, { port: 40001 });
    assert.ok(first.sawConsent, 'a dynamic client gets the consent page');
    assert.match(first.consentPage ?? '', /Test &#60;Host&#62;/, 'the registered name, escaped');
    assert.match(first.consentPage ?? '', /127\.0\.0\.1:40001/, 'the host the answer goes back to');
    assert.match(first.consentPage ?? '', /<code>mcp<\/code>/);
    assert.match(first.consentPage ?? '', /https:\/\/mcp\.example\.org\/mcp/);
    assert.equal(first.location.port, '40001');
    const tokens = await exchange(t.app, clientId, first.location.searchParams.get('code') ?? '', first.verifier, 40001);
    assert.equal(tokens.statusCode, 200, tokens.body);
    assert.equal(tokens.json().scope, 'mcp');
    assert.equal(decodeJwt(tokens.json().access_token as string).aud, MCP);
    assert.equal(typeof tokens.json().refresh_token, 'string');

    // Remembered: no consent the second time, on another port.
    const second = await authorizeAsBrowser(t.app, clientId, { port: 40002, cookies: first.cookies });
    assert.equal(second.sawConsent, false);
    assert.ok(second.location.searchParams.get('code'));
    // Asking more, or prompt=consent: asked again.
    assert.equal((await authorizeAsBrowser(t.app, clientId, { port: 40003, cookies: first.cookies, scope: 'mcp openid' })).sawConsent, true);
    assert.equal((await authorizeAsBrowser(t.app, clientId, { port: 40004, cookies: first.cookies, prompt: 'consent' })).sawConsent, true);
    // offline_access (added by the MCP SDK) is accepted and asks for nothing more.
    const offline = await authorizeAsBrowser(t.app, clientId, { port: 40005, cookies: first.cookies, scope: 'mcp offline_access' });
    assert.ok(offline.location.searchParams.get('code'), offline.location.href);
  });

  test('deny: access_denied back to the client, with state and iss', async () => {
    const other = await registerMcpHost(t.app);
    const denied = await authorizeAsBrowser(t.app, other, { decision: 'deny' });
    assert.equal(denied.location.searchParams.get('error'), 'access_denied');
    assert.equal(denied.location.searchParams.get('state'), 'st-dyn');
    assert.equal(denied.location.searchParams.get('iss'), 'http://127.0.0.1:8080');
  });

  test('a redirect URI that is not registered (other path) is an error page, never a redirect', async () => {
    const response = await t.app.inject({
      url: authorizeUrl([['response_type', 'code'], ['client_id', clientId], ['redirect_uri', 'http://127.0.0.1:40001/other'], ['code_challenge', pkce().challenge], ['code_challenge_method', 'S256']]),
    });
    assert.equal(response.statusCode, 400);
    assert.equal(response.headers.location, undefined);
  });

  test("CORS knows a dynamic client's https origin once a person authorized it, not because someone named it (an audit: strangers' lookups pushed real origins out)", async () => {
    const WEB = 'https://web.example.org';
    const browserClient = await registerMcpHost(t.app, { redirect_uris: [CALLBACK, `${WEB}/cb`] });
    const preflight = (): Promise<LightMyRequestResponse> =>
      t.app.inject({ method: 'OPTIONS', url: '/token', headers: { origin: WEB, 'access-control-request-method': 'POST' } });
    assert.equal((await preflight()).headers['access-control-allow-origin'], undefined, 'registered, never used');
    // A stranger naming the client (here /revoke answers 200 to anything) looks it up, and teaches CORS nothing.
    const named = await t.app.inject({ method: 'POST', url: '/revoke', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: form([['client_id', browserClient], ['token', 'x']]) });
    assert.equal(named.statusCode, 200, named.body);
    assert.equal((await preflight()).headers['access-control-allow-origin'], undefined, 'named by a stranger');
    const denied = await authorizeAsBrowser(t.app, browserClient, { port: 40011, decision: 'deny' });
    assert.equal(denied.location.searchParams.get('error'), 'access_denied');
    assert.equal((await preflight()).headers['access-control-allow-origin'], undefined, 'refused by the person');
    const allowed = await authorizeAsBrowser(t.app, browserClient, { port: 40012 });
    assert.ok(allowed.location.searchParams.get('code'));
    assert.equal((await preflight()).headers['access-control-allow-origin'], WEB, 'authorized: its page may now exchange the code');
  });

  test('refresh reuse grace: the rotated token again within the grace gets a sibling; the grant stays alive; after the grace, reuse revokes', async () => {
    let now = Date.now();
    const clock = await testApp({ config: await dynamicConfig(), now: () => now });
    try {
      const host = await registerMcpHost(clock.app);
      const signedIn = await authorizeAsBrowser(clock.app, host);
      const first = (await exchange(clock.app, host, signedIn.location.searchParams.get('code') ?? '', signedIn.verifier)).json().refresh_token as string;
      const rotated = await refreshAs(clock.app, host, first);
      assert.equal(rotated.statusCode, 200);
      now += 5_000;
      const again = await refreshAs(clock.app, host, first);
      assert.equal(again.statusCode, 200, `within the grace: ${again.body}`);
      assert.equal((await refreshAs(clock.app, host, rotated.json().refresh_token as string)).statusCode, 200, 'the sibling before it still works');
      assert.equal((await refreshAs(clock.app, host, again.json().refresh_token as string)).statusCode, 200);
      now += 20_000;
      assert.equal((await refreshAs(clock.app, host, first)).json().error, 'invalid_grant', 'after the grace: reuse');
      assert.equal((await refreshAs(clock.app, host, again.json().refresh_token as string)).json().error, 'invalid_grant', 'and the grant is revoked');
    } finally {
      await clock.app.close();
    }
  });
});

/** Ten parallel refreshes of one token by a client with a grace: every one succeeds and the grant lives on. */
async function parallelRefreshes(apps: readonly FastifyInstance[]): Promise<void> {
  const [first] = apps as [FastifyInstance];
  const host = await registerMcpHost(first);
  const signedIn = await authorizeAsBrowser(first, host);
  const token = (await exchange(first, host, signedIn.location.searchParams.get('code') ?? '', signedIn.verifier)).json().refresh_token as string;
  const answers = await Promise.all(Array.from({ length: 10 }, (_, i) => refreshAs(apps[i % apps.length] as FastifyInstance, host, token)));
  assert.deepEqual(answers.map((answer) => answer.statusCode), Array(10).fill(200), answers.map((answer) => answer.body).join('\n'));
  const fresh = answers.map((answer) => answer.json().refresh_token as string);
  assert.equal(new Set(fresh).size, 10, 'ten distinct tokens');
  for (const sibling of fresh.slice(0, 3)) assert.equal((await refreshAs(first, host, sibling)).statusCode, 200, 'no grant lost');
}

for (const kind of STORE_KINDS.filter((candidate) => candidate.name !== 'postgres')) {
  describe(`parallel refreshes within the reuse grace on the ${kind.name} store`, { skip: kind.skip }, () => {
    test('ten at once: ten successes, the grant alive', async () => {
      const opened = await kind.open();
      const t = await testApp({ store: opened.store, config: await dynamicConfig() });
      try {
        await parallelRefreshes([t.app]);
      } finally {
        await t.app.close();
        await opened.store.close();
        await opened.cleanup();
      }
    });
  });
}

describe('parallel refreshes within the reuse grace on two instances sharing PostgreSQL', { skip: POSTGRES_URL === undefined ? POSTGRES_SKIP_REASON : undefined }, () => {
  test('ten at once, split across the instances: ten successes, the grant alive', async () => {
    const database = await createPostgresDatabase();
    const stores: Store[] = [];
    const apps: TestApp[] = [];
    try {
      for (let i = 0; i < 2; i++) {
        const store = await openStore({ kind: 'postgres', url: database.url, schema: 'public' });
        stores.push(store);
        apps.push(await testApp({ store, keys: await KeyRing.open(store), config: await dynamicConfig() }));
      }
      await parallelRefreshes(apps.map((t) => t.app));
    } finally {
      for (const t of apps) await t.app.close();
      for (const store of stores) await store.close();
      await database.drop();
    }
  });
});

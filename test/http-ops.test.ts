/** Operations through HTTP: metadata, JWKS, CORS, health, a base_url with a path, and what the logs hold (DESIGN.md §4, §7). */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify';
import { createLocalJWKSet, jwtVerify, type JSONWebKeySet } from 'jose';
import { createLogger } from '../src/log.js';
import { MemoryStore } from '../src/store/memory.js';
import {
  AUDIENCE,
  ISSUER,
  PASSWORD,
  REDIRECT,
  SECRET,
  authorizeUrl,
  basic,
  claimsOf,
  cookieJar,
  exchangeCode,
  form,
  hiddenInput,
  pkce,
  postToken,
  refresh,
  signInForCode,
  testApp,
  testConfig,
  type TestApp,
  resumeAuthorization,
  webappAuthorizeUrl,
} from './helpers/app.js';

const API = AUDIENCE[0] as string;
const FILES = AUDIENCE[1] as string;
const CLIENT_ORIGIN = new URL(REDIRECT).origin;
const OTHER_ORIGIN = 'https://evil.example';

function assertMetadata(response: LightMyRequestResponse, issuer: string): void {
  assert.equal(response.statusCode, 200, response.body);
  assert.match(String(response.headers['content-type']), /^application\/json/);
  const metadata = response.json() as Record<string, unknown>;
  assert.equal(metadata.issuer, issuer);
  assert.equal(metadata.authorization_endpoint, `${issuer}/authorize`);
  assert.equal(metadata.token_endpoint, `${issuer}/token`);
  assert.equal(metadata.userinfo_endpoint, `${issuer}/userinfo`);
  assert.equal(metadata.jwks_uri, `${issuer}/jwks`);
  assert.deepEqual(metadata.code_challenge_methods_supported, ['S256']);
  assert.deepEqual(metadata.token_endpoint_auth_methods_supported, ['client_secret_basic', 'client_secret_post', 'none', 'private_key_jwt']);
  assert.equal(metadata.authorization_response_iss_parameter_supported, true);
  assert.deepEqual(metadata.response_types_supported, ['code']);
  for (const grantType of ['authorization_code', 'refresh_token', 'client_credentials']) {
    assert.ok((metadata.grant_types_supported as string[]).includes(grantType), grantType);
  }
  assert.ok((metadata.scopes_supported as string[]).includes('openid'));
  assert.deepEqual(metadata.id_token_signing_alg_values_supported, ['RS256', 'ES256']);
  assert.ok(Array.isArray(metadata.subject_types_supported));
}

describe('metadata and JWKS', () => {
  let t: TestApp;
  before(async () => {
    t = await testApp();
  });
  after(async () => t.app.close());

  test('metadata at both well-known URLs, the same document', async () => {
    const openid = await t.app.inject({ url: '/.well-known/openid-configuration' });
    const oauth = await t.app.inject({ url: '/.well-known/oauth-authorization-server' });
    assertMetadata(openid, ISSUER);
    assertMetadata(oauth, ISSUER);
    assert.deepEqual(openid.json(), oauth.json());
  });

  test('every endpoint the metadata lists is served', async () => {
    const metadata = (await t.app.inject({ url: '/.well-known/openid-configuration' })).json() as Record<string, string>;
    const fields = ['authorization_endpoint', 'token_endpoint', 'userinfo_endpoint', 'jwks_uri'];
    if ('device_authorization_endpoint' in metadata) fields.push('device_authorization_endpoint');
    for (const field of fields) {
      const path = new URL(metadata[field] as string).pathname;
      const post = field === 'token_endpoint' || field === 'device_authorization_endpoint';
      const response = await t.app.inject({ method: post ? 'POST' : 'GET', url: path });
      assert.notEqual(response.statusCode, 404, `${field} ${path}`);
    }
  });

  test('/jwks: an ES256 and an RS256 public key, each with a kid, no private parts', async () => {
    const response = await t.app.inject({ url: '/jwks' });
    assert.equal(response.statusCode, 200);
    const { keys } = response.json() as { keys: Record<string, unknown>[] };
    const es = keys.find((key) => key.alg === 'ES256');
    const rs = keys.find((key) => key.alg === 'RS256');
    assert.ok(es && rs, JSON.stringify(keys));
    assert.equal(es.kty, 'EC');
    assert.equal(es.crv, 'P-256');
    assert.equal(rs.kty, 'RSA');
    for (const key of keys) {
      assert.equal(typeof key.kid, 'string');
      assert.ok((key.kid as string).length > 0);
      for (const secret of ['d', 'p', 'q', 'dp', 'dq', 'qi']) assert.equal(key[secret], undefined, `no ${secret}`);
    }
    assert.equal(new Set(keys.map((key) => key.kid)).size, keys.length, 'distinct kids');
  });

  test('tokens name a kid of /jwks', async () => {
    const { keys } = (await t.app.inject({ url: '/jwks' })).json() as { keys: { kid: string }[] };
    const body = (await postToken(t.app, [['grant_type', 'client_credentials']], basic('service', SECRET))).json();
    const kid = JSON.parse(Buffer.from(body.access_token.split('.')[0], 'base64url').toString()).kid;
    assert.ok(keys.some((key) => key.kid === kid));
  });
});

describe('CORS', () => {
  let t: TestApp;
  before(async () => {
    t = await testApp();
  });
  after(async () => t.app.close());

  test('metadata and /jwks answer any origin with *, without credentials', async () => {
    for (const url of ['/.well-known/openid-configuration', '/.well-known/oauth-authorization-server', '/jwks']) {
      const response = await t.app.inject({ url, headers: { origin: OTHER_ORIGIN } });
      assert.equal(response.statusCode, 200);
      assert.equal(response.headers['access-control-allow-origin'], '*', url);
      assert.equal(response.headers['access-control-allow-credentials'], undefined);
    }
  });

  test('/token answers the origin of a client redirect URI, not another origin', async () => {
    const allowed = await t.app.inject({
      method: 'POST',
      url: '/token',
      headers: { origin: CLIENT_ORIGIN, 'content-type': 'application/x-www-form-urlencoded', authorization: basic('service', SECRET) },
      payload: 'grant_type=client_credentials',
    });
    assert.equal(allowed.statusCode, 200);
    assert.equal(allowed.headers['access-control-allow-origin'], CLIENT_ORIGIN);
    assert.match(String(allowed.headers.vary), /Origin/i);
    assert.equal(allowed.headers['access-control-allow-credentials'], undefined);

    const refused = await t.app.inject({
      method: 'POST',
      url: '/token',
      headers: { origin: OTHER_ORIGIN, 'content-type': 'application/x-www-form-urlencoded', authorization: basic('service', SECRET) },
      payload: 'grant_type=client_credentials',
    });
    assert.equal(refused.headers['access-control-allow-origin'], undefined);
  });

  test('an error answer at /token carries the CORS header too (a browser client can read the error)', async () => {
    const response = await t.app.inject({
      method: 'POST',
      url: '/token',
      headers: { origin: CLIENT_ORIGIN, 'content-type': 'application/x-www-form-urlencoded' },
      payload: 'grant_type=nope',
    });
    assert.equal(response.statusCode, 400);
    assert.equal(response.headers['access-control-allow-origin'], CLIENT_ORIGIN);
  });

  test('/userinfo answers a client origin only', async () => {
    const good = await t.app.inject({ url: '/userinfo', headers: { origin: CLIENT_ORIGIN } });
    assert.equal(good.headers['access-control-allow-origin'], CLIENT_ORIGIN);
    const bad = await t.app.inject({ url: '/userinfo', headers: { origin: OTHER_ORIGIN } });
    assert.equal(bad.headers['access-control-allow-origin'], undefined);
  });

  test('preflight OPTIONS /token: allowed for a client origin, not for another', async () => {
    const allowed = await t.app.inject({
      method: 'OPTIONS',
      url: '/token',
      headers: { origin: CLIENT_ORIGIN, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' },
    });
    assert.equal(allowed.statusCode, 204);
    assert.equal(allowed.headers['access-control-allow-origin'], CLIENT_ORIGIN);
    assert.match(String(allowed.headers['access-control-allow-methods']), /POST/);
    assert.match(String(allowed.headers['access-control-allow-headers']), /authorization/i);
    assert.match(String(allowed.headers['access-control-allow-headers']), /content-type/i);

    const refused = await t.app.inject({
      method: 'OPTIONS',
      url: '/token',
      headers: { origin: OTHER_ORIGIN, 'access-control-request-method': 'POST' },
    });
    assert.equal(refused.headers['access-control-allow-origin'], undefined);
    assert.equal(refused.headers['access-control-allow-methods'], undefined);
  });

  test('scripts may read WWW-Authenticate and Retry-After; a script may send a DPoP proof (DESIGN.md §13)', async () => {
    const refused = await t.app.inject({
      method: 'POST',
      url: '/token',
      headers: { origin: CLIENT_ORIGIN, 'content-type': 'application/x-www-form-urlencoded', authorization: basic('service', 'wrong') },
      payload: 'grant_type=client_credentials',
    });
    assert.equal(refused.statusCode, 401);
    const exposed = String(refused.headers['access-control-expose-headers']).toLowerCase();
    assert.ok(exposed.includes('www-authenticate') && exposed.includes('retry-after'), exposed);
    const preflight = await t.app.inject({
      method: 'OPTIONS',
      url: '/token',
      headers: { origin: CLIENT_ORIGIN, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization' },
    });
    assert.match(String(preflight.headers['access-control-allow-headers']), /\bdpop\b/i);
  });

  test('preflight OPTIONS /jwks and metadata: any origin, and any request header (the MCP SDK sends MCP-Protocol-Version)', async () => {
    for (const url of ['/jwks', '/.well-known/openid-configuration', '/.well-known/oauth-authorization-server']) {
      const response = await t.app.inject({
        method: 'OPTIONS',
        url,
        headers: { origin: OTHER_ORIGIN, 'access-control-request-method': 'GET', 'access-control-request-headers': 'mcp-protocol-version' },
      });
      assert.equal(response.headers['access-control-allow-origin'], '*', url);
      assert.match(String(response.headers['access-control-allow-headers']), /mcp-protocol-version/i, url);
    }
  });

  test('a request without Origin (a server, not a browser) gets no CORS headers, and Vary: Origin for caches', async () => {
    for (const url of ['/jwks', '/.well-known/openid-configuration']) {
      const response = await t.app.inject({ url });
      assert.equal(response.statusCode, 200);
      assert.equal(response.headers['access-control-allow-origin'], undefined, url);
      assert.match(String(response.headers.vary), /Origin/i, url);
    }
    const token = await postToken(t.app, [['grant_type', 'client_credentials']], basic('service', SECRET));
    assert.equal(token.statusCode, 200);
    assert.equal(token.headers['access-control-allow-origin'], undefined);
    assert.equal(token.headers['access-control-expose-headers'], undefined);
  });

  test('/authorize and the pages answer no CORS request', async () => {
    const response = await t.app.inject({ url: '/authorize?client_id=webapp', headers: { origin: CLIENT_ORIGIN } });
    assert.equal(response.headers['access-control-allow-origin'], undefined);
  });
});

describe('health', () => {
  test('/healthz and /readyz answer 200', async () => {
    const t = await testApp();
    try {
      const health = await t.app.inject({ url: '/healthz' });
      assert.equal(health.statusCode, 200);
      assert.equal(health.json().status, 'ok');
      const ready = await t.app.inject({ url: '/readyz' });
      assert.equal(ready.statusCode, 200);
      assert.equal(ready.json().status, 'ready');
    } finally {
      await t.app.close();
    }
  });

  test('/readyz answers 503 when the store does not answer; /healthz stays 200', async () => {
    const store = new MemoryStore();
    let down = false;
    const ping = store.ping.bind(store);
    store.ping = async () => {
      if (down) throw new Error('connection refused');
      return ping();
    };
    const t = await testApp({ store });
    try {
      assert.equal((await t.app.inject({ url: '/readyz' })).statusCode, 200);
      down = true;
      const ready = await t.app.inject({ url: '/readyz' });
      assert.equal(ready.statusCode, 503);
      assert.ok(!ready.body.includes('connection refused'));
      assert.equal((await t.app.inject({ url: '/healthz' })).statusCode, 200);
      down = false;
      assert.equal((await t.app.inject({ url: '/readyz' })).statusCode, 200);
    } finally {
      await t.app.close();
    }
  });

  test('an unknown path is a JSON 404, not a 500', async () => {
    const t = await testApp();
    try {
      const response = await t.app.inject({ url: '/nope' });
      assert.equal(response.statusCode, 404);
    } finally {
      await t.app.close();
    }
  });
});

describe('bad input never gets a 500 (DESIGN.md §7)', () => {
  let t: TestApp;
  before(async () => {
    t = await testApp();
  });
  after(async () => t.app.close());

  test('malformed encodings, odd headers and methods', async () => {
    const requests: InjectOptions[] = [
      { method: 'GET', url: '/authorize?%ZZ=%E0%A4%A&client_id=%FF' },
      { method: 'GET', url: `/authorize?${'x'.repeat(20_000)}` },
      { method: 'POST', url: '/token', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: '%%%&&&==&grant_type=%FF' },
      { method: 'POST', url: '/token', headers: { 'content-type': 'application/x-www-form-urlencoded; charset=latin1' }, payload: 'grant_type=x' },
      { method: 'POST', url: '/token', headers: { 'content-type': 'text/plain' }, payload: 'grant_type=x' },
      { method: 'POST', url: '/token', headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: 'Basic Og==' }, payload: 'grant_type=client_credentials' },
      { method: 'POST', url: '/token', headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: `Basic ${Buffer.from('%E0%A4%A:x').toString('base64')}` }, payload: 'grant_type=client_credentials' },
      { method: 'GET', url: '/userinfo', headers: { authorization: `Bearer ${'a'.repeat(10_000)}` } },
      { method: 'GET', url: '/login?login=../../etc' },
      { method: 'POST', url: '/login', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: 'login=x' },
      { method: 'DELETE', url: '/token' },
    ];
    for (const request of requests) {
      const response = await t.app.inject(request);
      assert.ok(response.statusCode >= 400 && response.statusCode < 500, `${request.method} ${String(request.url).slice(0, 60)}: ${response.statusCode} ${response.body.slice(0, 200)}`);
      assert.ok(!/\bat [^\s]+ \(/.test(response.body), 'no stack trace');
    }
  });
});

describe('base_url with a path (http://127.0.0.1:8080/auth)', () => {
  const BASE = '/auth';
  const ISSUER_WITH_PATH = `${ISSUER}${BASE}`;
  let t: TestApp;
  before(async () => {
    t = await testApp({ config: await testConfig({ baseUrl: ISSUER_WITH_PATH, basePath: BASE }) });
  });
  after(async () => t.app.close());

  test('metadata under the path, and at /.well-known/...{path} (RFC 8414 §3.1)', async () => {
    for (const url of [
      `${BASE}/.well-known/openid-configuration`,
      `${BASE}/.well-known/oauth-authorization-server`,
      `/.well-known/oauth-authorization-server${BASE}`,
      `/.well-known/openid-configuration${BASE}`,
    ]) {
      assertMetadata(await t.app.inject({ url }), ISSUER_WITH_PATH);
    }
  });

  test('metadata at /.well-known/...{path} answers CORS from any origin too', async () => {
    const response = await t.app.inject({ url: `/.well-known/oauth-authorization-server${BASE}`, headers: { origin: OTHER_ORIGIN } });
    assert.equal(response.headers['access-control-allow-origin'], '*');
  });

  test('routes are served under the path only', async () => {
    assert.equal((await t.app.inject({ url: `${BASE}/jwks` })).statusCode, 200);
    assert.equal((await t.app.inject({ url: `${BASE}/healthz` })).statusCode, 200);
    assert.equal((await t.app.inject({ url: `${BASE}/readyz` })).statusCode, 200);
    for (const url of ['/jwks', '/healthz', '/authorize', '/.well-known/openid-configuration']) {
      assert.equal((await t.app.inject({ url })).statusCode, 404, url);
    }
    const token = await t.app.inject({
      method: 'POST',
      url: '/token',
      headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic('service', SECRET) },
      payload: 'grant_type=client_credentials',
    });
    assert.equal(token.statusCode, 404);
  });

  test('the whole flow under the path: authorize, sign-in, code, token, refresh, userinfo', async () => {
    const { verifier, challenge } = pkce();
    const start = await t.app.inject({
      url: authorizeUrl(
        [
          ['response_type', 'code'],
          ['client_id', 'webapp'],
          ['redirect_uri', REDIRECT],
          ['scope', 'openid profile email'],
          ['state', 'st-path'],
          ['code_challenge', challenge],
          ['code_challenge_method', 'S256'],
        ],
        BASE,
      ),
    });
    assert.equal(start.statusCode, 303, start.body);
    const loginUrl = String(start.headers.location);
    assert.ok(loginUrl.startsWith(`${BASE}/login?`), loginUrl);
    let cookies = cookieJar('', start);
    const page = await t.app.inject({ url: loginUrl, headers: { cookie: cookies } });
    assert.equal(page.statusCode, 200, page.body);
    assert.match(page.body, new RegExp(`action="${BASE}/login"`));
    cookies = cookieJar(cookies, page);
    // /authorize sets the CSRF cookie, binding the login request to this browser.
    const csrfCookie = [start.headers['set-cookie']].flat().find((line) => String(line).startsWith('pinpoint_csrf='));
    assert.ok(csrfCookie !== undefined, '/authorize sets the CSRF cookie');
    assert.ok(String(csrfCookie).includes(`Path=${BASE}`), String(csrfCookie));
    const signedIn = await t.app.inject({
      method: 'POST',
      url: `${BASE}/login`,
      headers: { cookie: cookies, 'content-type': 'application/x-www-form-urlencoded' },
      payload: form([
        ['csrf', hiddenInput(page.body, 'csrf')],
        ['login', hiddenInput(page.body, 'login')],
        ['username', 'alice'],
        ['password', PASSWORD],
      ]),
    });
    assert.equal(signedIn.statusCode, 303, signedIn.body);
    const session = [signedIn.headers['set-cookie']].flat().find((line) => String(line).startsWith('pinpoint_session='));
    assert.ok(String(session).includes(`Path=${BASE}`), String(session));
    assert.match(String(signedIn.headers.location), new RegExp(`^${BASE}/authorize/resume\\?login=`));
    const resumed = await resumeAuthorization(t.app, signedIn, cookieJar(cookies, signedIn));
    const location = new URL(String(resumed.response.headers.location));
    assert.equal(location.searchParams.get('iss'), ISSUER_WITH_PATH);
    assert.equal(location.searchParams.get('state'), 'st-path');
    const code = location.searchParams.get('code') as string;

    const tokenAt = (pairs: [string, string][]): Promise<LightMyRequestResponse> =>
      t.app.inject({
        method: 'POST',
        url: `${BASE}/token`,
        headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic('webapp', SECRET) },
        payload: form(pairs),
      });
    const exchanged = await tokenAt([
      ['grant_type', 'authorization_code'],
      ['code', code],
      ['redirect_uri', REDIRECT],
      ['code_verifier', verifier],
      ['resource', FILES],
    ]);
    assert.equal(exchanged.statusCode, 200, exchanged.body);
    const jwks = createLocalJWKSet((await t.app.inject({ url: `${BASE}/jwks` })).json() as JSONWebKeySet);
    await jwtVerify(exchanged.json().access_token, jwks, { issuer: ISSUER_WITH_PATH, audience: FILES, typ: 'at+jwt' });
    await jwtVerify(exchanged.json().id_token, jwks, { issuer: ISSUER_WITH_PATH, audience: 'webapp' });

    const refreshed = await tokenAt([['grant_type', 'refresh_token'], ['refresh_token', exchanged.json().refresh_token]]);
    assert.equal(refreshed.statusCode, 200, refreshed.body);
    assert.deepEqual(claimsOf(refreshed.json().access_token).aud, AUDIENCE);

    const info = await t.app.inject({ url: `${BASE}/userinfo`, headers: { authorization: `Bearer ${refreshed.json().access_token}` } });
    assert.equal(info.statusCode, 200, info.body);
    assert.equal(info.json().sub, 'alice');

    // Signed in: a second /authorize under the path goes straight back with a code.
    const again = await t.app.inject({
      url: webappAuthorizeUrl([], BASE),
      headers: { cookie: cookieJar(cookies, signedIn) },
    });
    assert.equal(again.statusCode, 303);
    assert.ok(new URL(String(again.headers.location)).searchParams.get('code'));
  });

  test('error redirects carry the issuer with its path', async () => {
    const response = await t.app.inject({
      url: webappAuthorizeUrl([['resource', 'billing']], BASE),
    });
    assert.equal(response.statusCode, 303);
    const location = new URL(String(response.headers.location));
    assert.equal(location.searchParams.get('error'), 'invalid_target');
    assert.equal(location.searchParams.get('iss'), ISSUER_WITH_PATH);
  });
});

describe('logs hold no secret (DESIGN.md §7)', () => {
  test('a full flow with failures at level trace: no secret in any line; request lines carry reqId, client_id, outcome', async () => {
    const lines: string[] = [];
    const logger = createLogger('trace', { write: (line: string) => void lines.push(line) });
    const t = await testApp({ logger });
    try {
      const wrongPassword = 'wrong-password-9f3k';
      const secrets: Record<string, string> = {};

      // A wrong password, then the right one, on the sign-in form.
      const { verifier, challenge } = pkce();
      secrets.verifier = verifier;
      const start = await t.app.inject({
        url: authorizeUrl([
          ['response_type', 'code'],
          ['client_id', 'webapp'],
          ['redirect_uri', REDIRECT],
          ['scope', 'openid profile email'],
          ['state', 'st-log'],
          ['code_challenge', challenge],
          ['code_challenge_method', 'S256'],
          ['resource', API],
          ['resource', FILES],
        ]),
      });
      let cookies = cookieJar('', start);
      const page = await t.app.inject({ url: String(start.headers.location), headers: { cookie: cookies } });
      cookies = cookieJar(cookies, page);
      const submit = (password: string): Promise<LightMyRequestResponse> =>
        t.app.inject({
          method: 'POST',
          url: '/login',
          headers: { cookie: cookies, 'content-type': 'application/x-www-form-urlencoded' },
          payload: form([
            ['csrf', hiddenInput(page.body, 'csrf')],
            ['login', hiddenInput(page.body, 'login')],
            ['username', 'alice'],
            ['password', password],
          ]),
        });
      assert.equal((await submit(wrongPassword)).statusCode, 401);
      const submitted = await submit(PASSWORD);
      assert.equal(submitted.statusCode, 303);
      cookies = cookieJar(cookies, submitted);
      const { response: signedIn } = await resumeAuthorization(t.app, submitted, cookies);
      const sessionValue = /pinpoint_session=([^;]+)/.exec(cookies)?.[1];
      assert.ok(sessionValue);
      secrets.session = sessionValue;
      secrets.csrf = /pinpoint_csrf=([^;]+)/.exec(cookies)?.[1] as string;
      const code = new URL(String(signedIn.headers.location)).searchParams.get('code') as string;
      secrets.code = code;

      // Failures at /token: wrong secret, wrong verifier, bad resource; then the exchange.
      const basicHeader = basic('webapp', SECRET);
      secrets.basicHeader = basicHeader.slice('Basic '.length);
      secrets.wrongBasic = basic('webapp', 'wrong-secret-77x').slice('Basic '.length);
      assert.equal((await exchangeCode(t.app, { code, verifier }, [], basic('webapp', 'wrong-secret-77x'))).statusCode, 401);
      assert.equal((await exchangeCode(t.app, { code, verifier: 'w'.repeat(43) })).statusCode, 400);
      assert.equal((await exchangeCode(t.app, { code, verifier }, ['billing'])).statusCode, 400);
      const exchanged = await exchangeCode(t.app, { code, verifier }, [API]);
      assert.equal(exchanged.statusCode, 200, exchanged.body);
      secrets.accessToken = exchanged.json().access_token;
      secrets.idToken = exchanged.json().id_token;
      const refreshToken = exchanged.json().refresh_token as string;
      secrets.refreshToken = refreshToken;

      // Refresh: refused, then good, then the old one replayed (reuse revokes the grant).
      assert.equal((await refresh(t.app, refreshToken, [API, API])).statusCode, 400);
      const refreshed = await refresh(t.app, refreshToken, [FILES]);
      assert.equal(refreshed.statusCode, 200);
      secrets.refreshToken2 = refreshed.json().refresh_token;
      secrets.accessToken2 = refreshed.json().access_token;
      assert.equal((await refresh(t.app, refreshToken)).statusCode, 400);
      // The code replayed.
      assert.equal((await exchangeCode(t.app, { code, verifier })).statusCode, 400);
      // /userinfo with a narrowed token.
      assert.equal((await t.app.inject({ url: '/userinfo', headers: { authorization: `Bearer ${secrets.accessToken}` } })).statusCode, 401);
      // A 413 and a 415 carrying a secret in the body.
      await t.app.inject({
        method: 'POST',
        url: '/token',
        headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basicHeader },
        payload: `grant_type=refresh_token&refresh_token=${secrets.refreshToken2}&pad=${'a'.repeat(70_000)}`,
      });
      await t.app.inject({
        method: 'POST',
        url: '/token',
        headers: { 'content-type': 'application/json', authorization: basicHeader },
        payload: JSON.stringify({ grant_type: 'refresh_token', refresh_token: secrets.refreshToken2 }),
      });
      // client_secret_post with the secret in the body.
      await postToken(t.app, [['grant_type', 'client_credentials'], ['client_id', 'service'], ['client_secret', SECRET]], null);

      logger.flush();
      await new Promise((resolve) => setImmediate(resolve));
      assert.ok(lines.length > 10, `some lines were written (${lines.length})`);

      const forbidden: Record<string, string> = {
        ...secrets,
        password: PASSWORD,
        passwordForm: encodeURIComponent(PASSWORD),
        passwordPlus: PASSWORD.replace(/ /g, '+'),
        wrongPassword,
        clientSecret: SECRET,
        wrongSecret: 'wrong-secret-77x',
      };
      for (const line of lines) {
        for (const [what, value] of Object.entries(forbidden)) {
          assert.ok(value.length >= 8, `${what} is long enough to search for`);
          assert.ok(!line.includes(value), `a log line holds the ${what}: ${line}`);
        }
      }

      const requestLines = lines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((entry) => entry.msg === 'request');
      assert.ok(requestLines.length >= 15, `one line per request (${requestLines.length})`);
      for (const entry of requestLines) {
        assert.equal(typeof entry.reqId, 'string', JSON.stringify(entry));
        assert.ok('outcome' in entry, JSON.stringify(entry));
      }
      const tokenLines = requestLines.filter((entry) => entry.path === '/token');
      assert.ok(tokenLines.some((entry) => entry.client_id === 'webapp' && entry.outcome === 'ok' && entry.status === 200));
      assert.ok(tokenLines.some((entry) => entry.client_id === 'webapp' && entry.outcome === 'invalid_client' && entry.status === 401));
      assert.ok(tokenLines.some((entry) => entry.client_id === 'webapp' && entry.outcome === 'invalid_grant'));
      assert.ok(tokenLines.some((entry) => entry.client_id === 'webapp' && entry.outcome === 'invalid_target'));
      const loginLines = requestLines.filter((entry) => entry.path === '/login' && entry.method === 'POST');
      assert.ok(loginLines.some((entry) => entry.outcome === 'wrong_credentials' && entry.status === 401));
      assert.ok(loginLines.some((entry) => entry.client_id === 'webapp' && entry.outcome === 'ok'));
      const authorizeLines = requestLines.filter((entry) => entry.path === '/authorize');
      assert.ok(authorizeLines.length >= 1 && authorizeLines.every((entry) => entry.status === 303));
      assert.equal(new Set(requestLines.map((entry) => entry.reqId)).size, requestLines.length, 'one reqId per request');
      assert.ok(lines.some((line) => /reuse/i.test(line) && line.includes('"client_id":"webapp"')), 'the reuse is logged (without the token)');
    } finally {
      await t.app.close();
    }
  });
});

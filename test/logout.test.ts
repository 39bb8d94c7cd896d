/** GET/POST /logout (OpenID Connect RP-Initiated Logout 1.0, DESIGN.md §8). */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { generateKeyPair, SignJWT } from 'jose';
import type { Config } from '../src/config/types.js';
import { authorizeSilently, cookieJar, exchangeCode, hiddenInput, ISSUER, signInForCode, type TestApp, testApp, testConfig } from './helpers/app.js';

const AFTER_LOGOUT = 'http://127.0.0.1:9000/signed-out';

async function configWithLogoutUri(): Promise<Config> {
  const config = await testConfig();
  const webapp = config.clients.get('webapp');
  assert.ok(webapp);
  return { ...config, clients: new Map([...config.clients, ['webapp', { ...webapp, postLogoutRedirectUris: [AFTER_LOGOUT] }]]) };
}

/** Signs alice in; returns her session cookies and an ID token for webapp. */
async function signedIn(app: FastifyInstance): Promise<{ cookies: string; idToken: string }> {
  const grant = await signInForCode(app);
  const tokens = await exchangeCode(app, grant);
  assert.equal(tokens.statusCode, 200, tokens.body);
  return { cookies: grant.cookies, idToken: tokens.json().id_token as string };
}

/** Whether the cookies still carry a live session: /authorize with prompt=none answers a code, or login_required. */
const stillSignedIn = async (app: FastifyInstance, cookies: string): Promise<boolean> => (await authorizeSilently(app, cookies)).searchParams.has('code');

const clearsSession = (response: LightMyRequestResponse): boolean =>
  [response.headers['set-cookie'] ?? []].flat().some((line) => /^pinpoint_session=;.*Max-Age=0/.test(line));

describe('/logout', () => {
  let t: TestApp;
  before(async () => {
    t = await testApp({ config: await configWithLogoutUri() });
  });
  after(async () => t.app.close());

  test('metadata names the end_session_endpoint', async () => {
    assert.equal((await t.app.inject({ url: '/.well-known/openid-configuration' })).json().end_session_endpoint, `${ISSUER}/logout`);
  });

  test('a valid id_token_hint ends the session at once and redirects with state', async () => {
    const { cookies, idToken } = await signedIn(t.app);
    const query = new URLSearchParams({ id_token_hint: idToken, post_logout_redirect_uri: AFTER_LOGOUT, state: 'bye-1' });
    const response = await t.app.inject({ url: `/logout?${query}`, headers: { cookie: cookies } });
    assert.equal(response.statusCode, 303, response.body);
    assert.equal(response.headers.location, `${AFTER_LOGOUT}?state=bye-1`);
    assert.ok(clearsSession(response));
    assert.equal(await stillSignedIn(t.app, cookies), false, 'the session row is gone, not just the cookie');
  });

  test('an expired hint is still a hint', async () => {
    const { cookies, idToken } = await signedIn(t.app);
    const later = await testApp({ config: await configWithLogoutUri(), store: t.store, now: () => Date.now() + 48 * 3600_000 });
    try {
      const response = await later.app.inject({ url: `/logout?${new URLSearchParams({ id_token_hint: idToken })}`, headers: { cookie: cookies } });
      assert.equal(response.statusCode, 200, response.body);
      assert.match(response.body, /You are signed out/);
    } finally {
      await later.app.close();
    }
  });

  test('a hint of another issuer, or with a bad signature, is refused and keeps the session', async () => {
    const { cookies, idToken } = await signedIn(t.app);
    const { privateKey } = await generateKeyPair('RS256');
    const foreign = await new SignJWT({ sub: 'alice', aud: 'webapp' }).setProtectedHeader({ alg: 'RS256', kid: 'x' }).setIssuer('https://elsewhere.example').setIssuedAt().setExpirationTime('1h').sign(privateKey);
    const [header, payload] = idToken.split('.');
    const tampered = `${header}.${payload}.${'A'.repeat(342)}`;
    for (const hint of [foreign, tampered]) {
      const response = await t.app.inject({ url: `/logout?${new URLSearchParams({ id_token_hint: hint })}`, headers: { cookie: cookies } });
      assert.equal(response.statusCode, 400);
      assert.match(response.body, /id_token_hint is not an ID token this server issued/);
      assert.ok(!clearsSession(response));
    }
    assert.equal(await stillSignedIn(t.app, cookies), true);
  });

  test('a post_logout_redirect_uri not registered: error page, no redirect, session kept', async () => {
    const { cookies, idToken } = await signedIn(t.app);
    const query = new URLSearchParams({ id_token_hint: idToken, post_logout_redirect_uri: 'https://attacker.example/' });
    const response = await t.app.inject({ url: `/logout?${query}`, headers: { cookie: cookies } });
    assert.equal(response.statusCode, 400);
    assert.equal(response.headers.location, undefined);
    assert.equal(await stillSignedIn(t.app, cookies), true);
  });

  test('a state over 2,048 characters: error page, no redirect, session kept (DESIGN.md §4)', async () => {
    const { cookies, idToken } = await signedIn(t.app);
    const query = new URLSearchParams({ id_token_hint: idToken, post_logout_redirect_uri: AFTER_LOGOUT, state: 's'.repeat(2049) });
    const response = await t.app.inject({ url: `/logout?${query}`, headers: { cookie: cookies } });
    assert.equal(response.statusCode, 400);
    assert.equal(response.headers.location, undefined);
    assert.match(response.body, /state is longer than 2048 characters/);
    assert.equal(await stillSignedIn(t.app, cookies), true);
    const atLimit = new URLSearchParams({ id_token_hint: idToken, post_logout_redirect_uri: AFTER_LOGOUT, state: 's'.repeat(2048) });
    assert.equal((await t.app.inject({ url: `/logout?${atLimit}`, headers: { cookie: cookies } })).statusCode, 303);
  });

  test('without a hint: a confirmation form; confirming (with CSRF) signs out and redirects; without CSRF nothing changes', async () => {
    const { cookies } = await signedIn(t.app);
    const query = new URLSearchParams({ client_id: 'webapp', post_logout_redirect_uri: AFTER_LOGOUT, state: 'bye-2' });
    const page = await t.app.inject({ url: `/logout?${query}`, headers: { cookie: cookies } });
    assert.equal(page.statusCode, 200);
    assert.equal((page.body.match(/<form/g) ?? []).length, 1);
    assert.match(String(page.headers['content-security-policy']), /form-action 'self' http:\/\/127\.0\.0\.1:9000/);
    assert.equal(await stillSignedIn(t.app, cookies), true, 'showing the page signs nobody out');
    const jar = cookieJar(cookies, page);
    const fields = (csrf: string): string =>
      new URLSearchParams({ csrf, confirm: 'yes', client_id: 'webapp', post_logout_redirect_uri: hiddenInput(page.body, 'post_logout_redirect_uri'), state: 'bye-2' }).toString();
    const forged = await t.app.inject({ method: 'POST', url: '/logout', headers: { cookie: jar, 'content-type': 'application/x-www-form-urlencoded' }, payload: fields('A'.repeat(43)) });
    assert.equal(forged.statusCode, 400);
    assert.equal(await stillSignedIn(t.app, cookies), true);
    const confirmed = await t.app.inject({ method: 'POST', url: '/logout', headers: { cookie: jar, 'content-type': 'application/x-www-form-urlencoded' }, payload: fields(hiddenInput(page.body, 'csrf')) });
    assert.equal(confirmed.statusCode, 303, confirmed.body);
    assert.equal(confirmed.headers.location, `${AFTER_LOGOUT}?state=bye-2`);
    assert.equal(await stillSignedIn(t.app, cookies), false);
  });

  test('a post_logout_redirect_uri with neither hint nor client_id: no redirect, the signed-out page', async () => {
    const { cookies } = await signedIn(t.app);
    const page = await t.app.inject({ url: `/logout?${new URLSearchParams({ post_logout_redirect_uri: AFTER_LOGOUT })}`, headers: { cookie: cookies } });
    assert.equal(page.statusCode, 200);
    assert.ok(!page.body.includes('post_logout_redirect_uri'), 'the URI is not carried on');
    const jar = cookieJar(cookies, page);
    const confirmed = await t.app.inject({
      method: 'POST',
      url: '/logout',
      headers: { cookie: jar, 'content-type': 'application/x-www-form-urlencoded' },
      payload: new URLSearchParams({ csrf: hiddenInput(page.body, 'csrf'), confirm: 'yes' }).toString(),
    });
    assert.equal(confirmed.statusCode, 200);
    assert.match(confirmed.body, /You are signed out/);
  });
});

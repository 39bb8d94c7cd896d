/** GET/POST /logout (OpenID Connect RP-Initiated Logout 1.0, DESIGN.md §8). */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { generateKeyPair, SignJWT } from 'jose';
import type { Config } from '../src/config/types.js';
import {
  authorizeSilently,
  authorizeUrl,
  cookieJar,
  exchangeCode,
  form,
  hiddenInput,
  ISSUER,
  PASSWORD,
  pkce,
  REDIRECT,
  resumeAuthorization,
  signInForCode,
  type TestApp,
  testApp,
  testConfig,
} from './helpers/app.js';

const AFTER_LOGOUT = 'http://127.0.0.1:9000/signed-out';

/** The test config with a logout URI for webapp, and a second person, mallory (alice's password). */
async function configWithLogoutUri(): Promise<Config> {
  const config = await testConfig();
  const webapp = config.clients.get('webapp');
  const alice = config.users.get('alice');
  assert.ok(webapp && alice);
  return {
    ...config,
    users: new Map([...config.users, ['mallory', { ...alice, username: 'mallory' }]]),
    clients: new Map([...config.clients, ['webapp', { ...webapp, postLogoutRedirectUris: [AFTER_LOGOUT] }]]),
  };
}

/** An ID token for webapp naming mallory: someone else's hint, as any person can get their own. */
async function mallorysIdToken(app: FastifyInstance): Promise<string> {
  const grant = await signInForCode(app, { scope: 'openid', username: 'mallory' });
  const tokens = await exchangeCode(app, grant);
  assert.equal(tokens.statusCode, 200, tokens.body);
  return tokens.json().id_token as string;
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

const setsSessionCookie = (response: LightMyRequestResponse): boolean =>
  [response.headers['set-cookie'] ?? []].flat().some((line) => line.startsWith('pinpoint_session='));

/** A form POST to /logout, as a page of another site submits it: SameSite=Lax keeps the session cookie off it. */
const postLogout = (app: FastifyInstance, fields: Record<string, string>, cookie?: string): Promise<LightMyRequestResponse> =>
  app.inject({
    method: 'POST',
    url: '/logout',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...(cookie !== undefined && { cookie }) },
    payload: new URLSearchParams(fields).toString(),
  });

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

  test('a request without the session cookie never answers with a clearing Set-Cookie: it signs out no browser', async () => {
    const { cookies, idToken } = await signedIn(t.app);
    const response = await t.app.inject({ url: `/logout?${new URLSearchParams({ id_token_hint: idToken, post_logout_redirect_uri: AFTER_LOGOUT, state: 'bye-3' })}` });
    assert.equal(response.statusCode, 303, response.body);
    assert.equal(response.headers.location, `${AFTER_LOGOUT}?state=bye-3`);
    assert.equal(setsSessionCookie(response), false, String(response.headers['set-cookie']));
    const page = await t.app.inject({ url: `/logout?${new URLSearchParams({ id_token_hint: idToken })}` });
    assert.match(page.body, /You are signed out/);
    assert.equal(setsSessionCookie(page), false);
    assert.equal(await stillSignedIn(t.app, cookies), true, 'nothing ended the session the request did not name');
  });

  test('a POST without the session cookie (from another site) is sent on to GET with its parameters, and ends or asks there', async () => {
    const { cookies, idToken } = await signedIn(t.app);
    const fields = { id_token_hint: idToken, post_logout_redirect_uri: AFTER_LOGOUT, state: 'bye-4' };
    const posted = await postLogout(t.app, { ...fields, unknown: 'dropped' });
    assert.equal(posted.statusCode, 303, posted.body);
    assert.equal(setsSessionCookie(posted), false, 'the POST clears nothing');
    const location = new URL(String(posted.headers.location), ISSUER);
    assert.equal(location.pathname, '/logout');
    assert.deepEqual([...location.searchParams], Object.entries(fields));
    assert.equal(await stillSignedIn(t.app, cookies), true);
    // The GET is a top-level navigation: the browser sends the cookie; the hint names the person, so it ends at once.
    const ended = await t.app.inject({ url: `${location.pathname}${location.search}`, headers: { cookie: cookies } });
    assert.equal(ended.statusCode, 303, ended.body);
    assert.equal(ended.headers.location, `${AFTER_LOGOUT}?state=bye-4`);
    assert.ok(clearsSession(ended));
    assert.equal(await stillSignedIn(t.app, cookies), false, 'the session row is gone: a copy of the cookie no longer works');

    // Someone else's hint: the GET finds another person signed in and asks; nothing ends.
    const victim = await signedIn(t.app);
    const forged = await postLogout(t.app, { id_token_hint: await mallorysIdToken(t.app) });
    assert.equal(forged.statusCode, 303, forged.body);
    const asked = await t.app.inject({ url: String(forged.headers.location), headers: { cookie: victim.cookies } });
    assert.equal(asked.statusCode, 200);
    assert.match(asked.body, /<form/);
    assert.ok(!clearsSession(asked));
    assert.equal(await stillSignedIn(t.app, victim.cookies), true);
  });

  test('a POST without the session cookie that would be refused gets the error page, not a redirect', async () => {
    const { idToken } = await signedIn(t.app);
    const refused: Record<string, string>[] = [{ id_token_hint: idToken, post_logout_redirect_uri: 'https://attacker.example/' }, { id_token_hint: 'not-a-token' }, { state: 's'.repeat(2049) }];
    for (const fields of refused) {
      const response = await postLogout(t.app, fields);
      assert.equal(response.statusCode, 400, response.body);
      assert.equal(response.headers.location, undefined);
      assert.equal(setsSessionCookie(response), false);
    }
  });

  test('a POST with the session cookie (from a page of the same site) is answered as before', async () => {
    const { cookies, idToken } = await signedIn(t.app);
    const response = await postLogout(t.app, { id_token_hint: idToken, post_logout_redirect_uri: AFTER_LOGOUT, state: 'bye-5' }, cookies);
    assert.equal(response.statusCode, 303, response.body);
    assert.equal(response.headers.location, `${AFTER_LOGOUT}?state=bye-5`);
    assert.ok(clearsSession(response));
    assert.equal(await stillSignedIn(t.app, cookies), false);
  });
});

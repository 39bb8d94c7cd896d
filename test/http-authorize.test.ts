/** /authorize and the sign-in pages through HTTP (DESIGN.md §4 and the /authorize rows of §5). */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import {
  AUDIENCE,
  ISSUER,
  PASSWORD,
  REDIRECT,
  authorizeUrl,
  claimsOf,
  cookieJar,
  exchangeCode,
  form,
  hiddenInput,
  pkce,
  signInForCode,
  testApp,
  type TestApp,
  resumeAuthorization,
  testConfig,
} from './helpers/app.js';

const API = AUDIENCE[0] as string;
const FILES = AUDIENCE[1] as string;
const LOGICAL = AUDIENCE[2] as string;
const FRAGMENT = AUDIENCE[3] as string;
const QUERY = AUDIENCE[4] as string;

/** A valid authorization request for `webapp`; `replace` swaps or drops (value undefined) parameters. */
function requestPairs(
  options: { replace?: Record<string, string | undefined>; resources?: readonly string[]; extra?: readonly (readonly [string, string])[] } = {},
): [string, string][] {
  const base: Record<string, string | undefined> = {
    response_type: 'code',
    client_id: 'webapp',
    redirect_uri: REDIRECT,
    scope: 'openid profile email',
    state: 'st-42',
    code_challenge: pkce().challenge,
    code_challenge_method: 'S256',
    ...options.replace,
  };
  const pairs: [string, string][] = [];
  for (const [name, value] of Object.entries(base)) if (value !== undefined) pairs.push([name, value]);
  for (const resource of options.resources ?? []) pairs.push(['resource', resource]);
  for (const [name, value] of options.extra ?? []) pairs.push([name, value]);
  return pairs;
}

async function authorize(app: FastifyInstance, pairs: readonly (readonly [string, string])[], cookie?: string): Promise<LightMyRequestResponse> {
  return app.inject({ method: 'GET', url: authorizeUrl(pairs), headers: cookie === undefined ? {} : { cookie } });
}

function assertErrorPage(response: LightMyRequestResponse, error: string): void {
  assert.equal(response.statusCode, 400, response.body);
  assert.equal(response.headers.location, undefined, 'an error page, never a redirect');
  assert.match(String(response.headers['content-type']), /^text\/html/);
  assert.ok(response.body.includes(error), `page names ${error}: ${response.body}`);
  assertNoFraming(response);
}

function assertNoFraming(response: LightMyRequestResponse): void {
  assert.match(String(response.headers['content-security-policy']), /frame-ancestors 'none'/);
  assert.equal(response.headers['x-frame-options'], 'DENY');
}

/** The error redirect of DESIGN.md §4: back to the client with error, error_description, iss and state. */
function assertErrorRedirect(response: LightMyRequestResponse, error: string, description: string, state: string | null = 'st-42'): URL {
  assert.equal(response.statusCode, 303, response.body);
  const location = new URL(String(response.headers.location));
  assert.equal(`${location.origin}${location.pathname}`, REDIRECT, 'back to the client, not to the sign-in page');
  assert.equal(location.searchParams.get('error'), error);
  assert.equal(location.searchParams.get('error_description'), description);
  assert.equal(location.searchParams.get('iss'), ISSUER);
  assert.equal(location.searchParams.get('state'), state);
  assert.equal(location.searchParams.get('code'), null);
  return location;
}

function assertSentToSignIn(response: LightMyRequestResponse): void {
  assert.equal(response.statusCode, 303, response.body);
  assert.match(String(response.headers.location), /^\/login\?login=[A-Za-z0-9_-]+$/);
}

const notRequestable = (resource: string): string => `resource "${resource}" is not one this client may ask a token for`;

describe('/authorize: requests that are not trusted get an error page (HTTP 400, never a redirect)', () => {
  let t: TestApp;
  before(async () => {
    t = await testApp();
  });
  after(async () => t.app.close());

  test('unknown client', async () => {
    assertErrorPage(await authorize(t.app, requestPairs({ replace: { client_id: 'nobody' } })), 'invalid_client');
  });

  test('missing client_id', async () => {
    assertErrorPage(await authorize(t.app, requestPairs({ replace: { client_id: undefined } })), 'invalid_request');
  });

  test('redirect_uri not registered for the client', async () => {
    assertErrorPage(await authorize(t.app, requestPairs({ replace: { redirect_uri: 'https://evil.example/callback' } })), 'invalid_request');
  });

  test('redirect_uri that differs from the registered one only by a trailing slash', async () => {
    assertErrorPage(await authorize(t.app, requestPairs({ replace: { redirect_uri: `${REDIRECT}/` } })), 'invalid_request');
  });

  test('redirect_uri of another client (service has none)', async () => {
    assertErrorPage(await authorize(t.app, requestPairs({ replace: { client_id: 'service' } })), 'invalid_request');
  });

  test('a repeated parameter, even with a registered redirect_uri', async () => {
    for (const name of ['state', 'scope', 'client_id', 'redirect_uri', 'code_challenge']) {
      const pairs = requestPairs();
      const value = pairs.find(([n]) => n === name)?.[1] as string;
      const response = await authorize(t.app, [...pairs, [name, value]]);
      assertErrorPage(response, 'invalid_request');
      assert.ok(response.body.includes(`${name} appears more than once`), response.body);
    }
  });
});

describe('/authorize: other errors redirect to the client with error, error_description, iss and state', () => {
  let t: TestApp;
  before(async () => {
    t = await testApp();
  });
  after(async () => t.app.close());

  test('missing PKCE', async () => {
    const response = await authorize(t.app, requestPairs({ replace: { code_challenge: undefined, code_challenge_method: undefined } }));
    assertErrorRedirect(response, 'invalid_request', 'code_challenge is required (PKCE with S256)');
  });

  test('code_challenge_method plain', async () => {
    const response = await authorize(t.app, requestPairs({ replace: { code_challenge_method: 'plain' } }));
    assertErrorRedirect(response, 'invalid_request', 'code_challenge_method must be S256');
  });

  test('code_challenge without a method (RFC 7636 would default to plain)', async () => {
    const response = await authorize(t.app, requestPairs({ replace: { code_challenge_method: undefined } }));
    assertErrorRedirect(response, 'invalid_request', 'code_challenge_method must be S256');
  });

  test('unsupported response_type', async () => {
    const response = await authorize(t.app, requestPairs({ replace: { response_type: 'token' } }));
    assertErrorRedirect(response, 'unsupported_response_type', 'only response_type=code is supported');
  });

  test('no scope, or an empty one: invalid_request, redirected with iss and state (DESIGN.md §4 seed rule)', async () => {
    assertErrorRedirect(await authorize(t.app, requestPairs({ replace: { scope: undefined } })), 'invalid_request', 'scope is required');
    assertErrorRedirect(await authorize(t.app, requestPairs({ replace: { scope: '' } })), 'invalid_request', 'scope is required');
  });

  test('a scope the client may not ask', async () => {
    const response = await authorize(t.app, requestPairs({ replace: { scope: 'openid admin' } }));
    assertErrorRedirect(response, 'invalid_scope', 'scope "admin" is not one this client may ask');
  });

  test('a provider scope the client may not ask (spa has no ssh)', async () => {
    const response = await authorize(t.app, requestPairs({ replace: { client_id: 'spa', scope: 'openid ssh' } }));
    assertErrorRedirect(response, 'invalid_scope', 'scope "ssh" is not one this client may ask');
  });

  test('no state sent: the error redirect carries none', async () => {
    const response = await authorize(t.app, requestPairs({ replace: { state: undefined, response_type: 'token' } }));
    const location = assertErrorRedirect(response, 'unsupported_response_type', 'only response_type=code is supported', null);
    assert.equal(location.searchParams.has('state'), false);
  });

  test('the error redirect keeps the error page headers (no framing)', async () => {
    assertNoFraming(await authorize(t.app, requestPairs({ replace: { response_type: 'token' } })));
  });
});

describe('/authorize: resource rules (DESIGN.md §5)', () => {
  let t: TestApp;
  before(async () => {
    t = await testApp();
  });
  after(async () => t.app.close());

  const refused: [string, string][] = [
    ['a logical name', LOGICAL],
    ['a fragment URI', FRAGMENT],
    ['a URI not in the audience', 'https://other.example.org/'],
    ['an audience URI without its trailing slash', 'https://api.example.org'],
    ['an audience URI with a trailing slash added', `${FILES}/`],
    ['an audience URI in another letter case', 'https://API.example.org/'],
    ['an empty resource=', ''],
    ['a query URI with another query', 'https://q.example.org/x?y=2'],
    ['the issuer without a provider scope', ISSUER],
  ];
  for (const [what, resource] of refused) {
    test(`refused: ${what}`, async () => {
      const response = await authorize(t.app, requestPairs({ resources: [resource] }));
      assertErrorRedirect(response, 'invalid_target', notRequestable(resource));
    });
  }

  test('one refused value among good ones fails the whole request before any sign-in page', async () => {
    for (const resources of [
      [API, LOGICAL, FILES],
      [LOGICAL, API],
      [API, FILES, ''],
    ]) {
      const bad = resources.find((resource) => resource !== API && resource !== FILES) as string;
      const response = await authorize(t.app, requestPairs({ resources }));
      assertErrorRedirect(response, 'invalid_target', notRequestable(bad));
      assert.ok(!String(response.headers.location).includes('/login'));
    }
  });

  test('good resources lead to the sign-in page', async () => {
    assertSentToSignIn(await authorize(t.app, requestPairs({ resources: [API, FILES] })));
  });

  test('a URI with a query is accepted when it is exactly an audience entry, and lands in aud', async () => {
    assertSentToSignIn(await authorize(t.app, requestPairs({ resources: [QUERY] })));
    const grant = await signInForCode(t.app, { resources: [QUERY] });
    const exchanged = await exchangeCode(t.app, grant);
    assert.equal(exchanged.statusCode, 200, exchanged.body);
    assert.equal(claimsOf(exchanged.json().access_token).aud, QUERY);
  });

  test('a value given twice counts once, in the order of first appearance', async () => {
    const grant = await signInForCode(t.app, { resources: [FILES, API, FILES, API, FILES] });
    const exchanged = await exchangeCode(t.app, grant);
    assert.equal(exchanged.statusCode, 200, exchanged.body);
    assert.deepEqual(claimsOf(exchanged.json().access_token).aud, [FILES, API]);
  });

  test('one resource named twice gives a string aud', async () => {
    const grant = await signInForCode(t.app, { resources: [API, API] });
    const exchanged = await exchangeCode(t.app, grant);
    assert.equal(claimsOf(exchanged.json().access_token).aud, API);
  });

  test('20 resource values are accepted; 21 give invalid_request', async () => {
    const twenty = Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? API : FILES));
    assertSentToSignIn(await authorize(t.app, requestPairs({ resources: twenty })));
    const response = await authorize(t.app, requestPairs({ resources: [...twenty, API] }));
    assertErrorRedirect(response, 'invalid_request', 'more than 20 resource values');
  });

  test('21 values are invalid_request even when the extra one would be refused as a target', async () => {
    const many = Array.from({ length: 21 }, (_, i) => `https://r${i}.example.org/`);
    const response = await authorize(t.app, requestPairs({ resources: many }));
    assertErrorRedirect(response, 'invalid_request', 'more than 20 resource values');
  });

  test('a resource of 2,049 characters gives invalid_request (not invalid_target)', async () => {
    const long = `${API}${'a'.repeat(2049 - API.length)}`;
    assert.equal(long.length, 2049);
    const response = await authorize(t.app, requestPairs({ resources: [API, long] }));
    assertErrorRedirect(response, 'invalid_request', 'a resource is longer than 2048 characters');
  });

  test('a state of 2,048 characters is accepted; 2,049 gives the error page (DESIGN.md §7: no redirect without it)', async () => {
    assertSentToSignIn(await authorize(t.app, requestPairs({ replace: { state: 's'.repeat(2048) } })));
    const response = await authorize(t.app, requestPairs({ replace: { state: 's'.repeat(2049) } }));
    assertErrorPage(response, 'state is longer than 2048 characters');
  });

  test('a nonce of 2,049 characters gives invalid_request', async () => {
    const response = await authorize(t.app, requestPairs({ extra: [['nonce', 'n'.repeat(2049)]] }));
    assertErrorRedirect(response, 'invalid_request', 'nonce is longer than 2048 characters');
  });

  test('with a provider scope only the issuer can be named (provider text otherwise)', async () => {
    const refusedApi = await authorize(t.app, requestPairs({ replace: { scope: 'openid ssh' }, resources: [API] }));
    assertErrorRedirect(
      refusedApi,
      'invalid_target',
      `resource "${API}" cannot be named with scope "ssh": its tokens are for the provider alone`,
    );
    assertSentToSignIn(await authorize(t.app, requestPairs({ replace: { scope: 'openid ssh' }, resources: [ISSUER] })));
  });
});

describe('/authorize by POST (form-encoded, OpenID Connect Core §3.1.2.1)', () => {
  let t: TestApp;
  before(async () => {
    t = await testApp();
  });
  after(async () => t.app.close());

  const post = (pairs: readonly (readonly [string, string])[]): Promise<LightMyRequestResponse> =>
    t.app.inject({ method: 'POST', url: '/authorize', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: form(pairs) });

  test('a valid request leads to the sign-in page like GET', async () => {
    assertSentToSignIn(await post(requestPairs({ resources: [API, FILES] })));
  });

  test('a refused resource redirects with the same error as GET', async () => {
    assertErrorRedirect(await post(requestPairs({ resources: [API, LOGICAL] })), 'invalid_target', notRequestable(LOGICAL));
  });

  test('an unknown client gets the error page', async () => {
    assertErrorPage(await post(requestPairs({ replace: { client_id: 'nobody' } })), 'invalid_client');
  });

  test('a repeated parameter gets the error page', async () => {
    assertErrorPage(await post([...requestPairs(), ['scope', 'openid']]), 'invalid_request');
  });

  test('a JSON body gets 415 as an error page', async () => {
    const response = await t.app.inject({
      method: 'POST',
      url: '/authorize',
      headers: { 'content-type': 'application/json' },
      payload: JSON.stringify(Object.fromEntries(requestPairs())),
    });
    assert.equal(response.statusCode, 415);
    assert.equal(response.headers.location, undefined);
    assert.match(String(response.headers['content-type']), /^text\/html/);
    assertNoFraming(response);
  });

  test('a body over 64 KiB gets 413 as an error page', async () => {
    const response = await t.app.inject({
      method: 'POST',
      url: '/authorize',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      payload: `${form(requestPairs())}&pad=${'a'.repeat(64 * 1024)}`,
    });
    assert.equal(response.statusCode, 413);
    assert.equal(response.headers.location, undefined);
    assert.match(String(response.headers['content-type']), /^text\/html/);
  });

  test('the whole flow through POST /authorize ends with a code that exchanges', async () => {
    const { verifier, challenge } = pkce();
    const start = await post(requestPairs({ replace: { code_challenge: challenge }, resources: [FILES] }));
    assertSentToSignIn(start);
    const signedIn = await submitLogin(t.app, start, PASSWORD);
    assert.equal(signedIn.response.statusCode, 303, signedIn.response.body);
    const resumed = await resumeAuthorization(t.app, signedIn.response, signedIn.cookies);
    const location = new URL(String(resumed.response.headers.location));
    const code = location.searchParams.get('code') as string;
    const exchanged = await exchangeCode(t.app, { code, verifier });
    assert.equal(exchanged.statusCode, 200, exchanged.body);
    assert.equal(claimsOf(exchanged.json().access_token).aud, FILES);
  });
});

/** Follows the redirect to the sign-in page and submits it with `password`. */
async function submitLogin(
  app: FastifyInstance,
  start: LightMyRequestResponse,
  password: string,
  username = 'alice',
): Promise<{ response: LightMyRequestResponse; page: LightMyRequestResponse; cookies: string }> {
  let cookies = cookieJar('', start);
  const page = await app.inject({ method: 'GET', url: String(start.headers.location), headers: { cookie: cookies } });
  cookies = cookieJar(cookies, page);
  const response = await app.inject({
    method: 'POST',
    url: '/login',
    headers: { cookie: cookies, 'content-type': 'application/x-www-form-urlencoded' },
    payload: form([
      ['csrf', hiddenInput(page.body, 'csrf')],
      ['login', hiddenInput(page.body, 'login')],
      ['username', username],
      ['password', password],
    ]),
  });
  return { response, page, cookies: cookieJar(cookies, response) };
}

/** Posts the form again from a page that holds it (after a failed attempt). */
async function resubmit(app: FastifyInstance, page: LightMyRequestResponse, cookies: string, password: string, username = 'alice'): Promise<LightMyRequestResponse> {
  return app.inject({
    method: 'POST',
    url: '/login',
    headers: { cookie: cookies, 'content-type': 'application/x-www-form-urlencoded' },
    payload: form([
      ['csrf', hiddenInput(page.body, 'csrf')],
      ['login', hiddenInput(page.body, 'login')],
      ['username', username],
      ['password', password],
    ]),
  });
}

function assertSignInForm(response: LightMyRequestResponse): void {
  assert.match(String(response.headers['content-type']), /^text\/html/);
  assert.equal((response.body.match(/<form/g) ?? []).length, 1, 'one form');
  assert.match(response.body, /<input[^>]*name="username"/);
  assert.match(response.body, /<input[^>]*type="password"[^>]*name="password"|<input[^>]*name="password"[^>]*type="password"/);
  assertNoFraming(response);
}

describe('sign-in and session', () => {
  let t: TestApp;
  before(async () => {
    t = await testApp();
  });
  after(async () => t.app.close());

  test('the sign-in page holds one form with username and password, and cannot be framed', async () => {
    const start = await authorize(t.app, requestPairs());
    assertNoFraming(start);
    const page = await t.app.inject({ method: 'GET', url: String(start.headers.location), headers: { cookie: cookieJar('', start) } });
    assert.equal(page.statusCode, 200);
    assertSignInForm(page);
  });

  test('the sign-in page for an unknown or forged login id is an error page, not a form', async () => {
    const page = await t.app.inject({ method: 'GET', url: '/login?login=AAAAAAAAAAAAAAAAAAAAAAAA' });
    assert.equal(page.statusCode, 400);
    assert.ok(!page.body.includes('name="password"'));
    assertNoFraming(page);
  });

  test('a wrong password shows the form again (401) with a message; then the right password works', async () => {
    const start = await authorize(t.app, requestPairs());
    const wrong = await submitLogin(t.app, start, 'not the password');
    assert.equal(wrong.response.statusCode, 401);
    assertSignInForm(wrong.response);
    assert.match(wrong.response.body, /Wrong username or password/);
    assert.equal(wrong.response.headers.location, undefined);
    assert.ok(!String(wrong.response.headers['set-cookie'] ?? '').includes('pinpoint_session='), 'no session for a wrong password');
    assert.ok(!wrong.response.body.includes('not the password'), 'the wrong password is not echoed');

    const right = await resubmit(t.app, wrong.response, wrong.cookies, PASSWORD);
    assert.equal(right.statusCode, 303, right.body);
    assert.match(String(right.headers.location), /^\/authorize\/resume\?login=/, 'sign-in sends the browser back to /authorize/resume');
    const resumed = await resumeAuthorization(t.app, right, cookieJar(wrong.cookies, right));
    const location = new URL(String(resumed.response.headers.location));
    assert.equal(`${location.origin}${location.pathname}`, REDIRECT);
    assert.ok(location.searchParams.get('code'));
    assert.equal(location.searchParams.get('state'), 'st-42');
    assert.equal(location.searchParams.get('iss'), ISSUER);
  });

  test('a sign-in without the CSRF cookie is refused and signs nobody in', async () => {
    const start = await authorize(t.app, requestPairs());
    const page = await t.app.inject({ method: 'GET', url: String(start.headers.location) });
    const response = await t.app.inject({
      method: 'POST',
      url: '/login',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      payload: form([
        ['csrf', hiddenInput(page.body, 'csrf')],
        ['login', hiddenInput(page.body, 'login')],
        ['username', 'alice'],
        ['password', PASSWORD],
      ]),
    });
    assert.equal(response.statusCode, 400);
    assert.equal(response.headers.location, undefined);
    assert.ok(!String(response.headers['set-cookie'] ?? '').includes('pinpoint_session='));
  });

  test('an unknown user gets the same 401 form', async () => {
    const start = await authorize(t.app, requestPairs());
    const unknown = await submitLogin(t.app, start, PASSWORD, 'mallory');
    assert.equal(unknown.response.statusCode, 401);
    assertSignInForm(unknown.response);
  });

  test('a sign-in finished once cannot be replayed into a second code', async () => {
    const start = await authorize(t.app, requestPairs());
    const first = await submitLogin(t.app, start, PASSWORD);
    assert.equal(first.response.statusCode, 303);
    const resumeUrl = String(first.response.headers.location);
    const resumed = await resumeAuthorization(t.app, first.response, first.cookies);
    assert.ok(new URL(String(resumed.response.headers.location)).searchParams.get('code'));
    const again = await resubmit(t.app, first.page, first.cookies, PASSWORD);
    assert.equal(again.statusCode, 400);
    assert.equal(again.headers.location, undefined);
    const resumedAgain = await t.app.inject({ url: resumeUrl, headers: { cookie: resumed.cookies } });
    assert.equal(resumedAgain.statusCode, 400, 'the login request is taken once');
    assert.equal(resumedAgain.headers.location, undefined);
  });

  test('/authorize/resume continues only in the browser that started the request, and only once signed in', async () => {
    const start = await authorize(t.app, requestPairs());
    const signedIn = await submitLogin(t.app, start, PASSWORD);
    const resumeUrl = String(signedIn.response.headers.location);
    // Another browser (no CSRF cookie of the one that started it), even with a session of its own.
    const other = await signInForCode(t.app);
    const session = /pinpoint_session=[^;]+/.exec(other.cookies)?.[0] ?? '';
    const elsewhere = await t.app.inject({ url: resumeUrl, headers: { cookie: session } });
    assert.equal(elsewhere.statusCode, 400);
    assert.equal(elsewhere.headers.location, undefined);
    // The browser that started it, without its session: sent back to sign in, the request kept.
    const csrfOnly = /pinpoint_csrf=[^;]+/.exec(signedIn.cookies)?.[0] ?? '';
    const notSignedIn = await t.app.inject({ url: resumeUrl, headers: { cookie: csrfOnly } });
    assert.equal(notSignedIn.statusCode, 303);
    assert.match(String(notSignedIn.headers.location), /^\/login\?login=/);
    // And with it: the code.
    const resumed = await resumeAuthorization(t.app, signedIn.response, signedIn.cookies);
    assert.ok(new URL(String(resumed.response.headers.location)).searchParams.get('code'));
    // A forged or unknown login id: the error page.
    assert.equal((await t.app.inject({ url: '/authorize/resume?login=AAAAAAAAAAAAAAAAAAAAAAAA', headers: { cookie: signedIn.cookies } })).statusCode, 400);
  });

  test('the session cookie is HttpOnly and SameSite=Lax (and not Secure on a loopback http issuer)', async () => {
    const grant = await signInForCode(t.app);
    assert.ok(grant.cookies.includes('pinpoint_session='));
    const start = await authorize(t.app, requestPairs());
    const signedIn = await submitLogin(t.app, start, PASSWORD);
    const setCookie = signedIn.response.headers['set-cookie'];
    const lines = Array.isArray(setCookie) ? setCookie : [String(setCookie)];
    const session = lines.find((line) => line.startsWith('pinpoint_session='));
    assert.ok(session, `session cookie set: ${lines.join(' | ')}`);
    const attributes = session.split(';').map((part) => part.trim());
    assert.ok(attributes.includes('HttpOnly'), session);
    assert.ok(attributes.includes('SameSite=Lax'), session);
    assert.ok(attributes.includes('Path=/'), session);
  });

  test('a signed-in person is not asked again: the second /authorize redirects straight to the client with a code', async () => {
    const first = await signInForCode(t.app);
    const { verifier, challenge } = pkce();
    const second = await authorize(t.app, requestPairs({ replace: { code_challenge: challenge, state: 'st-again' }, resources: [API] }), first.cookies);
    assert.equal(second.statusCode, 303, second.body);
    const location = new URL(String(second.headers.location));
    assert.equal(`${location.origin}${location.pathname}`, REDIRECT);
    assert.equal(location.searchParams.get('state'), 'st-again');
    assert.equal(location.searchParams.get('iss'), ISSUER);
    const code = location.searchParams.get('code');
    assert.ok(code);
    const exchanged = await exchangeCode(t.app, { code, verifier });
    assert.equal(exchanged.statusCode, 200, exchanged.body);
    assert.equal(claimsOf(exchanged.json().access_token).aud, API);
    assert.equal(claimsOf(exchanged.json().access_token).sub, 'alice');
  });

  test('a signed-in person is still checked: a refused resource redirects with the error, no code', async () => {
    const first = await signInForCode(t.app);
    const second = await authorize(t.app, requestPairs({ resources: [API, LOGICAL] }), first.cookies);
    assertErrorRedirect(second, 'invalid_target', notRequestable(LOGICAL));
  });

  test('a forged session cookie is no session', async () => {
    const response = await authorize(t.app, requestPairs(), 'pinpoint_session=forged-value');
    assertSentToSignIn(response);
  });

  test('prompt=login asks again even with a session', async () => {
    const first = await signInForCode(t.app);
    assertSentToSignIn(await authorize(t.app, requestPairs({ extra: [['prompt', 'login']] }), first.cookies));
  });

  test("the sign-in page names a configured client by its display_name (escaped), else by its client_id", async () => {
    const base = await testConfig();
    const webapp = base.clients.get('webapp');
    assert.ok(webapp);
    const named = await testApp({ config: { ...base, clients: new Map([...base.clients, ['webapp', { ...webapp, displayName: 'Web <b>app</b>' }]]) } });
    try {
      const asked = await authorize(named.app, requestPairs());
      const page = await named.app.inject({ url: String(asked.headers.location), headers: { cookie: cookieJar('', asked) } });
      assert.ok(page.body.includes('to continue to <strong>Web &#60;b&#62;app&#60;/b&#62;</strong>'), page.body);
    } finally {
      await named.app.close();
    }
    const asked = await authorize(t.app, requestPairs());
    const page = await t.app.inject({ url: String(asked.headers.location), headers: { cookie: cookieJar('', asked) } });
    assert.ok(page.body.includes('to continue to <strong>webapp</strong>'), page.body);
  });

  test('signing in again ends the session the browser had: its old cookie no longer gives a code', async () => {
    const first = await signInForCode(t.app);
    const asked = await authorize(t.app, requestPairs({ extra: [['prompt', 'login']] }), first.cookies);
    assertSentToSignIn(asked);
    let cookies = cookieJar(first.cookies, asked);
    const page = await t.app.inject({ url: String(asked.headers.location), headers: { cookie: cookies } });
    cookies = cookieJar(cookies, page);
    const signedIn = await resubmit(t.app, page, cookies, PASSWORD);
    assert.equal(signedIn.statusCode, 303, signedIn.body);
    const renewed = cookieJar(cookies, signedIn);
    const sessionOf = (jar: string): string => /(?:^|; )pinpoint_session=([^;]*)/.exec(jar)?.[1] ?? '';
    assert.notEqual(sessionOf(renewed), sessionOf(first.cookies), 'a new session cookie');
    const withOld = await authorize(t.app, requestPairs({ extra: [['prompt', 'none']] }), `pinpoint_session=${sessionOf(first.cookies)}`);
    assertErrorRedirect(withOld, 'login_required', 'the person is not signed in');
    const withNew = await authorize(t.app, requestPairs({ extra: [['prompt', 'none']] }), renewed);
    assert.ok(new URL(String(withNew.headers.location)).searchParams.get('code'), 'the new session gives a code');
  });

  test('prompt=none without a session redirects with login_required', async () => {
    const response = await authorize(t.app, requestPairs({ extra: [['prompt', 'none']] }));
    assertErrorRedirect(response, 'login_required', 'the person is not signed in');
  });

  test('prompt=none with a session gives a code', async () => {
    const first = await signInForCode(t.app);
    const response = await authorize(t.app, requestPairs({ extra: [['prompt', 'none']] }), first.cookies);
    assert.equal(response.statusCode, 303);
    assert.ok(new URL(String(response.headers.location)).searchParams.get('code'));
  });
});

describe('sign-in attempt limits', () => {
  test('per user: after the limit of wrong passwords, 429 with Retry-After, even for the right password', async () => {
    const t = await testApp({ limits: { loginFailures: 2 } });
    try {
      const start = await authorize(t.app, requestPairs());
      const first = await submitLogin(t.app, start, 'wrong-1');
      assert.equal(first.response.statusCode, 401);
      const second = await resubmit(t.app, first.response, first.cookies, 'wrong-2');
      assert.equal(second.statusCode, 401);
      const third = await resubmit(t.app, second, first.cookies, 'wrong-3');
      assert.equal(third.statusCode, 429);
      const retryAfter = Number(third.headers['retry-after']);
      assert.ok(Number.isInteger(retryAfter) && retryAfter > 0, `Retry-After: ${third.headers['retry-after']}`);
      assertNoFraming(third);
      const right = await resubmit(t.app, third, first.cookies, PASSWORD);
      assert.equal(right.statusCode, 429);
      assert.ok(!String(right.headers['set-cookie'] ?? '').includes('pinpoint_session='));
    } finally {
      await t.app.close();
    }
  });

  test('per user: the window ends and the right password works again', async () => {
    let now = Date.now();
    const t = await testApp({ limits: { loginFailures: 1, loginWindowMs: 60_000 }, now: () => now });
    try {
      const start = await authorize(t.app, requestPairs());
      const wrong = await submitLogin(t.app, start, 'wrong');
      assert.equal(wrong.response.statusCode, 401);
      const locked = await resubmit(t.app, wrong.response, wrong.cookies, PASSWORD);
      assert.equal(locked.statusCode, 429);
      now += 61_000;
      const start2 = await authorize(t.app, requestPairs());
      const right = await submitLogin(t.app, start2, PASSWORD);
      assert.equal(right.response.statusCode, 303, right.response.body);
    } finally {
      await t.app.close();
    }
  });

  test('per address: wrong passwords for several users count toward the address limit (with its login requests)', async () => {
    const t = await testApp({ limits: { addressFailures: 3 } });
    try {
      const start = await authorize(t.app, requestPairs());
      const first = await submitLogin(t.app, start, 'x', 'bob');
      assert.equal(first.response.statusCode, 401);
      const second = await resubmit(t.app, first.response, first.cookies, 'y', 'carol');
      assert.equal(second.statusCode, 401);
      const third = await resubmit(t.app, second, first.cookies, PASSWORD, 'alice');
      assert.equal(third.statusCode, 429);
      assert.ok(Number(third.headers['retry-after']) > 0);
    } finally {
      await t.app.close();
    }
  });

});

describe('loopback redirect URIs of configured clients (RFC 8252 §7.3, DESIGN.md §3)', () => {
  test('registered without a port: any port is accepted and the code comes back to that port; with a port: only that port', async () => {
    const config = await testConfig();
    const spa = config.clients.get('spa');
    assert.ok(spa);
    const nativeApp = { ...spa, clientId: 'native', redirectUris: ['http://127.0.0.1/callback', 'http://[::1]:7000/cb'] };
    const t = await testApp({ config: { ...config, clients: new Map([...config.clients, ['native', nativeApp]]) } });
    try {
      const ask = (redirect: string): Promise<LightMyRequestResponse> =>
        authorize(t.app, requestPairs({ replace: { client_id: 'native', redirect_uri: redirect } }));
      assertSentToSignIn(await ask('http://127.0.0.1:53682/callback'));
      assertSentToSignIn(await ask('http://[::1]:7000/cb'));
      for (const refused of ['http://[::1]:7001/cb', 'http://127.0.0.1:53682/callback/', 'http://localhost:53682/callback', 'https://127.0.0.1:53682/callback']) {
        assertErrorPage(await ask(refused), 'invalid_request');
      }
      const grant = await signInForCode(t.app, { clientId: 'native', extra: [] , redirectUri: 'http://127.0.0.1:53682/callback' });
      assert.equal(grant.location.port, '53682');
    } finally {
      await t.app.close();
    }
  });
});

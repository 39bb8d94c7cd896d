/** Upstream OpenID Connect sign-in against a real oidc-provider, over real sockets, driven like a browser. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createLocalJWKSet, jwtVerify } from 'jose';
import type { Config, FederationRecord } from '../src/config/types.js';
import { createLogger } from '../src/log.js';
import { basic, form, pkce, REDIRECT, SECRET, testApp, testConfig, type TestApp } from './helpers/app.js';
import { startCraftedUpstream, type CraftedUpstream, type Scenario } from './helpers/crafted-upstream.js';
import { federation, freePort, startUpstream, upstreamEmail, type Upstream } from './helpers/upstream.js';

/** fetch with one cookie jar per origin and redirects followed by hand, as a browser would. */
class Browser {
  /** Every URL requested, in order. */
  readonly visited: string[] = [];
  readonly #jars = new Map<string, Map<string, string>>();

  /** Drops the cookies of one origin (a browser that has lost its session there and kept the others). */
  forget(origin: string): void {
    this.#jars.delete(new URL(origin).origin);
  }

  /** Whether the browser holds a cookie named `name` for `origin`. */
  holds(origin: string, name: string): boolean {
    return this.#jars.get(new URL(origin).origin)?.has(name) ?? false;
  }

  async request(url: string, init: { method?: string; body?: string } = {}): Promise<Response> {
    const target = new URL(url);
    const jar = this.#jars.get(target.origin) ?? new Map<string, string>();
    this.#jars.set(target.origin, jar);
    const headers: Record<string, string> = {};
    if (jar.size > 0) headers.cookie = [...jar].map(([name, value]) => `${name}=${value}`).join('; ');
    if (init.body !== undefined) headers['content-type'] = 'application/x-www-form-urlencoded';
    const response = await fetch(target, { method: init.method ?? 'GET', body: init.body, headers, redirect: 'manual' });
    this.visited.push(target.href);
    for (const line of response.headers.getSetCookie()) {
      const [pair = '', ...attributes] = line.split(';');
      const eq = pair.indexOf('=');
      const name = pair.slice(0, eq).trim();
      const value = pair.slice(eq + 1).trim();
      const expired = attributes.some((a) => /^\s*max-age=0\s*$/i.test(a) || /^\s*expires=.*1970/i.test(a));
      if (expired || value === '') jar.delete(name);
      else jar.set(name, value);
    }
    return response;
  }

  /** Follows redirects until a page answers, or until the next location starts with `stopAt` (not fetched). */
  async navigate(url: string, init: { method?: string; body?: string } = {}, stopAt?: string): Promise<{ url: string; response: Response; body: string }> {
    let current = url;
    let response = await this.request(current, init);
    for (let hops = 0; hops < 20 && response.status >= 300 && response.status < 400; hops += 1) {
      const next = new URL(response.headers.get('location') ?? '', current).href;
      if (stopAt !== undefined && next.startsWith(stopAt)) return { url: next, response, body: await response.text() };
      current = next;
      response = await this.request(current);
    }
    return { url: current, response, body: await response.text() };
  }
}

/** The action of the page's first form, resolved against the page's URL. */
function formAction(page: { url: string; body: string }): string {
  const match = /<form[^>]*action="([^"]*)"/.exec(page.body);
  assert.ok(match, `no form in ${page.url}: ${page.body.slice(0, 300)}`);
  return new URL((match[1] as string).replace(/&amp;/g, '&'), page.url).href;
}

function federationLink(body: string): string {
  const match = /href="([^"]*\/federation\/start[^"]*)"/.exec(body);
  assert.ok(match, 'the sign-in page has no upstream link');
  return (match[1] as string).replace(/&amp;/g, '&');
}

function authorizeQuery(challenge: string, state = 'st-fed', nonce = 'n-fed'): string {
  return form([
    ['response_type', 'code'],
    ['client_id', 'webapp'],
    ['redirect_uri', REDIRECT],
    ['scope', 'openid profile email'],
    ['state', state],
    ['nonce', nonce],
    ['code_challenge', challenge],
    ['code_challenge_method', 'S256'],
  ]);
}

/** Signs in at the upstream's dev interactions (any login) and confirms consent; ends at Pinpoint's callback. */
async function upstreamSignIn(browser: Browser, upstreamUrl: string, login: string): Promise<{ url: string; response: Response; body: string }> {
  const loginPage = await browser.navigate(upstreamUrl);
  assert.equal(loginPage.response.status, 200, loginPage.body.slice(0, 300));
  assert.match(loginPage.body, /name="login"/);
  const consentPage = await browser.navigate(formAction(loginPage), {
    method: 'POST',
    body: form([['prompt', 'login'], ['login', login], ['password', 'anything']]),
  });
  assert.equal(consentPage.response.status, 200, consentPage.body.slice(0, 300));
  assert.match(consentPage.body, /name="prompt" value="consent"/);
  return browser.navigate(formAction(consentPage), { method: 'POST', body: form([['prompt', 'consent']]) }, REDIRECT);
}

interface Pinpoint extends TestApp {
  readonly baseUrl: string;
  readonly logLines: string[];
}

async function startPinpoint(port: number, overrides: Partial<Config>, now?: () => number): Promise<Pinpoint> {
  const baseUrl = `http://127.0.0.1:${port}`;
  const logLines: string[] = [];
  const logger = createLogger('trace', { write: (line: string) => void logLines.push(line) });
  const t = await testApp({ config: await testConfig({ baseUrl, ...overrides }), logger, ...(now !== undefined && { now }) });
  await t.app.listen({ host: '127.0.0.1', port });
  return { ...t, baseUrl, logLines };
}

async function exchange(pinpoint: Pinpoint, code: string, verifier: string): Promise<Response> {
  return fetch(`${pinpoint.baseUrl}/token`, {
    method: 'POST',
    headers: { authorization: basic('webapp', SECRET), 'content-type': 'application/x-www-form-urlencoded' },
    body: form([['grant_type', 'authorization_code'], ['code', code], ['redirect_uri', REDIRECT], ['code_verifier', verifier]]),
  });
}

function assertCleanErrorPage(page: { response: Response; body: string }, status: number): void {
  assert.equal(page.response.status, status, page.body.slice(0, 500));
  assert.match(page.response.headers.get('content-type') ?? '', /^text\/html/);
  assert.match(page.body, /This request cannot be completed/);
  assert.doesNotMatch(page.body, /\bat .*\(.*:\d+:\d+\)|node_modules|Error:/);
}

describe('federation: sign-in through an upstream OpenID Connect provider', () => {
  let upstream: Upstream;
  let pinpoint: Pinpoint;

  before(async () => {
    const port = await freePort();
    upstream = await startUpstream([`http://127.0.0.1:${port}/federation/upstream/callback`, `http://127.0.0.1:${port}/federation/misconfigured/callback`]);
    pinpoint = await startPinpoint(port, {
      federations: new Map([
        ['upstream', federation('upstream', upstream.issuer)],
        ['misconfigured', federation('misconfigured', upstream.issuer, { clientSecret: 'not-the-secret' })],
      ]),
    });
  });
  after(async () => {
    await pinpoint.app.close();
    await upstream.close();
  });

  test('authorize -> login page -> upstream login and consent -> callback -> code -> tokens for upstream:<sub>', async () => {
    const browser = new Browser();
    const { verifier, challenge } = pkce();
    const loginPage = await browser.navigate(`${pinpoint.baseUrl}/authorize?${authorizeQuery(challenge)}`);
    assert.equal(loginPage.response.status, 200);
    assert.match(loginPage.body, /Sign in with upstream/);
    assert.match(loginPage.body, /name="password"/, 'local users keep their form next to the upstream link');

    const started = await browser.request(new URL(federationLink(loginPage.body), pinpoint.baseUrl).href);
    assert.equal(started.status, 303);
    const upstreamUrl = new URL(started.headers.get('location') ?? '');
    assert.equal(upstreamUrl.origin, upstream.issuer);
    assert.equal(upstreamUrl.searchParams.get('redirect_uri'), `${pinpoint.baseUrl}/federation/upstream/callback`);
    assert.equal(upstreamUrl.searchParams.get('code_challenge_method'), 'S256');
    assert.equal(upstreamUrl.searchParams.get('scope'), 'openid email profile');
    assert.ok(upstreamUrl.searchParams.get('nonce'));
    assert.ok(upstreamUrl.searchParams.get('state'));

    const done = await upstreamSignIn(browser, upstreamUrl.href, 'bob');
    const redirect = new URL(done.url);
    assert.equal(`${redirect.origin}${redirect.pathname}`, REDIRECT);
    assert.equal(redirect.searchParams.get('state'), 'st-fed');
    assert.equal(redirect.searchParams.get('iss'), pinpoint.baseUrl);
    const code = redirect.searchParams.get('code');
    assert.ok(code);

    const tokenResponse = await exchange(pinpoint, code, verifier);
    assert.equal(tokenResponse.status, 200);
    const tokens = (await tokenResponse.json()) as { access_token: string; id_token: string };
    const jwks = createLocalJWKSet((await (await fetch(`${pinpoint.baseUrl}/jwks`)).json()) as Parameters<typeof createLocalJWKSet>[0]);
    const idToken = await jwtVerify(tokens.id_token, jwks, { issuer: pinpoint.baseUrl, audience: 'webapp' });
    assert.equal(idToken.payload.sub, 'upstream:bob');
    assert.equal(idToken.payload.nonce, 'n-fed');
    assert.equal(idToken.payload.email, upstreamEmail('bob'));
    assert.equal(idToken.payload.name, 'Upstream bob');

    const userinfo = await fetch(`${pinpoint.baseUrl}/userinfo`, { headers: { authorization: `Bearer ${tokens.access_token}` } });
    assert.equal(userinfo.status, 200);
    assert.deepEqual(await userinfo.json(), { sub: 'upstream:bob', email: upstreamEmail('bob'), name: 'Upstream bob' });

    // The callback URL is single use: replaying it (the state was taken) gives a 400 page.
    const callbackUrl = new URL(browser.visited.find((visited) => visited.includes('/federation/upstream/callback')) ?? '');
    assert.equal(callbackUrl.pathname, '/federation/upstream/callback');
    assert.ok(browser.visited.some((visited) => new URL(visited).pathname === '/authorize/resume'), 'the callback resumed the authorization');
    const replayed = await browser.navigate(callbackUrl.href);
    assertCleanErrorPage(replayed, 400);
    assert.match(replayed.body, /expired, was already used/);

    // The session now exists: a second /authorize completes without any sign-in.
    const again = await browser.navigate(`${pinpoint.baseUrl}/authorize?${authorizeQuery(pkce().challenge, 'st-2')}`, {}, REDIRECT);
    assert.equal(new URL(again.url).searchParams.get('state'), 'st-2');

    const secrets = [code, tokens.access_token, tokens.id_token, verifier, callbackUrl.searchParams.get('code') ?? 'x', callbackUrl.searchParams.get('state') ?? 'x'];
    for (const line of pinpoint.logLines) {
      for (const secret of secrets) assert.ok(!line.includes(secret), `log line holds a secret: ${line}`);
    }
    assert.ok(pinpoint.logLines.some((line) => line.includes('/federation/upstream/callback')), 'the access log saw the callback');
  });

  test('an unknown state, a missing one, or a callback reaching another browser gives a 400 page', async () => {
    const browser = new Browser();
    const unknown = await browser.navigate(`${pinpoint.baseUrl}/federation/upstream/callback?code=abc&state=${'A'.repeat(43)}`);
    assertCleanErrorPage(unknown, 400);
    const missing = await browser.navigate(`${pinpoint.baseUrl}/federation/upstream/callback?code=abc`);
    assertCleanErrorPage(missing, 400);

    const loginPage = await browser.navigate(`${pinpoint.baseUrl}/authorize?${authorizeQuery(pkce().challenge)}`);
    const started = await browser.request(new URL(federationLink(loginPage.body), pinpoint.baseUrl).href);
    const state = new URL(started.headers.get('location') ?? '').searchParams.get('state') ?? '';
    const otherBrowser = new Browser();
    const elsewhere = await otherBrowser.navigate(`${pinpoint.baseUrl}/federation/upstream/callback?code=abc&state=${state}`);
    assertCleanErrorPage(elsewhere, 400);
    // The refused answer wrote nothing: the sign-in still completes in the browser that started it.
    const done = await upstreamSignIn(browser, started.headers.get('location') ?? '', 'frank');
    assert.ok(new URL(done.url).searchParams.get('code'), done.url);
  });

  test('a response on another upstream\'s callback, or naming another issuer (RFC 9207), is refused', async () => {
    const browser = new Browser();
    const loginPage = await browser.navigate(`${pinpoint.baseUrl}/authorize?${authorizeQuery(pkce().challenge)}`);
    const started = await browser.request(new URL(federationLink(loginPage.body), pinpoint.baseUrl).href);
    const state = new URL(started.headers.get('location') ?? '').searchParams.get('state') ?? '';
    const wrongPath = await browser.navigate(`${pinpoint.baseUrl}/federation/misconfigured/callback?code=abc&state=${state}`);
    assertCleanErrorPage(wrongPath, 400);
    assert.match(wrongPath.body, /does not come from the sign-in method it was sent to/);

    const again = await browser.navigate(`${pinpoint.baseUrl}/authorize?${authorizeQuery(pkce().challenge)}`);
    const restarted = await browser.request(new URL(federationLink(again.body), pinpoint.baseUrl).href);
    const secondState = new URL(restarted.headers.get('location') ?? '').searchParams.get('state') ?? '';
    const wrongIssuer = await browser.navigate(
      `${pinpoint.baseUrl}/federation/upstream/callback?${form([['code', 'abc'], ['state', secondState], ['iss', 'https://attacker.example']])}`,
    );
    assertCleanErrorPage(wrongIssuer, 400);
    assert.match(wrongIssuer.body, /does not come from the sign-in method it was sent to/);
  });

  test('an unknown upstream name or an expired login gives a 400 page', async () => {
    const browser = new Browser();
    const loginPage = await browser.navigate(`${pinpoint.baseUrl}/authorize?${authorizeQuery(pkce().challenge)}`);
    const link = new URL(federationLink(loginPage.body), pinpoint.baseUrl);
    link.searchParams.set('upstream', 'nope');
    assertCleanErrorPage(await browser.navigate(link.href), 400);
    link.searchParams.set('upstream', 'upstream');
    link.searchParams.set('login', 'x'.repeat(24));
    assertCleanErrorPage(await browser.navigate(link.href), 400);
  });

  test('the person cancels at the upstream: its access_denied is shown on a 400 page', async () => {
    const browser = new Browser();
    const loginPage = await browser.navigate(`${pinpoint.baseUrl}/authorize?${authorizeQuery(pkce().challenge)}`);
    const started = await browser.request(new URL(federationLink(loginPage.body), pinpoint.baseUrl).href);
    const upstreamLogin = await browser.navigate(started.headers.get('location') ?? '');
    const abort = /href="([^"]*\/abort)"/.exec(upstreamLogin.body);
    assert.ok(abort, 'the upstream login page has a cancel link');
    const page = await browser.navigate(new URL(abort[1] as string, upstreamLogin.url).href, {}, REDIRECT);
    assert.equal(new URL(page.url).pathname, '/federation/upstream/callback');
    assertCleanErrorPage(page, 400);
    assert.match(page.body, /access_denied/);
    assert.match(page.body, /upstream did not sign you in \(it answered &#34;access_denied&#34;\)/);
  });

  test('a token request the upstream refuses (wrong client secret) gives a 502 page and a log line naming its error', async () => {
    const browser = new Browser();
    const loginPage = await browser.navigate(`${pinpoint.baseUrl}/authorize?${authorizeQuery(pkce().challenge)}`);
    assert.match(loginPage.body, /Sign in with misconfigured/);
    const link = new URL(federationLink(loginPage.body), pinpoint.baseUrl);
    link.searchParams.set('upstream', 'misconfigured');
    const started = await browser.request(link.href);
    assert.equal(started.status, 303);
    const done = await upstreamSignIn(browser, started.headers.get('location') ?? '', 'erin');
    assertCleanErrorPage(done, 502);
    assert.match(done.body, /the sign-in with misconfigured could not be completed/);
    const code = new URL(done.response.url).searchParams.get('code') ?? 'no code';
    const failure = pinpoint.logLines.find((line) => line.includes('upstream sign-in failed') && line.includes('"upstream":"misconfigured"'));
    assert.ok(failure, 'a log line says the upstream sign-in failed');
    assert.match(failure, /"upstreamError":"invalid_client"/);
    assert.ok(!pinpoint.logLines.some((line) => line.includes(code) || line.includes('not-the-secret')), 'no log line holds the code or the secret');
  });

  test("an upstream error code is escaped on the page", async () => {
    const browser = new Browser();
    const loginPage = await browser.navigate(`${pinpoint.baseUrl}/authorize?${authorizeQuery(pkce().challenge)}`);
    const started = await browser.request(new URL(federationLink(loginPage.body), pinpoint.baseUrl).href);
    const state = new URL(started.headers.get('location') ?? '').searchParams.get('state') ?? '';
    const page = await browser.navigate(`${pinpoint.baseUrl}/federation/upstream/callback?${form([['error', '<script>alert(1)</script>'], ['state', state]])}`);
    assertCleanErrorPage(page, 400);
    assert.doesNotMatch(page.body, /<script>/);
    assert.match(page.body, /&#60;script&#62;alert\(1\)&#60;\/script&#62;/);
  });
});

describe('federation: an upstream that is down, then back', () => {
  let pinpoint: Pinpoint;
  let downPort: number;
  let upstream: Upstream | undefined;
  let clockOffset = 0;

  before(async () => {
    const port = await freePort();
    downPort = await freePort();
    pinpoint = await startPinpoint(port, { federations: new Map([['campus', federation('campus', `http://127.0.0.1:${downPort}`)]]) }, () => Date.now() + clockOffset);
  });
  after(async () => {
    await pinpoint.app.close();
    await upstream?.close();
  });

  test('start answers a 502 page without a stack trace; the failed discovery is remembered for 15 s, then tried again', async () => {
    const browser = new Browser();
    const loginPage = await browser.navigate(`${pinpoint.baseUrl}/authorize?${authorizeQuery(pkce().challenge)}`);
    const link = new URL(federationLink(loginPage.body), pinpoint.baseUrl).href;
    const down = await browser.navigate(link);
    assertCleanErrorPage(down, 502);
    assert.match(down.body, /campus cannot be reached/);
    assert.ok(pinpoint.logLines.some((line) => line.includes('upstream sign-in failed') && line.includes('ECONNREFUSED')));

    upstream = await startUpstream(`${pinpoint.baseUrl}/federation/campus/callback`, downPort);
    // Within 15 s the failure is answered from memory: a loop of starts cannot make the server fetch once per request.
    assertCleanErrorPage(await browser.navigate(link), 502);
    clockOffset += 15_001;
    const up = await browser.request(link);
    assert.equal(up.status, 303);
    assert.ok((up.headers.get('location') ?? '').startsWith(`${upstream.issuer}/`));
  });
});

describe('federation: starts towards an upstream whose discovery fails', () => {
  const ADDRESS_FAILURES = 5;
  let upstream: CraftedUpstream;
  let pinpoint: Pinpoint;

  before(async () => {
    upstream = await startCraftedUpstream({ down: { discoveryStatus: 500 } });
    const base = await testConfig();
    pinpoint = await startPinpoint(await freePort(), {
      federations: new Map([['down', federation('down', upstream.issuerOf('down'))]]),
      limits: { ...base.limits, addressFailures: ADDRESS_FAILURES },
    });
  });
  after(async () => {
    await pinpoint.app.close();
    await upstream.close();
  });

  test('count against the address (429 at address_failures) and make one discovery request, not one per start', async () => {
    const browser = new Browser();
    const loginPage = await browser.navigate(`${pinpoint.baseUrl}/authorize?${authorizeQuery(pkce().challenge)}`);
    const link = new URL(federationLink(loginPage.body), pinpoint.baseUrl).href;
    const statuses: number[] = [];
    for (let i = 0; i < 30; i += 1) statuses.push((await browser.request(link)).status);
    // The /authorize kept a login request: it and the starts share the address's budget.
    assert.deepEqual(statuses.slice(0, ADDRESS_FAILURES - 1), Array<number>(ADDRESS_FAILURES - 1).fill(502), JSON.stringify(statuses));
    assert.ok(statuses.slice(ADDRESS_FAILURES - 1).every((status) => status === 429), JSON.stringify(statuses));
    assert.equal(upstream.discoveryRequests('down'), 1);
  });
});

describe('federation: the only sign-in method', () => {
  let upstream: Upstream;
  let pinpoint: Pinpoint;

  before(async () => {
    const port = await freePort();
    upstream = await startUpstream(`http://127.0.0.1:${port}/federation/solo/callback`);
    pinpoint = await startPinpoint(port, {
      users: new Map(),
      federations: new Map([['solo', federation('solo', upstream.issuer, { subjectClaim: 'email' })]]),
    });
  });
  after(async () => {
    await pinpoint.app.close();
    await upstream.close();
  });

  test('with no local users and one upstream, /authorize goes straight to it; subject_claim names the subject', async () => {
    const browser = new Browser();
    const { verifier, challenge } = pkce();
    const authorize = await browser.request(`${pinpoint.baseUrl}/authorize?${authorizeQuery(challenge)}`);
    assert.equal(authorize.status, 303);
    const start = new URL(authorize.headers.get('location') ?? '', pinpoint.baseUrl);
    assert.equal(start.pathname, '/federation/start');
    assert.equal(start.searchParams.get('upstream'), 'solo');
    const started = await browser.request(start.href);
    assert.equal(started.status, 303);
    assert.ok((started.headers.get('location') ?? '').startsWith(`${upstream.issuer}/`));

    const done = await upstreamSignIn(browser, started.headers.get('location') ?? '', 'carol');
    const code = new URL(done.url).searchParams.get('code');
    assert.ok(code, done.url);
    const tokens = (await (await exchange(pinpoint, code, verifier)).json()) as { id_token: string };
    const payload = JSON.parse(Buffer.from(tokens.id_token.split('.')[1] ?? '', 'base64url').toString()) as Record<string, unknown>;
    assert.equal(payload.sub, `solo:${upstreamEmail('carol')}`);
  });
});

describe('federation: an email the upstream has not verified', () => {
  let upstream: Upstream;
  let pinpoint: Pinpoint;

  before(async () => {
    const port = await freePort();
    upstream = await startUpstream(`http://127.0.0.1:${port}/federation/unverified/callback`, 0, { emailVerified: false });
    pinpoint = await startPinpoint(port, { users: new Map(), federations: new Map([['unverified', federation('unverified', upstream.issuer)]]) });
  });
  after(async () => {
    await pinpoint.app.close();
    await upstream.close();
  });

  test('is not passed on: no email in the ID token or at /userinfo (DESIGN.md §7)', async () => {
    const browser = new Browser();
    const { verifier, challenge } = pkce();
    const authorize = await browser.request(`${pinpoint.baseUrl}/authorize?${authorizeQuery(challenge)}`);
    const started = await browser.request(new URL(authorize.headers.get('location') ?? '', pinpoint.baseUrl).href);
    const done = await upstreamSignIn(browser, started.headers.get('location') ?? '', 'dave');
    const code = new URL(done.url).searchParams.get('code');
    assert.ok(code, done.url);
    const tokens = (await (await exchange(pinpoint, code, verifier)).json()) as { id_token: string; access_token: string };
    const payload = JSON.parse(Buffer.from(tokens.id_token.split('.')[1] ?? '', 'base64url').toString()) as Record<string, unknown>;
    assert.equal(payload.sub, 'unverified:dave');
    assert.equal(payload.email, undefined);
    assert.equal(payload.name, 'Upstream dave');
    const userinfo = await fetch(`${pinpoint.baseUrl}/userinfo`, { headers: { authorization: `Bearer ${tokens.access_token}` } });
    assert.deepEqual(await userinfo.json(), { sub: 'unverified:dave', name: 'Upstream dave' });
  });
});

/** A fresh browser's sign-in through upstream `name`: the page it ended on, and the tokens when a code came back. */
async function signInThrough(
  pinpoint: Pinpoint,
  name: string,
  extra: readonly (readonly [string, string])[] = [],
): Promise<{ browser: Browser; page: { url: string; response: Response; body: string }; tokens?: { id_token: string; access_token: string }; idToken?: Record<string, unknown> }> {
  const browser = new Browser();
  const { verifier, challenge } = pkce();
  const loginPage = await browser.navigate(`${pinpoint.baseUrl}/authorize?${authorizeQuery(challenge)}${extra.length > 0 ? `&${form(extra)}` : ''}`);
  const link = new URL(federationLink(loginPage.body), pinpoint.baseUrl);
  link.searchParams.set('upstream', name);
  const page = await browser.navigate(link.href, {}, REDIRECT);
  const code = page.url.startsWith(REDIRECT) ? new URL(page.url).searchParams.get('code') : null;
  if (code === null) return { browser, page };
  const response = await exchange(pinpoint, code, verifier);
  assert.equal(response.status, 200);
  const tokens = (await response.json()) as { id_token: string; access_token: string };
  return { browser, page, tokens, idToken: JSON.parse(Buffer.from(tokens.id_token.split('.')[1] ?? '', 'base64url').toString()) as Record<string, unknown> };
}

async function userinfoOf(pinpoint: Pinpoint, accessToken: string): Promise<unknown> {
  return (await fetch(`${pinpoint.baseUrl}/userinfo`, { headers: { authorization: `Bearer ${accessToken}` } })).json();
}

describe('federation: what an upstream answer must show before it is believed', () => {
  // The ID token vouches (email_verified: true) without an address; userinfo has an address it did not verify.
  const vouchingForAnother: Scenario = {
    idToken: ({ email: _email, ...claims }) => ({ ...claims, email_verified: true }),
    userinfo: { sub: 'user-1', email: 'ceo@corp.example', email_verified: false, name: 'Crafted User' },
  };
  /** What the crafted upstream answers, by scenario (an upstream each); a test may change one between sign-ins. */
  const scenarios: Record<string, Scenario> = {
    mail: {},
    pair: vouchingForAnother,
    mailpair: vouchingForAnother,
    // The ID token has email and name; the subject claim is released at userinfo only (OIDC Core §5.4).
    username: { userinfo: { sub: 'user-1', preferred_username: 'jdoe', email: 'user-1@crafted.example', email_verified: true, name: 'Crafted User' } },
    valid: {},
    unsigned: { signing: 'none', algs: ['RS256', 'none'] },
    'unsigned-only': { signing: 'none', algs: ['none'] },
    forged: { signing: 'stranger' },
  };
  let upstream: CraftedUpstream;
  let pinpoint: Pinpoint;

  before(async () => {
    upstream = await startCraftedUpstream(scenarios);
    const upstreams: [string, Partial<FederationRecord>][] = [
      ['mail', { subjectClaim: 'email' }],
      ['pair', {}],
      ['mailpair', { subjectClaim: 'email' }],
      ['username', { subjectClaim: 'preferred_username' }],
      ['valid', {}],
      ['unsigned', {}],
      ['unsigned-only', {}],
      ['forged', {}],
    ];
    pinpoint = await startPinpoint(await freePort(), {
      federations: new Map(upstreams.map(([name, extra]) => [name, federation(name, upstream.issuerOf(name), extra)])),
    });
  });
  after(async () => {
    await pinpoint.app.close();
    await upstream.close();
  });

  test('subject_claim = "email": an upstream account with an unverified copy of an address does not become its owner', async () => {
    scenarios.mail = { idToken: (claims) => ({ ...claims, sub: 'victim-account', email: 'ceo@corp.example', email_verified: true, name: 'The CEO' }) };
    const victim = await signInThrough(pinpoint, 'mail');
    assert.equal(victim.idToken?.sub, 'mail:ceo@corp.example', victim.page.body.slice(0, 300));
    assert.ok(victim.tokens);

    scenarios.mail = { idToken: (claims) => ({ ...claims, sub: 'attacker-account', email: 'ceo@corp.example', email_verified: false, name: 'Attacker' }) };
    const attacker = await signInThrough(pinpoint, 'mail');
    assert.equal(attacker.tokens, undefined, 'no code for an address the upstream did not verify');
    assertCleanErrorPage(attacker.page, 502);
    assert.match(attacker.page.body, /the sign-in with mail could not be completed/);
    assert.equal(attacker.browser.holds(pinpoint.baseUrl, 'pinpoint_session'), false, 'no session was started');
    assert.ok(pinpoint.logLines.some((line) => line.includes('upstream did not verify the email the subject is made of')));
    // Nothing was written over the owner's claims.
    assert.deepEqual(await userinfoOf(pinpoint, victim.tokens.access_token), { sub: 'mail:ceo@corp.example', email: 'ceo@corp.example', name: 'The CEO' });

    // email_verified must come from the source of the email: the ID token's flag does not vouch for userinfo's address.
    const mixed = await signInThrough(pinpoint, 'mailpair');
    assert.equal(mixed.tokens, undefined);
    assertCleanErrorPage(mixed.page, 502);
  });

  test("email and email_verified are taken as a pair: the ID token's email_verified does not vouch for userinfo's address", async () => {
    const signedIn = await signInThrough(pinpoint, 'pair');
    assert.ok(signedIn.tokens, signedIn.page.body.slice(0, 300));
    assert.equal(signedIn.idToken?.sub, 'pair:user-1');
    assert.equal(signedIn.idToken?.email, undefined);
    assert.deepEqual(await userinfoOf(pinpoint, signedIn.tokens.access_token), { sub: 'pair:user-1', name: 'Crafted User' });
  });

  test('a subject claim released at userinfo only is asked there, even when the ID token has email and name', async () => {
    const signedIn = await signInThrough(pinpoint, 'username');
    assert.equal(signedIn.idToken?.sub, 'username:jdoe', signedIn.page.body.slice(0, 300));
    assert.equal(signedIn.idToken?.email, 'user-1@crafted.example');
  });

  test("the upstream ID token's signature is checked: unsigned (alg none, even when discovery lists it) or signed by another key is refused", async () => {
    const valid = await signInThrough(pinpoint, 'valid');
    assert.equal(valid.idToken?.sub, 'valid:user-1', valid.page.body.slice(0, 300));
    for (const name of ['unsigned', 'unsigned-only', 'forged']) {
      const refused = await signInThrough(pinpoint, name);
      assert.equal(refused.tokens, undefined, `${name} was accepted`);
      assertCleanErrorPage(refused.page, 502);
      assert.match(refused.page.body, new RegExp(`the sign-in with ${name} could not be completed`));
      assert.equal(refused.browser.holds(pinpoint.baseUrl, 'pinpoint_session'), false);
    }
  });
});

describe('federation: prompt=login and max_age reach a real upstream, and auth_time comes from it', () => {
  let upstream: Upstream;
  let pinpoint: Pinpoint;

  before(async () => {
    const port = await freePort();
    upstream = await startUpstream(`http://127.0.0.1:${port}/federation/upstream/callback`);
    pinpoint = await startPinpoint(port, { federations: new Map([['upstream', federation('upstream', upstream.issuer)]]) });
  });
  after(async () => {
    await pinpoint.app.close();
    await upstream.close();
  });

  /** /authorize with `extra` in `browser`, through the sign-in page to the upstream: where the upstream request was sent. */
  async function toUpstream(browser: Browser, challenge: string, extra: readonly (readonly [string, string])[]): Promise<URL> {
    const loginPage = await browser.navigate(`${pinpoint.baseUrl}/authorize?${authorizeQuery(challenge)}${extra.length > 0 ? `&${form(extra)}` : ''}`);
    const started = await browser.request(new URL(federationLink(loginPage.body), pinpoint.baseUrl).href);
    assert.equal(started.status, 303);
    return new URL(started.headers.get('location') ?? '');
  }

  async function idTokenFor(page: { url: string }, verifier: string): Promise<Record<string, unknown>> {
    const code = new URL(page.url).searchParams.get('code');
    assert.ok(code, page.url);
    const tokens = (await (await exchange(pinpoint, code, verifier)).json()) as { id_token: string };
    return JSON.parse(Buffer.from(tokens.id_token.split('.')[1] ?? '', 'base64url').toString()) as Record<string, unknown>;
  }

  test('prompt=login makes the upstream ask for the login again; the ID token then says when that happened', async () => {
    const browser = new Browser();
    const first = pkce();
    const done = await upstreamSignIn(browser, (await toUpstream(browser, first.challenge, [])).href, 'grace');
    const signedIn = await idTokenFor(done, first.verifier);
    // auth_time has whole seconds: wait for the next one, so a fresh sign-in is told from the first.
    await sleep(1100);

    const second = pkce();
    const askedAt = Math.floor(Date.now() / 1000);
    const upstreamRequest = await toUpstream(browser, second.challenge, [['prompt', 'login']]);
    assert.equal(upstreamRequest.searchParams.get('prompt'), 'login');
    // max_age=0 asks no more than prompt=login, and makes auth_time mandatory (OIDC Core §3.1.2.1).
    assert.equal(upstreamRequest.searchParams.get('max_age'), '0');
    // The upstream still has its session, yet asks for the login: the browser does not come straight back.
    const loginPage = await browser.navigate(upstreamRequest.href, {}, REDIRECT);
    assert.equal(new URL(loginPage.url).origin, upstream.issuer, loginPage.url);
    assert.match(loginPage.body, /name="login"/);
    let page = await browser.navigate(formAction(loginPage), { method: 'POST', body: form([['prompt', 'login'], ['login', 'grace'], ['password', 'anything']]) }, REDIRECT);
    if (!page.url.startsWith(REDIRECT)) page = await browser.navigate(formAction(page), { method: 'POST', body: form([['prompt', 'consent']]) }, REDIRECT);
    const reauthenticated = await idTokenFor(page, second.verifier);
    assert.equal(reauthenticated.sub, signedIn.sub);
    assert.ok(Number(reauthenticated.auth_time) >= askedAt, `auth_time ${String(reauthenticated.auth_time)} is not after the request (${askedAt})`);

    // max_age is passed on too; a Pinpoint session younger than it needs no upstream at all.
    const third = pkce();
    const young = await browser.navigate(`${pinpoint.baseUrl}/authorize?${authorizeQuery(third.challenge)}&${form([['max_age', '3600']])}`, {}, REDIRECT);
    assert.equal((await idTokenFor(young, third.verifier)).auth_time, reauthenticated.auth_time);
  });

  test("a sign-in the upstream answers from its own session has the upstream's auth_time, not the time of the answer", async () => {
    const browser = new Browser();
    const first = pkce();
    const done = await upstreamSignIn(browser, (await toUpstream(browser, first.challenge, [['max_age', '3600']])).href, 'heidi');
    const signedIn = await idTokenFor(done, first.verifier);
    assert.equal(typeof signedIn.auth_time, 'number');
    await sleep(1100);

    // Pinpoint's session is gone, the upstream's is not: max_age=3600 reaches it, and it answers without a login.
    browser.forget(pinpoint.baseUrl);
    const second = pkce();
    const upstreamRequest = await toUpstream(browser, second.challenge, [['max_age', '3600']]);
    assert.equal(upstreamRequest.searchParams.get('max_age'), '3600');
    assert.equal(upstreamRequest.searchParams.get('prompt'), null);
    const page = await browser.navigate(upstreamRequest.href, {}, REDIRECT);
    assert.ok(page.url.startsWith(REDIRECT), `the upstream asked again: ${page.url}`);
    assert.equal((await idTokenFor(page, second.verifier)).auth_time, signedIn.auth_time, 'the authentication happened at the first sign-in');
  });
});

describe('federation: an upstream that does not show the fresh authentication it was asked for', () => {
  const scenarios: Record<string, Scenario> = { stale: {} };
  let upstream: CraftedUpstream;
  let pinpoint: Pinpoint;

  before(async () => {
    upstream = await startCraftedUpstream(scenarios);
    pinpoint = await startPinpoint(await freePort(), { federations: new Map([['stale', federation('stale', upstream.issuerOf('stale'))]]) });
  });
  after(async () => {
    await pinpoint.app.close();
    await upstream.close();
  });

  const authTimeAgo = (seconds: number | undefined): Scenario => ({
    idToken: ({ auth_time: _dropped, ...claims }) => (seconds === undefined ? claims : { ...claims, auth_time: Math.floor(Date.now() / 1000) - seconds }),
  });

  test('prompt=login: refused when the ID token has no auth_time or one from before the request; nothing is started', async () => {
    for (const ago of [undefined, 3600, 60]) {
      scenarios.stale = authTimeAgo(ago);
      const refused = await signInThrough(pinpoint, 'stale', [['prompt', 'login']]);
      assert.equal(upstream.authorizationRequests('stale').at(-1)?.get('prompt'), 'login');
      assert.equal(upstream.authorizationRequests('stale').at(-1)?.get('max_age'), '0');
      assert.equal(refused.tokens, undefined, `auth_time ${String(ago)} s ago was taken for a fresh sign-in`);
      assertCleanErrorPage(refused.page, 502);
      assert.match(refused.page.body, /stale did not confirm that you signed in again, as the application asked/);
      assert.equal(refused.browser.holds(pinpoint.baseUrl, 'pinpoint_session'), false, 'no session was started');
    }
    assert.ok(pinpoint.logLines.some((line) => line.includes('upstream did not show the fresh authentication it was asked for')));
    // An authentication made for the request (its auth_time within the clock skew) is accepted.
    scenarios.stale = authTimeAgo(1);
    const accepted = await signInThrough(pinpoint, 'stale', [['prompt', 'login']]);
    assert.ok(accepted.idToken, accepted.page.body.slice(0, 300));
  });

  test('max_age: an earlier authentication young enough is accepted with its own auth_time; an older one is refused', async () => {
    scenarios.stale = authTimeAgo(30);
    const young = await signInThrough(pinpoint, 'stale', [['max_age', '60']]);
    const sent = upstream.authorizationRequests('stale').at(-1);
    assert.equal(sent?.get('max_age'), '60');
    assert.equal(sent?.get('prompt'), null);
    assert.ok(young.idToken, young.page.body.slice(0, 300));
    assert.ok(Math.abs(Number(young.idToken.auth_time) - (Math.floor(Date.now() / 1000) - 30)) <= 2, String(young.idToken.auth_time));

    scenarios.stale = authTimeAgo(120);
    const old = await signInThrough(pinpoint, 'stale', [['max_age', '60']]);
    assert.equal(old.tokens, undefined);
    assertCleanErrorPage(old.page, 502);
  });

  test("without prompt=login or max_age the upstream's auth_time is the session's, however old; without one, the time of the sign-in", async () => {
    scenarios.stale = authTimeAgo(7200);
    const old = await signInThrough(pinpoint, 'stale');
    const sent = upstream.authorizationRequests('stale').at(-1);
    assert.equal(sent?.get('prompt'), null);
    assert.equal(sent?.get('max_age'), null);
    assert.ok(Math.abs(Number(old.idToken?.auth_time) - (Math.floor(Date.now() / 1000) - 7200)) <= 2, String(old.idToken?.auth_time));
    scenarios.stale = authTimeAgo(undefined);
    const now = await signInThrough(pinpoint, 'stale');
    assert.ok(Math.abs(Number(now.idToken?.auth_time) - Math.floor(Date.now() / 1000)) <= 2, String(now.idToken?.auth_time));
  });
});

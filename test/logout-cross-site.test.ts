/**
 * /logout from another site, in a real headless Chromium (SameSite is the browser's): a page of another site that
 * auto-submits POST /logout reaches Pinpoint without the session cookie (SameSite=Lax). Found by an outside audit: the
 * server took that for "nobody signed in", ended "the session" at once and cleared the cookie, so any page could sign
 * a visitor out without confirmation, and a real RP's POST logout left the session row alive for any copy of the
 * cookie. Now such a POST is sent on to GET, which the browser makes with the cookie: DESIGN.md §8's rules apply there.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { basic, client, form, PASSWORD, pkce, SECRET, testApp, testConfig, type TestApp } from './helpers/app.js';
import { freePort } from './helpers/upstream.js';

const CHROMIUM = '/usr/bin/chromium';
/** evil.test is another site than 127.0.0.1 (where Pinpoint is); Chromium resolves it to loopback. */
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--host-resolver-rules=MAP evil.test 127.0.0.1'];
const STEP_TIMEOUT_MS = 10_000;
const skip = existsSync(CHROMIUM) ? false : `no Chromium at ${CHROMIUM} (apt-get install chromium)`;

describe('/logout from another site in a real browser', { skip }, () => {
  let browser: Browser;
  let pinpoint: TestApp;
  let baseUrl: string;
  /** The relying party's pages and, on the same server, an attacker's: both at http://evil.test:{port}. */
  let otherSite: Server;
  let otherOrigin: string;
  let callbackUri: string;
  let malloryHint: string;

  /** Auto-submits a POST /logout with `fields`, as an RP's page (or an attacker's) does. */
  const autoSubmit = (fields: Record<string, string>): string =>
    `<!doctype html><form id="f" method="post" action="${baseUrl}/logout">${Object.entries(fields)
      .map(([name, value]) => `<input type="hidden" name="${name}" value="${value}">`)
      .join('')}</form><script>document.getElementById('f').submit()</script>`;

  before(async () => {
    otherSite = createServer((request, response) => {
      const url = new URL(request.url ?? '/', 'http://evil.test');
      response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      if (url.pathname === '/forged-logout') return response.end(autoSubmit({ id_token_hint: malloryHint }));
      if (url.pathname === '/rp-logout') {
        return response.end(autoSubmit({ id_token_hint: url.searchParams.get('hint') ?? '', post_logout_redirect_uri: `${otherOrigin}/signed-out`, state: 'rp-state' }));
      }
      return response.end('<!doctype html><title>Application</title><h1>Back at the application</h1>');
    });
    await new Promise<void>((resolve) => otherSite.listen(0, '127.0.0.1', resolve));
    const otherPort = (otherSite.address() as AddressInfo).port;
    otherOrigin = `http://evil.test:${otherPort}`;
    callbackUri = `http://127.0.0.1:${otherPort}/callback`;

    const port = await freePort();
    baseUrl = `http://127.0.0.1:${port}`;
    const config = await testConfig({ baseUrl });
    const alice = config.users.get('alice');
    assert.ok(alice);
    const rp = client({ clientId: 'rp', kind: 'confidential', secret: SECRET, redirectUris: [callbackUri], postLogoutRedirectUris: [`${otherOrigin}/signed-out`] });
    pinpoint = await testApp({
      config: { ...config, users: new Map([...config.users, ['mallory', { ...alice, username: 'mallory' }]]), clients: new Map([...config.clients, ['rp', rp]]) },
    });
    await pinpoint.app.listen({ host: '127.0.0.1', port });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, timeout: 20_000 });
    const mallory = await browser.newContext();
    malloryHint = (await signIn(mallory, 'mallory')).idToken;
    await mallory.close();
  });

  after(async () => {
    await browser?.close();
    await pinpoint?.app.close();
    otherSite?.closeAllConnections();
    await new Promise<void>((resolve) => (otherSite ? otherSite.close(() => resolve()) : resolve()));
  });

  function authorizeUrl(challenge: string, extra: readonly (readonly [string, string])[] = []): string {
    return `${baseUrl}/authorize?${form([
      ['response_type', 'code'],
      ['client_id', 'rp'],
      ['redirect_uri', callbackUri],
      ['scope', 'openid'],
      ['state', 'st'],
      ['code_challenge', challenge],
      ['code_challenge_method', 'S256'],
      ...extra,
    ])}`;
  }

  /** Signs `username` in with the sign-in form in `context`; the page it ended on and the RP's ID token. */
  async function signIn(context: BrowserContext, username: string): Promise<{ page: Page; idToken: string }> {
    context.setDefaultTimeout(STEP_TIMEOUT_MS);
    const page = await context.newPage();
    const { verifier, challenge } = pkce();
    await page.goto(authorizeUrl(challenge));
    await page.fill('input[name=username]', username);
    await page.fill('input[name=password]', PASSWORD);
    await Promise.all([page.waitForURL((url) => url.href.startsWith(callbackUri)), page.click('button[type=submit]')]);
    const code = new URL(page.url()).searchParams.get('code');
    assert.ok(code, page.url());
    const response = await fetch(`${baseUrl}/token`, {
      method: 'POST',
      headers: { authorization: basic('rp', SECRET), 'content-type': 'application/x-www-form-urlencoded' },
      body: form([['grant_type', 'authorization_code'], ['code', code], ['redirect_uri', callbackUri], ['code_verifier', verifier]]),
    });
    assert.equal(response.status, 200);
    return { page, idToken: ((await response.json()) as { id_token: string }).id_token };
  }

  /** Whether a session cookie value still names a live session: /authorize with prompt=none answers a code. */
  async function sessionAlive(cookie: string): Promise<boolean> {
    const response = await fetch(authorizeUrl(pkce().challenge, [['prompt', 'none']]), { redirect: 'manual', headers: { cookie: `pinpoint_session=${cookie}` } });
    return new URL(response.headers.get('location') ?? '', baseUrl).searchParams.has('code');
  }

  const sessionCookie = async (context: BrowserContext): Promise<string | undefined> =>
    (await context.cookies(baseUrl)).find((cookie) => cookie.name === 'pinpoint_session')?.value;

  test("a page of another site POSTing the attacker's own ID token as hint gets the confirmation page; the visitor stays signed in", { timeout: 30_000 }, async () => {
    const context = await browser.newContext();
    const { page } = await signIn(context, 'alice');
    const cookie = await sessionCookie(context);
    assert.ok(cookie);
    await page.goto(`${otherOrigin}/forged-logout`);
    await page.waitForURL((url) => url.href.startsWith(`${baseUrl}/logout`));
    await page.waitForLoadState('load');
    assert.equal(await page.locator('h1').textContent(), 'Sign out?');
    assert.equal(await sessionCookie(context), cookie, 'the browser kept its session cookie');
    assert.equal(await sessionAlive(cookie), true);
    await context.close();
  });

  test("a relying party's POST logout with the person's own hint ends the session: the row is deleted, a copy of the cookie no longer works", { timeout: 30_000 }, async () => {
    const context = await browser.newContext();
    const { page, idToken } = await signIn(context, 'alice');
    const copy = await sessionCookie(context);
    assert.ok(copy);
    await page.goto(`${otherOrigin}/rp-logout?${new URLSearchParams({ hint: idToken })}`);
    await page.waitForURL((url) => url.href.startsWith(`${otherOrigin}/signed-out`));
    assert.equal(new URL(page.url()).searchParams.get('state'), 'rp-state');
    assert.equal(await sessionCookie(context), undefined, 'the browser dropped the cookie');
    assert.equal(await sessionAlive(copy), false, 'the session row is gone');
    await context.close();
  });
});

/** The pages in a real headless Chromium: local sign-in, upstream sign-in, device verification. */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { chromium, type Browser, type Page } from 'playwright-core';
import { basic, claimsOf, client, form, PASSWORD, pkce, SECRET, testApp, testConfig, type TestApp } from './helpers/app.js';
import { federation, freePort, startUpstream, upstreamEmail, type Upstream } from './helpers/upstream.js';

const CHROMIUM = '/usr/bin/chromium';
const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-quic',
  '--no-first-run',
  '--disable-component-update',
  '--disable-sync',
];
const ARTIFACTS = join(import.meta.dirname, 'artifacts');
const STEP_TIMEOUT_MS = 10_000;
const skip = existsSync(CHROMIUM) ? false : `no Chromium at ${CHROMIUM} (apt-get install chromium)`;
if (skip !== false) console.log(`# browser tests skipped: ${skip}`);

describe('pages in a real browser', { skip }, () => {
  let browser: Browser;
  let pinpoint: TestApp;
  let baseUrl: string;
  let upstream: Upstream;
  let application: Server;
  let callbackUri: string;

  before(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    // The client's redirect URI is a real page, so the browser ends somewhere that answers.
    application = createServer((_request, response) => {
      response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      response.end('<!doctype html><title>Application</title><h1>Back at the application</h1>');
    });
    await new Promise<void>((resolve) => application.listen(0, '127.0.0.1', resolve));
    callbackUri = `http://127.0.0.1:${(application.address() as AddressInfo).port}/callback`;

    const port = await freePort();
    baseUrl = `http://127.0.0.1:${port}`;
    upstream = await startUpstream(`${baseUrl}/federation/upstream/callback`);
    const config = await testConfig({ baseUrl, federations: new Map([['upstream', federation('upstream', upstream.issuer)]]) });
    const browserApp = client({ clientId: 'browserapp', kind: 'confidential', secret: SECRET, redirectUris: [callbackUri] });
    pinpoint = await testApp({ config: { ...config, clients: new Map([...config.clients, ['browserapp', browserApp]]) } });
    await pinpoint.app.listen({ host: '127.0.0.1', port });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, timeout: 20_000 });
  });

  after(async () => {
    await browser?.close();
    await pinpoint?.app.close();
    await upstream?.close();
    application?.closeAllConnections();
    await new Promise<void>((resolve) => (application ? application.close(() => resolve()) : resolve()));
  });

  /** A fresh browser profile (no cookies) that reaches loopback only: the upstream's dev pages link web fonts. */
  async function newPage(): Promise<Page> {
    const context = await browser.newContext();
    context.setDefaultTimeout(STEP_TIMEOUT_MS);
    await context.route((url) => url.hostname !== '127.0.0.1', (route) => route.abort());
    return context.newPage();
  }

  async function shot(page: Page, name: string): Promise<void> {
    await page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });
  }

  function authorizeUrl(challenge: string, state: string): string {
    return `${baseUrl}/authorize?${form([
      ['response_type', 'code'],
      ['client_id', 'browserapp'],
      ['redirect_uri', callbackUri],
      ['scope', 'openid profile email'],
      ['state', state],
      ['nonce', `nonce-${state}`],
      ['code_challenge', challenge],
      ['code_challenge_method', 'S256'],
    ])}`;
  }

  /** The client's side of the code: checks the redirect's parameters, exchanges the code, returns the tokens. */
  async function redeem(finalUrl: string, state: string, verifier: string): Promise<{ access_token: string; id_token: string }> {
    const redirect = new URL(finalUrl);
    assert.equal(`${redirect.origin}${redirect.pathname}`, callbackUri);
    assert.equal(redirect.searchParams.get('state'), state);
    assert.equal(redirect.searchParams.get('iss'), baseUrl);
    const code = redirect.searchParams.get('code');
    assert.ok(code, finalUrl);
    const response = await fetch(`${baseUrl}/token`, {
      method: 'POST',
      headers: { authorization: basic('browserapp', SECRET), 'content-type': 'application/x-www-form-urlencoded' },
      body: form([['grant_type', 'authorization_code'], ['code', code], ['redirect_uri', callbackUri], ['code_verifier', verifier]]),
    });
    assert.equal(response.status, 200);
    return (await response.json()) as { access_token: string; id_token: string };
  }

  test('(a0) authorization code: a local user signs in once, and a second authorization is not asked again', { timeout: 20_000 }, async () => {
    const page = await newPage();
    const first = pkce();
    await page.goto(authorizeUrl(first.challenge, 'st-once'));
    assert.equal(new URL(page.url()).pathname, '/login');
    await page.getByLabel('Username').fill('alice');
    await page.getByLabel('Password').fill(PASSWORD);
    await Promise.all([page.waitForURL((url) => url.href.startsWith(callbackUri)), page.click('button[type=submit]')]);
    const tokens = await redeem(page.url(), 'st-once', first.verifier);
    assert.equal(claimsOf(tokens.access_token).sub, 'alice');

    const second = pkce();
    await page.goto(authorizeUrl(second.challenge, 'st-again'));
    assert.ok(page.url().startsWith(callbackUri), `expected straight back to the client, got ${page.url()}`);
    await redeem(page.url(), 'st-again', second.verifier);
    await page.context().close();
  });

  test('(a) authorization code: a wrong password shows the form again with a message, the right one reaches the client', { timeout: 20_000 }, async () => {
    const page = await newPage();
    const { verifier, challenge } = pkce();
    await page.goto(authorizeUrl(challenge, 'st-local'));
    assert.equal(new URL(page.url()).pathname, '/login');
    assert.equal(await page.title(), 'Sign in · Pinpoint');
    await shot(page, 'a1-sign-in');

    await page.fill('input[name=username]', 'alice');
    await page.fill('input[name=password]', 'not the password');
    const [refused] = await Promise.all([
      page.waitForResponse((response) => response.request().method() === 'POST' && new URL(response.url()).pathname === '/login'),
      page.click('button[type=submit]'),
    ]);
    assert.equal(refused.status(), 401);
    await page.waitForSelector('.error');
    assert.equal((await page.textContent('.error'))?.trim(), 'Wrong username or password.');
    assert.equal(await page.inputValue('input[name=username]'), 'alice');
    assert.equal(await page.inputValue('input[name=password]'), '');
    await shot(page, 'a2-wrong-password');

    await page.fill('input[name=password]', PASSWORD);
    await Promise.all([page.waitForURL((url) => url.href.startsWith(callbackUri)), page.click('button[type=submit]')]);
    await shot(page, 'a3-back-at-application');
    const tokens = await redeem(page.url(), 'st-local', verifier);
    assert.equal(claimsOf(tokens.id_token).sub, 'alice');
    assert.equal(claimsOf(tokens.id_token).nonce, 'nonce-st-local');
    await page.context().close();
  });

  test('(b) sign-in through the upstream OpenID Connect provider', { timeout: 20_000 }, async () => {
    const page = await newPage();
    const { verifier, challenge } = pkce();
    await page.goto(authorizeUrl(challenge, 'st-upstream'));
    await shot(page, 'b1-sign-in-choices');

    await Promise.all([page.waitForURL((url) => url.origin === upstream.issuer), page.click('text=Sign in with upstream')]);
    await page.waitForSelector('input[name=login]');
    await shot(page, 'b2-upstream-login');
    await page.fill('input[name=login]', 'dave');
    await page.fill('input[name=password]', 'anything');
    await Promise.all([page.waitForSelector('input[name=prompt][value=consent]', { state: 'attached' }), page.click('button[type=submit]')]);
    await shot(page, 'b3-upstream-consent');
    await Promise.all([page.waitForURL((url) => url.href.startsWith(callbackUri)), page.click('button[type=submit]')]);
    await shot(page, 'b4-back-at-application');

    const tokens = await redeem(page.url(), 'st-upstream', verifier);
    assert.equal(claimsOf(tokens.id_token).sub, 'upstream:dave');
    const userinfo = await fetch(`${baseUrl}/userinfo`, { headers: { authorization: `Bearer ${tokens.access_token}` } });
    assert.equal(((await userinfo.json()) as { email?: string }).email, upstreamEmail('dave'));
    await page.context().close();
  });

  test('(c) device flow: the device polls while the person enters the code, signs in and approves', { timeout: 30_000 }, async () => {
    const started = await fetch(`${baseUrl}/device_authorization`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: form([['client_id', 'tv'], ['scope', 'openid profile']]),
    });
    assert.equal(started.status, 200);
    const device = (await started.json()) as { device_code: string; user_code: string; verification_uri_complete: string; interval: number };

    const deadline = Date.now() + 25_000;
    const polled = (async () => {
      let interval = device.interval;
      while (Date.now() < deadline) {
        const response = await fetch(`${baseUrl}/token`, {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
          body: form([['grant_type', 'urn:ietf:params:oauth:grant-type:device_code'], ['device_code', device.device_code], ['client_id', 'tv']]),
        });
        const body = (await response.json()) as { error?: string; access_token?: string };
        if (response.status === 200) return body;
        if (body.error === 'slow_down') interval += 5;
        else if (body.error !== 'authorization_pending') throw new Error(`polling answered ${body.error}`);
        await sleep(interval * 1000);
      }
      throw new Error('the device never got its tokens');
    })();
    polled.catch(() => {});

    const page = await newPage();
    await page.goto(device.verification_uri_complete);
    assert.equal(await page.inputValue('input[name=user_code]'), device.user_code);
    await shot(page, 'c1-device-code');
    await Promise.all([page.waitForURL((url) => url.pathname === '/login'), page.click('button[type=submit]')]);
    await shot(page, 'c2-device-sign-in');
    await page.fill('input[name=username]', 'alice');
    await page.fill('input[name=password]', PASSWORD);
    await Promise.all([page.waitForSelector('button[value=approve]'), page.click('button[type=submit]')]);
    assert.match((await page.textContent('main')) ?? '', new RegExp(device.user_code));
    await shot(page, 'c3-device-approve');
    await Promise.all([page.waitForSelector('text=Device connected'), page.click('button[value=approve]')]);
    await shot(page, 'c4-device-connected');

    const tokens = await polled;
    assert.ok(tokens.access_token);
    const access = claimsOf(tokens.access_token);
    assert.equal(access.sub, 'alice');
    assert.equal(access.client_id, 'tv');
    assert.equal(access.aud, 'https://api.example.org/');
    await page.context().close();
  });
});

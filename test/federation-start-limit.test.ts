/**
 * GET /federation/start keeps a row (state, nonce, PKCE verifier) for 10 minutes: like /authorize's login requests it
 * counts against the address (DESIGN.md §1, §4), so a loop from one address stops at address_failures with the 429
 * error page and writes nothing more, while other addresses go on. Found by an outside audit: one /authorize and
 * 2,000 starts left 2,000 rows in federation_states. On every store, against a real oidc-provider as the upstream.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { LightMyRequestResponse } from 'fastify';
import { STORE_KINDS, type OpenedStore } from './helpers/databases.js';
import { cookieJar, ISSUER, testApp, testConfig, webappAuthorizeUrl, type TestApp } from './helpers/app.js';
import { federation, startUpstream, type Upstream } from './helpers/upstream.js';

const ADDRESS_FAILURES = 5;
const ATTEMPTS = 30;


/** /authorize from `address`: the login request a start names, and the browser's cookies. */
async function signInStarted(t: TestApp, address: string): Promise<{ loginId: string; cookies: string }> {
  const response = await t.app.inject({ url: webappAuthorizeUrl(), remoteAddress: address });
  assert.equal(response.statusCode, 303, response.body);
  const loginId = new URL(String(response.headers.location), ISSUER).searchParams.get('login');
  assert.ok(loginId);
  return { loginId, cookies: cookieJar('', response) };
}

const start = (t: TestApp, address: string, started: { loginId: string; cookies: string }, upstream = 'campus'): Promise<LightMyRequestResponse> =>
  t.app.inject({ url: `/federation/start?login=${started.loginId}&upstream=${upstream}`, remoteAddress: address, headers: { cookie: started.cookies, accept: 'text/html' } });

/** The upstream state a start sent the browser with. */
const stateOf = (response: LightMyRequestResponse): string => new URL(String(response.headers.location)).searchParams.get('state') ?? '';

for (const kind of STORE_KINDS) {
  describe(`GET /federation/start counts against the address (${kind.name} store)`, { skip: kind.skip }, () => {
    let upstream: Upstream;
    let opened: OpenedStore;
    let t: TestApp;

    before(async () => {
      upstream = await startUpstream(`${ISSUER}/federation/campus/callback`);
      opened = await kind.open();
      const base = await testConfig();
      t = await testApp({
        store: opened.store,
        config: await testConfig({ federations: new Map([['campus', federation('campus', upstream.issuer)]]), limits: { ...base.limits, addressFailures: ADDRESS_FAILURES } }),
      });
    });
    after(async () => {
      await t.app.close();
      await opened.store.close();
      await opened.cleanup();
      await upstream.close();
    });

    test('a loop of starts from one address ends in the 429 page; only the admitted ones keep a row', async () => {
      const address = '198.51.100.7';
      const started = await signInStarted(t, address);
      const responses: LightMyRequestResponse[] = [];
      for (let i = 0; i < ATTEMPTS; i += 1) responses.push(await start(t, address, started));
      const kept = responses.filter((response) => response.statusCode === 303);
      const refused = responses.filter((response) => response.statusCode === 429);
      assert.equal(kept.length + refused.length, ATTEMPTS, JSON.stringify(responses.map((response) => response.statusCode)));
      // The /authorize kept a login request: it and the starts share the address's budget.
      assert.equal(kept.length, ADDRESS_FAILURES - 1);
      assert.ok(responses.slice(kept.length).every((response) => response.statusCode === 429), 'once refused, every later start is');

      const stopped = refused[0] as LightMyRequestResponse;
      assert.match(String(stopped.headers['content-type']), /^text\/html/);
      assert.match(String(stopped.headers['content-security-policy']), /frame-ancestors 'none'/);
      assert.equal(stopped.headers['x-frame-options'], 'DENY');
      assert.ok(Number(stopped.headers['retry-after']) > 0);
      assert.ok(stopped.headers['x-request-id']);
      assert.equal(stopped.headers.location, undefined);
      assert.match(stopped.body, /too many failed requests/);

      for (const response of kept) assert.ok(await t.store.findFederationState(stateOf(response), Date.now()), 'an admitted start kept its state');
      if (opened.inspector !== undefined) assert.equal(await opened.inspector.rows('federation_states'), kept.length, 'a refused start writes nothing');

      // Another address is not affected: its sign-in and its start go on.
      const other = '203.0.113.44';
      const elsewhere = await start(t, other, await signInStarted(t, other));
      assert.equal(elsewhere.statusCode, 303, elsewhere.body);
      if (opened.inspector !== undefined) assert.equal(await opened.inspector.rows('federation_states'), kept.length + 1);
    });

    test('a refused start (an unknown upstream) counts as a failure of its address', async () => {
      const address = '198.51.100.99';
      const started = await signInStarted(t, address);
      const statuses: number[] = [];
      for (let i = 0; i < ATTEMPTS; i += 1) statuses.push((await start(t, address, started, 'nope')).statusCode);
      assert.deepEqual(statuses.slice(0, ADDRESS_FAILURES - 1), Array<number>(ADDRESS_FAILURES - 1).fill(400));
      assert.ok(statuses.slice(ADDRESS_FAILURES - 1).every((status) => status === 429), JSON.stringify(statuses));
    });

    test('refused callbacks (a state the server never gave, another browser\'s state) count against their address; other addresses still get through', async () => {
      const address = '198.51.100.150';
      const callback = (from: string, query: string, cookie = ''): Promise<LightMyRequestResponse> =>
        t.app.inject({ url: `/federation/campus/callback?${query}`, remoteAddress: from, headers: { cookie, accept: 'text/html' } });
      // A real state, taken to a browser that did not start it: refused, and the state stays for its own browser.
      const other = '203.0.113.77';
      const started = await start(t, other, await signInStarted(t, other));
      const realState = stateOf(started);
      const statuses: number[] = [];
      for (let i = 0; i < ATTEMPTS; i += 1) {
        const query = i % 2 === 0 ? `code=x&state=${'A'.repeat(43)}&iss=${encodeURIComponent(upstream.issuer)}` : `code=x&state=${realState}`;
        statuses.push((await callback(address, query)).statusCode);
      }
      assert.deepEqual(statuses.slice(0, ADDRESS_FAILURES), Array<number>(ADDRESS_FAILURES).fill(400), JSON.stringify(statuses));
      assert.ok(statuses.slice(ADDRESS_FAILURES).every((status) => status === 429), JSON.stringify(statuses));
      assert.ok(await t.store.findFederationState(realState, Date.now()), "another browser's refused answer leaves the state to its own browser");
      // The address that started it is not limited by the other's failures: its callback is looked at (here refused as
      // another browser's, since the test sends no cookie), not answered 429.
      assert.equal((await callback(other, `code=x&state=${realState}`)).statusCode, 400);
    });
  });
}

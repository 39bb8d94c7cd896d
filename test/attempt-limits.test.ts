/**
 * DESIGN.md §7 attempt limits on every store: counted before the check in one statement, so parallel guesses cannot
 * slip past; per user *per address*, so one address cannot lock a user out elsewhere; across addresses only slowed.
 */
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import type { Store } from '../src/store/types.js';
import { createMetrics, type Metrics } from '../src/http/metrics.js';
import { STORE_KINDS } from './helpers/databases.js';
import { cookieJar, form, hiddenInput, PASSWORD, type TestApp, testApp, webappAuthorizeUrl } from './helpers/app.js';

const FORM = { 'content-type': 'application/x-www-form-urlencoded' };

/** A sign-in form ready to post: the login id, the CSRF token and its cookie. */
async function signInForm(app: FastifyInstance): Promise<{ login: string; csrf: string; cookies: string }> {
  const start = await app.inject({
    url: webappAuthorizeUrl(),
  });
  const page = await app.inject({ url: String(start.headers.location), headers: { cookie: cookieJar('', start) } });
  return { login: hiddenInput(page.body, 'login'), csrf: hiddenInput(page.body, 'csrf'), cookies: cookieJar(cookieJar('', start), page) };
}

const password = (app: FastifyInstance, signIn: { login: string; csrf: string; cookies: string }, secret: string, remoteAddress = '127.0.0.1'): Promise<LightMyRequestResponse> =>
  app.inject({
    method: 'POST',
    url: '/login',
    remoteAddress,
    headers: { ...FORM, cookie: signIn.cookies },
    payload: form([['csrf', signIn.csrf], ['login', signIn.login], ['username', 'alice'], ['password', secret]]),
  });

for (const kind of STORE_KINDS) {
  describe(`attempt limits on the ${kind.name} store`, { skip: kind.skip }, () => {
    let store: Store;
    let cleanup: () => Promise<void>;
    before(async () => {
      ({ store, cleanup } = await kind.open());
    });
    after(async () => {
      await store.close();
      await cleanup();
    });

    test('30 parallel wrong passwords against a limit of 10: exactly 10 reach the password check', async () => {
      const t = await testApp({ store, limits: { loginFailures: 10, addressFailures: 1000 } });
      try {
        const signIn = await signInForm(t.app);
        const answers = await Promise.all(Array.from({ length: 30 }, (_, i) => password(t.app, signIn, `wrong-${i}`)));
        const statuses = answers.map((answer) => answer.statusCode);
        assert.equal(statuses.filter((status) => status === 401).length, 10, statuses.join(' '));
        assert.equal(statuses.filter((status) => status === 429).length, 20);
        assert.equal((await password(t.app, signIn, PASSWORD)).statusCode, 429, 'the right password too, from this address');
      } finally {
        await t.app.close();
      }
    });

    test('30 parallel wrong user codes against a limit of 10: exactly 10 are looked up', async () => {
      const t = await testApp({ store, limits: { userCodeFailures: 10, addressFailures: 1000 } });
      try {
        const entry = await t.app.inject({ url: '/device' });
        const cookies = cookieJar('', entry);
        const csrf = hiddenInput(entry.body, 'csrf');
        const answers = await Promise.all(
          Array.from({ length: 30 }, () =>
            t.app.inject({ method: 'POST', url: '/device', remoteAddress: '10.1.1.1', headers: { ...FORM, cookie: cookies }, payload: form([['csrf', csrf], ['user_code', 'BCDF-GHJK']]) }),
          ),
        );
        const statuses = answers.map((answer) => answer.statusCode);
        assert.equal(statuses.filter((status) => status === 400).length, 10, statuses.join(' '));
        assert.equal(statuses.filter((status) => status === 429).length, 20);
      } finally {
        await t.app.close();
      }
    });
  });
}

describe('sign-in limits per address (real sockets from 127.0.0.2 and 127.0.0.3)', () => {
  let t: TestApp;
  let port: number;
  before(async () => {
    t = await testApp({ limits: { loginFailures: 3, loginFailuresAny: 4, addressFailures: 1000 } });
    await t.app.listen({ host: '127.0.0.1', port: 0 });
    port = (t.app.server.address() as AddressInfo).port;
  });
  after(async () => t.app.close());

  /** POST /login over a socket bound to `localAddress`; resolves with the status and how long the answer took. */
  function from(localAddress: string, signIn: { login: string; csrf: string; cookies: string }, secret: string): Promise<{ status: number; ms: number }> {
    const body = form([['csrf', signIn.csrf], ['login', signIn.login], ['username', 'alice'], ['password', secret]]);
    const started = performance.now();
    return new Promise((resolve, reject) => {
      const request = httpRequest(
        { host: '127.0.0.1', port, localAddress, method: 'POST', path: '/login', headers: { ...FORM, cookie: signIn.cookies, 'content-length': Buffer.byteLength(body) } },
        (response) => {
          response.resume();
          response.on('end', () => resolve({ status: response.statusCode ?? 0, ms: performance.now() - started }));
        },
      );
      request.on('error', reject);
      request.end(body);
    });
  }

  test('an address that reached the limit gets 429; another address signs the user in; beyond the limit across addresses it is slowed, never refused', async () => {
    const signIn = await signInForm(t.app);
    for (let i = 0; i < 3; i++) assert.equal((await from('127.0.0.2', signIn, `wrong-${i}`)).status, 401);
    assert.equal((await from('127.0.0.2', signIn, PASSWORD)).status, 429, 'the failing address is locked out for alice');
    // Two more wrong passwords from elsewhere pass login_failures_any (4) for alice.
    assert.equal((await from('127.0.0.4', signIn, 'wrong-x')).status, 401);
    assert.equal((await from('127.0.0.5', signIn, 'wrong-y')).status, 401);
    const victim = await from('127.0.0.3', await signInForm(t.app), PASSWORD);
    assert.equal(victim.status, 303, 'an address that never failed is not refused');
    assert.ok(victim.ms >= 200, `but its answer is slowed (${Math.round(victim.ms)} ms)`);
  });
});

describe('wrong passwords from one address across user names', () => {
  test('at 10 × login_failures password checks in a minute the address gets 429, its right passwords too; another address signs in', async () => {
    const t = await testApp({ limits: { loginFailures: 2, addressFailures: 1000 } });
    try {
      const signIn = await signInForm(t.app);
      const as = (username: string, secret: string, remoteAddress = '127.0.0.1'): Promise<LightMyRequestResponse> =>
        t.app.inject({
          method: 'POST',
          url: '/login',
          remoteAddress,
          headers: { ...FORM, cookie: signIn.cookies },
          payload: form([['csrf', signIn.csrf], ['login', signIn.login], ['username', username], ['password', secret]]),
        });
      // A new name each time escapes login_failures (per user and address): each one is a full password check.
      for (let i = 0; i < 20; i += 1) assert.equal((await as(`stranger-${i}`, 'guess')).statusCode, 401, `guess ${i}`);
      const stopped = await as('stranger-20', 'guess');
      assert.equal(stopped.statusCode, 429);
      assert.ok(Number(stopped.headers['retry-after']) > 0);
      assert.equal((await as('alice', PASSWORD)).statusCode, 429, 'the right password too, from this address');
      assert.equal((await as('alice', PASSWORD, '10.9.9.9')).statusCode, 303, 'another address is not affected');
      // In parallel, with a new name each: counted before the check, so at most 20 reach it (a review: all 60 did).
      const burst = await Promise.all(Array.from({ length: 60 }, (_, i) => as(`burst-${i}`, 'guess', '10.8.8.8')));
      const statuses = burst.map((answer) => answer.statusCode);
      assert.equal(statuses.filter((status) => status === 401).length, 20, statuses.join(' '));
      assert.equal(statuses.filter((status) => status === 429).length, 40);
    } finally {
      await t.app.close();
    }
  });
});

describe('an address over a limit', () => {
  /** How many times the store was asked to count an attempt (a write). */
  const countsWritten = async (metrics: Metrics): Promise<number> => {
    const { values } = await metrics.storeOperations.get();
    return values.find((value) => value.labels.operation === 'countAttempt' && value.metricName?.endsWith('_count'))?.value ?? 0;
  };

  test('is refused on reads: its further wrong user codes and passwords write nothing (a cost audit: a write each)', async () => {
    const metrics = createMetrics({ processMetrics: false });
    const t = await testApp({ metrics, limits: { userCodeFailures: 2, loginFailures: 2, addressFailures: 1000 } });
    try {
      const entry = await t.app.inject({ url: '/device' });
      const code = (): Promise<LightMyRequestResponse> =>
        t.app.inject({ method: 'POST', url: '/device', headers: { ...FORM, cookie: cookieJar('', entry) }, payload: form([['csrf', hiddenInput(entry.body, 'csrf')], ['user_code', 'BCDF-GHJK']]) });
      assert.deepEqual([(await code()).statusCode, (await code()).statusCode, (await code()).statusCode], [400, 400, 429]);
      const signIn = await signInForm(t.app);
      for (let i = 0; i < 2; i += 1) assert.equal((await password(t.app, signIn, 'wrong')).statusCode, 401);
      assert.equal((await password(t.app, signIn, 'wrong')).statusCode, 429);
      const written = await countsWritten(metrics);
      for (let i = 0; i < 5; i += 1) {
        assert.equal((await code()).statusCode, 429);
        assert.equal((await password(t.app, signIn, PASSWORD)).statusCode, 429);
      }
      assert.equal(await countsWritten(metrics), written);
    } finally {
      await t.app.close();
    }
  });
});

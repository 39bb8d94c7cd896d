/**
 * DESIGN.md §7: the failure limits hold under parallel requests at every form endpoint. A request counts as a failure
 * from the moment it is let in until it is answered, so a burst of bad requests from one address gets at most
 * `address_failures` answers other than 429, however many arrive before the first is answered. The bad requests here
 * do real asynchronous work before they fail (jose's check of a forged assertion or DPoP proof), as an attacker's would.
 */
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import type { LightMyRequestResponse } from 'fastify';
import { admitRequest, RequestsInFlight, type Admission, type AdmissionRequest } from '../src/http/failure-limit.js';
import { FixedWindowLimiter } from '../src/http/rate-limit.js';
import type { AppLimits } from '../src/context.js';
import { appPerSuite, basic, client, form, ISSUER, REDIRECT, SECRET, testApp, testConfig, webappAuthorizeUrl, type TestApp } from './helpers/app.js';
import { STORE_KINDS } from './helpers/databases.js';
import { assertion, JWT_BEARER, newKey, proof, type ClientKey } from './helpers/proofs.js';

const BURST = 40;
const LIMIT = 5;

const statusCounts = (responses: readonly LightMyRequestResponse[]): Record<number, number> =>
  responses.reduce<Record<number, number>>((counts, response) => ({ ...counts, [response.statusCode]: (counts[response.statusCode] ?? 0) + 1 }), {});

type Send = (app: Awaited<ReturnType<typeof testApp>>['app'], address: string) => Promise<LightMyRequestResponse>;

const formPost =
  (url: string, pairs: [string, string][], authorization?: string): Send =>
  (app, address) =>
    app.inject({
      method: 'POST',
      url,
      remoteAddress: address,
      headers: { 'content-type': 'application/x-www-form-urlencoded', ...(authorization !== undefined && { authorization }) },
      payload: form(pairs),
    });

/** Bad requests at each form endpoint: a client assertion signed by a stranger's key, refused (401) after jose's check. */
function badRequests(forged: () => Promise<string>): Record<string, () => Promise<[string, string][]>> {
  const asSigner = async (): Promise<[string, string][]> => [['client_id', 'signer'], ['client_assertion_type', JWT_BEARER], ['client_assertion', await forged()]];
  return {
    '/token': async () => [['grant_type', 'client_credentials'], ...(await asSigner())],
    '/par': async () => [['response_type', 'code'], ['redirect_uri', REDIRECT], ['code_challenge', 'x'.repeat(43)], ['code_challenge_method', 'S256'], ...(await asSigner())],
    '/introspect': async () => [['token', 'anything'], ...(await asSigner())],
    '/revoke': async () => [['token', 'anything'], ...(await asSigner())],
    '/device_authorization': async () => [['scope', 'read'], ...(await asSigner())],
  };
}

let signerKey: ClientKey;
let strangerKey: ClientKey;
before(async () => {
  [signerKey, strangerKey] = [await newKey(), await newKey()];
});

/** The test app with `signer`, a private_key_jwt client (DESIGN.md §13), and these limits. */
async function appWithSigner(limits: Partial<AppLimits>): Promise<TestApp> {
  const base = await testConfig();
  const signer = client({ clientId: 'signer', kind: 'confidential', assertionKeys: { jwks: { keys: [signerKey.publicJwk] } }, scopes: ['read'] });
  return testApp({ config: { ...base, clients: new Map([...base.clients, ['signer', signer]]) }, limits });
}

const forgedAssertion = (): Promise<string> => assertion(strangerKey, { clientId: 'signer', audience: ISSUER });

describe('a burst of bad requests from one address at each form endpoint', () => {
  for (const [endpoint, pairsOf] of Object.entries(badRequests(forgedAssertion))) {
    test(`${endpoint}: ${BURST} at once get at most address_failures = ${LIMIT} refusals of their own, the rest 429`, async () => {
      const t = await appWithSigner({ addressFailures: LIMIT });
      try {
        const bodies = await Promise.all(Array.from({ length: BURST }, pairsOf));
        const responses = await Promise.all(bodies.map((pairs) => formPost(endpoint, pairs)(t.app, '203.0.113.9')));
        const counts = statusCounts(responses);
        assert.ok((counts[401] ?? 0) >= 1 && (counts[401] ?? 0) <= LIMIT, JSON.stringify(counts));
        assert.equal((counts[401] ?? 0) + (counts[429] ?? 0), BURST, JSON.stringify(counts));
        assert.match(responses.find((response) => response.statusCode === 401)?.json().error_description ?? '', /not signed by a key of this client/);
        const limited = responses.find((response) => response.statusCode === 429);
        assert.deepEqual(limited?.json(), { error: 'invalid_request', error_description: 'too many failed requests; slow down' });
        assert.ok(Number(limited?.headers['retry-after']) >= 1);
        // Another address is not affected.
        const other = await formPost('/token', [['grant_type', 'client_credentials']], basic('service', SECRET))(t.app, '198.51.100.4');
        assert.equal(other.statusCode, 200, other.body);
      } finally {
        await t.app.close();
      }
    });
  }

  test('/token with forged DPoP proofs: at most address_failures reach the proof check', async () => {
    const t = await testApp({ limits: { addressFailures: LIMIT } });
    try {
      const [key, other] = [await newKey(), await newKey()];
      const proofs = await Promise.all(Array.from({ length: BURST }, () => proof(key, { htu: `${ISSUER}/token`, signWith: other })));
      const responses = await Promise.all(
        proofs.map((forged) =>
          t.app.inject({
            method: 'POST',
            url: '/token',
            remoteAddress: '203.0.113.10',
            headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic('service', SECRET), dpop: forged },
            payload: form([['grant_type', 'client_credentials']]),
          }),
        ),
      );
      const counts = statusCounts(responses);
      assert.ok((counts[400] ?? 0) >= 1 && (counts[400] ?? 0) <= LIMIT, JSON.stringify(counts));
      assert.equal((counts[400] ?? 0) + (counts[429] ?? 0), BURST, JSON.stringify(counts));
      assert.ok(responses.filter((response) => response.statusCode === 400).every((response) => response.json().error === 'invalid_dpop_proof'));
    } finally {
      await t.app.close();
    }
  });

  test('client_failures holds for a burst naming one client: at most that many refusals, and the client still works from elsewhere', async () => {
    const t = await appWithSigner({ clientFailures: 3 });
    try {
      const bodies = await Promise.all(Array.from({ length: BURST }, badRequests(forgedAssertion)['/token'] as () => Promise<[string, string][]>));
      const responses = await Promise.all(bodies.map((pairs) => formPost('/token', pairs)(t.app, '203.0.113.11')));
      const counts = statusCounts(responses);
      assert.ok((counts[401] ?? 0) >= 1 && (counts[401] ?? 0) <= 3, JSON.stringify(counts));
      assert.equal((counts[401] ?? 0) + (counts[429] ?? 0), BURST, JSON.stringify(counts));
      const elsewhere = await formPost('/token', [['grant_type', 'client_credentials']], basic('service', SECRET))(t.app, '198.51.100.5');
      assert.equal(elsewhere.statusCode, 200, elsewhere.body);
    } finally {
      await t.app.close();
    }
  });

  test('answered requests give their count back: parallel good requests leave the whole budget for failures', async () => {
    const t = await testApp({ limits: { addressFailures: LIMIT } });
    try {
      const good = formPost('/token', [['grant_type', 'client_credentials']], basic('service', SECRET));
      for (let round = 0; round < 4; round += 1) {
        const answers = await Promise.all(Array.from({ length: LIMIT - 1 }, () => good(t.app, '203.0.113.12')));
        assert.deepEqual(statusCounts(answers), { 200: LIMIT - 1 });
      }
      const bad = formPost('/token', [['grant_type', 'client_credentials']], basic('service', 'not the secret'));
      for (let i = 0; i < LIMIT; i += 1) assert.equal((await bad(t.app, '203.0.113.12')).statusCode, 401);
      assert.equal((await good(t.app, '203.0.113.12')).statusCode, 429);
    } finally {
      await t.app.close();
    }
  });
});

describe('requests in flight, per worker', () => {
  const limits = { addressFailures: 5, clientFailures: 300 };
  /** admitRequest, always as a promise (it answers at once when it need not wait). */
  const admit = (...args: Parameters<typeof admitRequest>): Promise<Admission> => Promise.resolve(admitRequest(...args));
  const request = (address: string, fetches = 0): AdmissionRequest => ({ address, clientId: 'c', fetches: () => fetches });
  /** Whether `promise` has settled by the next turn of the event loop. */
  const settledYet = async (promise: Promise<unknown>): Promise<boolean> => Promise.race([promise.then(() => true), new Promise<boolean>((resolve) => setImmediate(() => resolve(false)))]);
  const admitted = async (promise: Promise<Admission>): Promise<Extract<Admission, { ok: true }>> => {
    const admission = await promise;
    if (!admission.ok) throw new Error(`refused: ${admission.error.description}`);
    return admission;
  };

  test('one process: as many in flight as the budget has left; the next waits, and starts when one ends without failing', async () => {
    const limiter = new FixedWindowLimiter(60_000);
    const inFlight = new RequestsInFlight();
    const tries = Array.from({ length: 7 }, () => admit(limiter, inFlight, limits, request('203.0.113.1'), Date.now));
    const first = await Promise.all(tries.slice(0, 5).map(admitted));
    assert.deepEqual(await Promise.all(tries.slice(5).map(settledYet)), [false, false]);
    // A success gives its place back: one of the two starts, the other waits on.
    first[0]?.settle('done', Date.now());
    assert.deepEqual((await Promise.all(tries.slice(5).map(settledYet))).sort(), [false, true]);
    // Once the address has failed in this window, what does not fit is refused instead: a burst ends at once.
    first[1]?.settle('failed', Date.now());
    const answers = await Promise.all(tries.slice(5));
    assert.deepEqual(answers.map((answer) => answer.ok).sort(), [false, true]);
    assert.equal(limiter.counted('ip:203.0.113.1', Date.now()), 1);
  });

  test('a request waiting while the budget is used up by failures gets 429 with the rest of the window as Retry-After', async () => {
    const limiter = new FixedWindowLimiter(60_000);
    const inFlight = new RequestsInFlight();
    const small = { addressFailures: 2, clientFailures: 300 };
    const tries = Array.from({ length: 3 }, () => admit(limiter, inFlight, small, request('203.0.113.4'), Date.now));
    const first = await Promise.all(tries.slice(0, 2).map(admitted));
    for (const admission of first) admission.settle('failed', Date.now());
    const waited = await tries[2];
    assert.equal(waited?.ok, false);
    if (waited?.ok !== false) return;
    assert.equal(waited.error.status, 429);
    assert.ok(Number(waited.error.headers['Retry-After']) > 50, JSON.stringify(waited.error.headers));
  });

  test('a fetch that no longer fits the budget is refused at once, with the rest of the window as Retry-After', async () => {
    const limiter = new FixedWindowLimiter(60_000);
    const inFlight = new RequestsInFlight();
    const three = { addressFailures: 3, clientFailures: 300 };
    for (let i = 0; i < 2; i += 1) limiter.hit('ip:203.0.113.5', Date.now());
    const refused = await admit(limiter, inFlight, three, request('203.0.113.5', 1), Date.now);
    assert.equal(refused.ok, false);
    if (refused.ok) return;
    assert.ok(Number(refused.error.headers['Retry-After']) > 50, JSON.stringify(refused.error.headers));
  });

  test('one of two workers, no primary to ask: it holds its share, floor(5 / 2) = 2; beyond it a request waits, and is refused once its share has failed', async () => {
    const limiter = new FixedWindowLimiter(60_000);
    const inFlight = new RequestsInFlight(2);
    const tries = Array.from({ length: 4 }, () => admit(limiter, inFlight, limits, { address: '203.0.113.2', clientId: undefined, fetches: () => 0 }, Date.now));
    const first = await Promise.all(tries.slice(0, 2).map(admitted));
    assert.deepEqual(await Promise.all(tries.slice(2).map(settledYet)), [false, false]);
    for (const admission of first) admission.settle('failed', Date.now());
    // 3 left for the server, none of this worker's share: the other worker's share is its own (test/budget-shares.test.ts).
    const answers = await Promise.all(tries.slice(2));
    assert.deepEqual(answers.map((answer) => answer.ok), [false, false]);
  });

  test('settling twice counts once; a kept request counts against the address alone', async () => {
    const limiter = new FixedWindowLimiter(60_000);
    const inFlight = new RequestsInFlight();
    const admission = await admitted(admit(limiter, inFlight, limits, request('203.0.113.3'), Date.now));
    admission.settle('kept', Date.now());
    admission.settle('failed', Date.now());
    assert.equal(limiter.counted('ip:203.0.113.3', Date.now()), 1);
    assert.equal(limiter.counted('client:203.0.113.3:c', Date.now()), 0);
  });
});

describe('good requests are never refused for failures they did not make', () => {
  const good = formPost('/token', [['grant_type', 'client_credentials']], basic('service', SECRET));

  test('400 good requests at once from one address, default limits (300): all answered 200', async () => {
    const t = await testApp();
    try {
      assert.deepEqual(statusCounts(await Promise.all(Array.from({ length: 400 }, () => good(t.app, '203.0.113.30')))), { 200: 400 });
    } finally {
      await t.app.close();
    }
  });

  test('as one of 64 workers (each holds 1/64 of an address\'s budget): 40 good requests at once all answered 200', async () => {
    const t = await testApp({ workers: 64 });
    try {
      assert.deepEqual(statusCounts(await Promise.all(Array.from({ length: 40 }, () => good(t.app, '203.0.113.31')))), { 200: 40 });
    } finally {
      await t.app.close();
    }
  });
});

for (const kind of STORE_KINDS) {
  describe(`/authorize under a burst from one address, on the ${kind.name} store`, { skip: kind.skip }, () => {
    let t: TestApp;
    appPerSuite(kind, async () => ({ limits: { addressFailures: LIMIT } }), (opened) => {
      t = opened;
    });

    test(`${BURST} requests naming an unknown request_uri at once: at most address_failures = ${LIMIT} error pages, the rest 429`, async () => {
      const url = `/authorize?${new URLSearchParams({ client_id: 'webapp', request_uri: `urn:ietf:params:oauth:request_uri:${'A'.repeat(43)}` })}`;
      const responses = await Promise.all(Array.from({ length: BURST }, () => t.app.inject({ url, remoteAddress: '203.0.113.20' })));
      const counts = statusCounts(responses);
      assert.ok((counts[400] ?? 0) >= 1 && (counts[400] ?? 0) <= LIMIT, JSON.stringify(counts));
      assert.equal((counts[400] ?? 0) + (counts[429] ?? 0), BURST, JSON.stringify(counts));
    });

    test(`${BURST} sign-ins started at once: at most address_failures = ${LIMIT} login requests kept, the rest 429`, async () => {
      const responses = await Promise.all(Array.from({ length: BURST }, () => t.app.inject({ url: webappAuthorizeUrl(), remoteAddress: '203.0.113.21' })));
      const counts = statusCounts(responses);
      assert.ok((counts[303] ?? 0) >= 1 && (counts[303] ?? 0) <= LIMIT, JSON.stringify(counts));
      assert.equal((counts[303] ?? 0) + (counts[429] ?? 0), BURST, JSON.stringify(counts));
    });
  });
}

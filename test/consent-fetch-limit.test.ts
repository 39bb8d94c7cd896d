/**
 * The consent page finds its client again, which for a client ID metadata document may fetch it (DESIGN.md §9): a
 * request without this browser's login request and session fetches nothing, and a fetch it does make counts toward
 * the address's limits as at /authorize, so a loop of /consent from one address stops with the 429 page while other
 * addresses go on. Found by an outside audit: 400 GETs without a session made 400 fetches of a no-store document.
 * The documents come from a real HTTPS server on 127.0.0.1 (allow_private_addresses); on every store.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { buildApp } from '../src/app.js';
import { MetadataDocuments } from '../src/clients/metadata-document.js';
import type { Store } from '../src/store/types.js';
import { STORE_KINDS } from './helpers/databases.js';
import { authorizeUrl, cookieJar, form, hiddenInput, ISSUER, LOOPBACK_DOCUMENT_CLIENTS, PASSWORD, pkce, testConfig } from './helpers/app.js';
import { startHttpsServer, type HttpsTestServer } from './helpers/https-server.js';
import { loadSigningKeys } from './helpers/keys.js';

const ADDRESS_FAILURES = 8;
const ATTEMPTS = 30;
const CALLBACK = 'http://127.0.0.1/callback';

let documentServer: HttpsTestServer;
let origin = '';
let cert: Buffer;
/** Fetches of each document path. */
const hits = new Map<string, number>();

before(async () => {
  // Every path is a good document of its own URL that may not be kept: each lookup of its client fetches it again.
  documentServer = await startHttpsServer((request, response) => {
    const path = request.url ?? '';
    hits.set(path, (hits.get(path) ?? 0) + 1);
    const body = { client_id: `${origin}${path}`, client_name: 'Doc', redirect_uris: [CALLBACK] };
    response.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' }).end(JSON.stringify(body));
  });
  ({ origin, cert } = documentServer);
});

after(async () => documentServer.close());

let made = 0;
/** A document path no other test uses, so the fetch counts never mix. */
const newDocumentPath = (): string => `/client-${(made += 1)}/metadata.json`;
const fetchesOf = (path: string): number => hits.get(path) ?? 0;

interface Browser {
  readonly address: string;
  cookies: string;
}

async function get(app: FastifyInstance, browser: Browser, url: string): Promise<LightMyRequestResponse> {
  const response = await app.inject({ url, remoteAddress: browser.address, headers: { cookie: browser.cookies, accept: 'text/html' } });
  browser.cookies = cookieJar(browser.cookies, response);
  return response;
}

async function post(app: FastifyInstance, browser: Browser, url: string, pairs: [string, string][]): Promise<LightMyRequestResponse> {
  const response = await app.inject({
    method: 'POST',
    url,
    remoteAddress: browser.address,
    headers: { cookie: browser.cookies, 'content-type': 'application/x-www-form-urlencoded' },
    payload: form(pairs),
  });
  browser.cookies = cookieJar(browser.cookies, response);
  return response;
}

/** /authorize for the document client at `path`: the sign-in page's URL (a login request kept for this browser). */
async function authorize(app: FastifyInstance, browser: Browser, path: string): Promise<string> {
  const response = await get(app, browser, authorizeUrl([
    ['response_type', 'code'],
    ['client_id', `${origin}${path}`],
    ['redirect_uri', CALLBACK],
    ['code_challenge', pkce().challenge],
    ['code_challenge_method', 'S256'],
  ]));
  assert.equal(response.statusCode, 303, response.body);
  return String(response.headers.location);
}

const loginIdOf = (url: string): string => new URL(url, ISSUER).searchParams.get('login') ?? '';

for (const kind of STORE_KINDS) {
  describe(`GET/POST /consent and metadata document fetches (${kind.name} store)`, { skip: kind.skip }, () => {
    let app: FastifyInstance;
    let store: Store;
    let documents: MetadataDocuments;
    let cleanup: () => Promise<void> = async () => undefined;

    before(async () => {
      const opened = await kind.open();
      store = opened.store;
      cleanup = opened.cleanup;
      const base = await testConfig();
      const config = await testConfig({ dynamicClients: LOOPBACK_DOCUMENT_CLIENTS, limits: { ...base.limits, addressFailures: ADDRESS_FAILURES } });
      documents = new MetadataDocuments({ allowPrivateAddresses: true, ca: cert });
      ({ app } = await buildApp({ config, store, keys: await loadSigningKeys(store), documents }));
      await app.ready();
    });
    after(async () => {
      await app.close();
      await documents.close();
      await store.close();
      await cleanup();
    });

    test('without a session, /consent answers the error page and fetches nothing', async () => {
      const path = newDocumentPath();
      const browser: Browser = { address: '198.51.100.7', cookies: '' };
      const loginId = loginIdOf(await authorize(app, browser, path));
      assert.equal(fetchesOf(path), 1, '/authorize fetched the document');
      for (let i = 0; i < ATTEMPTS; i += 1) {
        const response = await get(app, browser, `/consent?login=${loginId}`);
        assert.equal(response.statusCode, 400, response.body);
        assert.match(String(response.headers['content-type']), /^text\/html/);
      }
      const csrf = hiddenInput((await get(app, browser, `/login?login=${loginId}`)).body, 'csrf');
      for (let i = 0; i < ATTEMPTS; i += 1) {
        assert.equal((await post(app, browser, '/consent', [['csrf', csrf], ['login', loginId], ['decision', 'allow']])).statusCode, 400);
      }
      assert.equal(fetchesOf(path), 1, 'no /consent without a session made the server fetch');
    });

    test('with a session, each fetch counts toward the address: a loop ends in the 429 page; other addresses go on', async () => {
      const path = newDocumentPath();
      const browser: Browser = { address: '198.51.100.8', cookies: '' };
      const signInPage = await authorize(app, browser, path);
      const loginId = loginIdOf(signInPage);
      const page = await get(app, browser, signInPage);
      const signedIn = await post(app, browser, '/login', [['csrf', hiddenInput(page.body, 'csrf')], ['login', loginId], ['username', 'alice'], ['password', PASSWORD]]);
      assert.equal(signedIn.statusCode, 303, signedIn.body);
      const resumed = await get(app, browser, String(signedIn.headers.location));
      assert.equal(resumed.headers.location, `/consent?login=${loginId}`, resumed.body);

      const before = fetchesOf(path);
      const responses: LightMyRequestResponse[] = [];
      for (let i = 0; i < ATTEMPTS; i += 1) responses.push(await get(app, browser, `/consent?login=${loginId}`));
      const shown = responses.filter((response) => response.statusCode === 200);
      assert.ok(shown.length > 0, 'the consent page is shown while the budget lasts');
      assert.ok(responses.slice(shown.length).every((response) => response.statusCode === 429), JSON.stringify(responses.map((response) => response.statusCode)));
      assert.equal(fetchesOf(path) - before, shown.length, 'only the admitted ones fetched');
      assert.ok(shown.length < ADDRESS_FAILURES, `${shown.length} fetches from one address`);

      const stopped = responses[responses.length - 1] as LightMyRequestResponse;
      assert.match(String(stopped.headers['content-type']), /^text\/html/);
      assert.match(String(stopped.headers['content-security-policy']), /frame-ancestors 'none'/);
      assert.ok(Number(stopped.headers['retry-after']) > 0);

      // The form's answer fetches too: refused alike, and the consent is not given.
      const csrf = hiddenInput((shown[0] as LightMyRequestResponse).body, 'csrf');
      const allowed = await post(app, browser, '/consent', [['csrf', csrf], ['login', loginId], ['decision', 'allow']]);
      assert.equal(allowed.statusCode, 429, allowed.body);
      assert.equal(fetchesOf(path) - before, shown.length);

      // The same browser from another address is not affected.
      const elsewhere = await get(app, { ...browser, address: '203.0.113.44' }, `/consent?login=${loginId}`);
      assert.equal(elsewhere.statusCode, 200, elsewhere.body);
      assert.equal(fetchesOf(path) - before, shown.length + 1);
    });

    test('/authorize/resume finds the client again the same way: a loop of it from one address ends in the 429 page', async () => {
      const path = newDocumentPath();
      const browser: Browser = { address: '198.51.100.9', cookies: '' };
      const signInPage = await authorize(app, browser, path);
      const loginId = loginIdOf(signInPage);
      const page = await get(app, browser, signInPage);
      const signedIn = await post(app, browser, '/login', [['csrf', hiddenInput(page.body, 'csrf')], ['login', loginId], ['username', 'alice'], ['password', PASSWORD]]);
      assert.equal(signedIn.statusCode, 303, signedIn.body);
      const resumeUrl = String(signedIn.headers.location);
      const before = fetchesOf(path);
      const statuses: number[] = [];
      for (let i = 0; i < ATTEMPTS; i += 1) statuses.push((await get(app, browser, resumeUrl)).statusCode);
      const resumed = statuses.filter((status) => status === 303).length;
      assert.ok(resumed > 0 && resumed < ADDRESS_FAILURES, statuses.join(' '));
      assert.ok(statuses.slice(resumed).every((status) => status === 429), statuses.join(' '));
      assert.equal(fetchesOf(path) - before, resumed, 'only the admitted ones fetched');
    });
  });
}

/**
 * /logout never fetches a client ID metadata document (DESIGN.md §7, third outside review): a client_id that is not
 * configured, registered or already in the document cache is unknown there. Nor does /introspect when a resource
 * server whose label is an https URL authenticates (an outside audit found each introspection fetching the label). The document is served by a real HTTPS
 * server on 127.0.0.1 (allow_private_addresses, as in metadata-document.test.ts), which counts what it is asked.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { buildApp } from '../src/app.js';
import { startHttpsServer, type HttpsTestServer } from './helpers/https-server.js';
import { loadSigningKeys } from './helpers/keys.js';
import { MetadataDocuments } from '../src/clients/metadata-document.js';
import { MemoryStore } from '../src/store/memory.js';
import { authorizeUrl, LOOPBACK_DOCUMENT_CLIENTS, pkce, testConfig } from './helpers/app.js';

const REQUESTS = 26;
const RESOURCE_SERVER_PATH = '/rs';
const RESOURCE_SERVER_SECRET = 'resource-server-secret';

let documentServer: HttpsTestServer;
let origin = '';
let documents: MetadataDocuments;
let app: FastifyInstance;
const hits = new Map<string, number>();
const hitsOf = (path: string): number => hits.get(path) ?? 0;

before(async () => {
  // Every path is a good document of its own URL, so any fetch the server makes would succeed and be counted.
  documentServer = await startHttpsServer((request, response) => {
    const path = request.url ?? '';
    hits.set(path, hitsOf(path) + 1);
    const body = { client_id: `${origin}${path}`, redirect_uris: ['http://127.0.0.1/callback'] };
    response.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'max-age=3600' }).end(JSON.stringify(body));
  });
  origin = documentServer.origin;

  const base = await testConfig({
    dynamicClients: LOOPBACK_DOCUMENT_CLIENTS,
  });
  const label = `${origin}${RESOURCE_SERVER_PATH}`;
  const config = { ...base, resourceServers: new Map([[label, { label, secret: RESOURCE_SERVER_SECRET }]]) };
  documents = new MetadataDocuments({ allowPrivateAddresses: true, ca: documentServer.cert });
  const store = new MemoryStore();
  ({ app } = await buildApp({ config, store, keys: await loadSigningKeys(store), documents }));
  await app.ready();
});

after(async () => {
  await app.close();
  await documents.close();
  await documentServer.close();
});

const logout = (clientId: string, extra: Record<string, string> = {}): Promise<LightMyRequestResponse> =>
  app.inject({ url: `/logout?${new URLSearchParams({ client_id: clientId, ...extra })}` });

/** /authorize with the document client: resolving it fetches (and caches) its document, then sign-in starts. */
async function authorize(clientId: string): Promise<LightMyRequestResponse> {
  const pairs: [string, string][] = [
    ['response_type', 'code'],
    ['client_id', clientId],
    ['redirect_uri', 'http://127.0.0.1:40123/callback'],
    ['code_challenge', pkce().challenge],
    ['code_challenge_method', 'S256'],
  ];
  return app.inject({ url: authorizeUrl(pairs) });
}

describe('/logout and client ID metadata documents', () => {
  test(`${REQUESTS} logouts naming ${REQUESTS} document URLs make no fetch and never redirect`, async () => {
    for (let i = 0; i < REQUESTS; i++) {
      const path = `/doc-${i}`;
      const response = await logout(`${origin}${path}`, { post_logout_redirect_uri: 'http://127.0.0.1/callback', state: 's' });
      assert.equal(response.statusCode, 400, response.body);
      assert.equal(response.headers.location, undefined, 'the error page, never a redirect');
      assert.match(response.body, /unknown client/);
      assert.equal(hitsOf(path), 0, `${path} was fetched`);
    }
    assert.equal([...hits.values()].reduce((sum, count) => sum + count, 0), 0, 'the document server was asked nothing');
  });

  test('one URL named again and again is never fetched either', async () => {
    const path = '/repeated';
    for (let i = 0; i < REQUESTS; i++) assert.equal((await logout(`${origin}${path}`)).statusCode, 400);
    assert.equal(hitsOf(path), 0);
  });

  test('a client already resolved at /authorize (so cached) is used by /logout, still without a fetch', async () => {
    const path = '/known-client.json';
    const clientId = `${origin}${path}`;
    assert.equal((await logout(clientId)).statusCode, 400, 'not cached yet: unknown');
    assert.equal(hitsOf(path), 0);

    const started = await authorize(clientId);
    assert.equal(started.statusCode, 303, started.body);
    assert.match(String(started.headers.location), /^\/login\?/, 'the client was resolved: sign-in starts');
    assert.equal(hitsOf(path), 1, '/authorize fetched the document once');

    for (let i = 0; i < 3; i++) {
      const response = await logout(clientId);
      assert.equal(response.statusCode, 200, response.body);
      assert.ok(response.body.includes(`${clientId} asks to sign you out`), 'the confirmation page names the cached client');
      assert.ok(response.body.includes(`name="client_id" value="${clientId}"`));
    }
    assert.equal(hitsOf(path), 1, '/logout fetched nothing');
  });
});

describe('/introspect by a resource server labelled with an https URL', () => {
  test('authenticates it by its label and secret without fetching the label as a metadata document, by Basic or in the body', async () => {
    const label = `${origin}${RESOURCE_SERVER_PATH}`;
    const basic = `Basic ${Buffer.from(`${encodeURIComponent(label)}:${RESOURCE_SERVER_SECRET}`).toString('base64')}`;
    const form = { 'content-type': 'application/x-www-form-urlencoded' };
    for (let i = 0; i < 3; i++) {
      const byBasic = await app.inject({ method: 'POST', url: '/introspect', headers: { ...form, authorization: basic }, payload: 'token=not-a-token' });
      assert.equal(byBasic.statusCode, 200, byBasic.body);
      assert.deepEqual(byBasic.json(), { active: false });
      const inBody = await app.inject({ method: 'POST', url: '/introspect', headers: form, payload: new URLSearchParams({ token: 'x', client_id: label, client_secret: RESOURCE_SERVER_SECRET }).toString() });
      assert.equal(inBody.statusCode, 200, inBody.body);
    }
    const wrong = await app.inject({ method: 'POST', url: '/introspect', headers: form, payload: new URLSearchParams({ token: 'x', client_id: label, client_secret: 'wrong' }).toString() });
    assert.equal(wrong.statusCode, 401, wrong.body);
    assert.equal(hitsOf(RESOURCE_SERVER_PATH), 0, 'the label was never fetched');
  });
});

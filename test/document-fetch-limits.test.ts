/**
 * DESIGN.md §9: a client ID metadata document fetch counts toward the address's limits, at every endpoint that
 * resolves a client, and before the fetch starts: a stranger naming a new document URL in each request makes the
 * server fetch at most address_failures documents per window, whether the requests succeed (/revoke answers 200) or
 * come all at once. Found by an audit: the form endpoints counted nothing on success and checked before any count.
 * The documents come from a real HTTPS server on 127.0.0.1 (allow_private_addresses), which counts what it is asked.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { buildApp } from '../src/app.js';
import { MetadataDocuments } from '../src/clients/metadata-document.js';
import { MemoryStore } from '../src/store/memory.js';
import { form, ISSUER, LOOPBACK_DOCUMENT_CLIENTS, testConfig } from './helpers/app.js';
import { assertion, JWT_BEARER, newKey, type ClientKey } from './helpers/proofs.js';
import { startHttpsServer, type HttpsTestServer } from './helpers/https-server.js';
import { loadSigningKeys } from './helpers/keys.js';
import type { SigningKeys } from '../src/crypto/keys.js';
import { signJwt } from '../src/crypto/jwt.js';
import { accessTokenClaims } from '../src/tokens/claims.js';

const ADDRESS_FAILURES = 3;

let documentServer: HttpsTestServer;
let origin = '';
let cert: Buffer;
let fetches = 0;
let signerKey: ClientKey;
/** How long the document server holds each answer: long enough that parallel requests overlap. */
let holdMs = 0;

before(async () => {
  signerKey = await newKey();
  // Every path is a good, cacheable document of its own URL: any fetch succeeds, so only the limits stop them.
  documentServer = await startHttpsServer((request, response) => {
    fetches += 1;
    const path = request.url ?? '';
    // Under /signed-N/: a private_key_jwt document whose keys are at its own jwks_uri (DESIGN.md §13).
    const signed = /^\/signed-\d+\//.exec(path)?.[0];
    const body =
      signed === undefined
        ? { client_id: `${origin}${path}`, redirect_uris: ['http://127.0.0.1/callback'] }
        : path.endsWith('/jwks.json')
          ? { keys: [signerKey.publicJwk] }
          : { client_id: `${origin}${path}`, redirect_uris: ['http://127.0.0.1/callback'], token_endpoint_auth_method: 'private_key_jwt', jwks_uri: `${origin}${signed}jwks.json` };
    // Under /no-store/: a document that may not be cached, so every resolution of it fetches again.
    const caching = path.startsWith('/no-store/') ? 'no-store' : 'max-age=3600';
    const send = (): void => void response.writeHead(200, { 'content-type': 'application/json', 'cache-control': caching }).end(JSON.stringify(body));
    if (holdMs > 0) setTimeout(send, holdMs);
    else send();
  });
  ({ origin, cert } = documentServer);
});

after(async () => documentServer.close());

let made = 0;
/** A document URL never asked for before, so resolving it fetches. */
const newDocumentUrl = (): string => `${origin}/client-${(made += 1)}/metadata.json`;

/** A fresh app (fresh limits) with metadata documents on and address_failures = ADDRESS_FAILURES. */
async function withApp(run: (app: FastifyInstance, keys: SigningKeys) => Promise<void>): Promise<void> {
  const base = await testConfig();
  const config = await testConfig({
    limits: { ...base.limits, addressFailures: ADDRESS_FAILURES },
    dynamicClients: LOOPBACK_DOCUMENT_CLIENTS,
  });
  const documents = new MetadataDocuments({ allowPrivateAddresses: true, ca: cert });
  const store = new MemoryStore();
  const keys = await loadSigningKeys(store);
  const { app } = await buildApp({ config, store, keys, documents });
  await app.ready();
  try {
    await run(app, keys);
  } finally {
    await app.close();
    await documents.close();
  }
}

const post = (app: FastifyInstance, url: string, pairs: [string, string][]): Promise<LightMyRequestResponse> =>
  app.inject({ method: 'POST', url, headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: form(pairs) });

const statusCounts = (responses: readonly LightMyRequestResponse[]): Record<number, number> =>
  responses.reduce<Record<number, number>>((counts, response) => ({ ...counts, [response.statusCode]: (counts[response.statusCode] ?? 0) + 1 }), {});

describe('metadata document fetches count against the address, before they start', () => {
  test('/revoke, which answers 200 whatever the token: one address makes at most address_failures fetches', async () => {
    await withApp(async (app) => {
      const before = fetches;
      const responses: LightMyRequestResponse[] = [];
      for (let i = 0; i < 20; i += 1) responses.push(await post(app, '/revoke', [['client_id', newDocumentUrl()], ['token', 'anything']]));
      // A fetching request is let in only while the budget holds its fetch and the failure it may still turn out to
      // be: the last count is never enough for one, so the address stops one fetch short of address_failures.
      assert.equal(fetches - before, ADDRESS_FAILURES - 1, JSON.stringify(statusCounts(responses)));
      assert.deepEqual(statusCounts(responses), { 200: ADDRESS_FAILURES - 1, 429: 21 - ADDRESS_FAILURES });
    });
  });

  test('a burst at /token, /par, /introspect, /device_authorization and /revoke at once: the fetches stop at the limit', async () => {
    holdMs = 300;
    try {
      await withApp(async (app) => {
        const before = fetches;
        const endpoints = ['/token', '/par', '/introspect', '/device_authorization', '/revoke'];
        const responses = await Promise.all(
          Array.from({ length: 50 }, (_, i) =>
            post(app, endpoints[i % endpoints.length] as string, [['client_id', newDocumentUrl()], ['grant_type', 'authorization_code'], ['code', 'x'], ['token', 'y'], ['response_type', 'code']]),
          ),
        );
        // Each admitted request holds one count for its fetch and one for the failure it may turn out to be (as each
        // of these does): with 3, the first takes 2 at once, and the 1 left is not enough for a second.
        assert.equal(fetches - before, 1, JSON.stringify(statusCounts(responses)));
        assert.deepEqual(statusCounts(responses), { 400: 1, 429: 49 });
      });
    } finally {
      holdMs = 0;
    }
  });

  test('/userinfo with tokens of a document client whose document says no-store: each fetch counts (an audit: 300 calls, 300 fetches, none counted)', async () => {
    await withApp(async (app, keys) => {
      const clientId = `${origin}/no-store/metadata.json`;
      const claims = accessTokenClaims({ issuer: ISSUER, subject: 'alice', clientId, audience: ISSUER, scope: ['openid'], lifetimeSeconds: 600, grantId: 'no-such-grant' }, Date.now());
      const token = await signJwt(keys.accessToken, 'at+jwt', claims);
      const before = fetches;
      const statuses: number[] = [];
      for (let i = 0; i < 10; i += 1) statuses.push((await app.inject({ url: '/userinfo', headers: { authorization: `Bearer ${token}` } })).statusCode);
      // As at /revoke: the last count is never enough for a fetch, so the address stops one fetch short of the limit.
      assert.equal(fetches - before, ADDRESS_FAILURES - 1, statuses.join(' '));
      assert.deepEqual(statuses, [...Array(ADDRESS_FAILURES - 1).fill(401), ...Array(11 - ADDRESS_FAILURES).fill(429)]);
    });
  });

  test('a private_key_jwt document\'s jwks_uri counts too: documents and key sets together stay within address_failures', async () => {
    await withApp(async (app) => {
      const before = fetches;
      const responses: LightMyRequestResponse[] = [];
      for (let i = 0; i < 10; i += 1) {
        const clientId = `${origin}/signed-${(made += 1)}/metadata.json`;
        const jwt = await assertion(signerKey, { clientId, audience: ISSUER });
        responses.push(await post(app, '/revoke', [['client_id', clientId], ['client_assertion_type', JWT_BEARER], ['client_assertion', jwt], ['token', 'anything']]));
      }
      // Each request here fetches a document and its key set: the first counts both (and the failure it may be) at once.
      assert.equal(responses[0]?.statusCode, 200, responses[0]?.body);
      assert.equal(fetches - before, 2, JSON.stringify(statusCounts(responses)));
      assert.deepEqual(statusCounts(responses), { 200: 1, 429: 9 });
    });
  });

  test('a document already fetched costs nothing more: its client goes on using it', async () => {
    await withApp(async (app) => {
      const known = newDocumentUrl();
      const before = fetches;
      for (let i = 0; i < 10; i += 1) {
        const response = await post(app, '/revoke', [['client_id', known], ['token', 'anything']]);
        assert.equal(response.statusCode, 200, `request ${i + 1}: ${response.body}`);
      }
      assert.equal(fetches - before, 1);
    });
  });

  test('/authorize: a burst of requests naming new documents fetches at most address_failures of them', async () => {
    holdMs = 300;
    try {
      await withApp(async (app) => {
        const before = fetches;
        const responses = await Promise.all(
          Array.from({ length: 20 }, () =>
            app.inject({ url: `/authorize?${new URLSearchParams({ response_type: 'code', client_id: newDocumentUrl(), redirect_uri: 'http://127.0.0.1/callback' })}` }),
          ),
        );
        // As at the form endpoints: the first holds one count for its fetch and one for what it may keep or fail.
        assert.equal(fetches - before, 1, JSON.stringify(statusCounts(responses)));
        assert.deepEqual(statusCounts(responses), { 303: 1, 429: 19 });
      });
    } finally {
      holdMs = 0;
    }
  });
});

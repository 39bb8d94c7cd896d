/**
 * A request carrying a client assertion (private_key_jwt, RFC 7523) and a DPoP proof (RFC 9449) at once, at /token and
 * /par over HTTP on every store: their jtis are recorded together or not at all, so a request refused for one of them
 * writes nothing and leaves the other usable (DESIGN.md §1, §13).
 */
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import type { Config } from '../src/config/types.js';
import { STORE_KINDS } from './helpers/databases.js';
import { appPerSuite, client, form, ISSUER, pkce, REDIRECT, type TestApp, testConfig } from './helpers/app.js';
import { assertion, JWT_BEARER, newKey, proof, type ClientKey } from './helpers/proofs.js';

/** DESIGN.md §13 refusals, compared character for character. */
const ASSERTION_USED = 'the client assertion was already used (its jti was seen before)';
const PROOF_USED = 'the DPoP proof was already used (its jti was seen before); make a new proof for each request';

let clientKey: ClientKey;
let proofKey: ClientKey;
before(async () => {
  clientKey = await newKey('ES256');
  proofKey = await newKey('ES256');
});

async function config(): Promise<Config> {
  const base = await testConfig();
  const signer = client({ clientId: 'signer', kind: 'confidential', assertionKeys: { jwks: { keys: [clientKey.publicJwk] } }, scopes: ['read'] });
  return { ...base, clients: new Map([...base.clients, ['signer', signer]]) };
}

/** Each endpoint with what it is sent besides the credentials, and the status of its success. */
const ENDPOINTS = [
  { path: '/token', pairs: (): (readonly [string, string])[] => [['grant_type', 'client_credentials'], ['scope', 'read']], success: 200 },
  {
    path: '/par',
    pairs: (): (readonly [string, string])[] => [
      ['response_type', 'code'],
      ['redirect_uri', REDIRECT],
      ['scope', 'read'],
      ['code_challenge', pkce().challenge],
      ['code_challenge_method', 'S256'],
    ],
    success: 201,
  },
] as const;

for (const kind of STORE_KINDS) {
  describe(`a client assertion and a DPoP proof in one request, on the ${kind.name} store`, { skip: kind.skip }, () => {
    let t: TestApp;
    appPerSuite(kind, async () => ({ config: await config() }), (opened) => {
      t = opened;
    });

    for (const endpoint of ENDPOINTS) {
      const newAssertion = (): Promise<string> => assertion(clientKey, { clientId: 'signer', audience: ISSUER });
      const newProof = (): Promise<string> => proof(proofKey, { htu: `${ISSUER}${endpoint.path}` });

      /** POST to the endpoint, authenticated by `credentials.assertion`, with `credentials.proof` as its DPoP header. */
      const send = (app: FastifyInstance, credentials: { readonly assertion: string; readonly proof: string }): Promise<LightMyRequestResponse> =>
        app.inject({
          method: 'POST',
          url: endpoint.path,
          headers: { 'content-type': 'application/x-www-form-urlencoded', dpop: credentials.proof },
          payload: form([...endpoint.pairs(), ['client_id', 'signer'], ['client_assertion_type', JWT_BEARER], ['client_assertion', credentials.assertion]]),
        });

      const assertAccepted = (response: LightMyRequestResponse, why: string): void => assert.equal(response.statusCode, endpoint.success, `${why}: ${response.body}`);

      function assertRefused(response: LightMyRequestResponse, status: number, error: string, description: string): void {
        assert.equal(response.statusCode, status, response.body);
        assert.equal(response.json().error, error, response.body);
        assert.equal(response.json().error_description, description);
      }

      test(`${endpoint.path}: a request refused for one of its credentials uses up neither`, async () => {
        const usedProof = await newProof();
        assertAccepted(await send(t.app, { assertion: await newAssertion(), proof: usedProof }), 'fresh assertion, fresh proof');

        // A fresh assertion with a replayed proof: refused for the proof, and the assertion is left usable.
        const keptAssertion = await newAssertion();
        assertRefused(await send(t.app, { assertion: keptAssertion, proof: usedProof }), 400, 'invalid_dpop_proof', PROOF_USED);
        assertAccepted(await send(t.app, { assertion: keptAssertion, proof: await newProof() }), 'the assertion of the refused request');

        // A replayed assertion with a fresh proof: refused for the assertion, and the proof is left usable.
        const keptProof = await newProof();
        assertRefused(await send(t.app, { assertion: keptAssertion, proof: keptProof }), 401, 'invalid_client', ASSERTION_USED);
        assertAccepted(await send(t.app, { assertion: await newAssertion(), proof: keptProof }), 'the proof of the refused request');

        // Both replayed: the assertion is named, as the client is judged before anything it asks.
        assertRefused(await send(t.app, { assertion: keptAssertion, proof: keptProof }), 401, 'invalid_client', ASSERTION_USED);
      });

      test(`${endpoint.path}: two requests racing with one proof and their own assertions: one is accepted, the other's assertion stays usable`, async () => {
        const raced = await newProof();
        const assertions = [await newAssertion(), await newAssertion()];
        const answers = await Promise.all(assertions.map((each) => send(t.app, { assertion: each, proof: raced })));
        assert.deepEqual(answers.map((answer) => answer.statusCode).sort(), [endpoint.success, 400].sort(), answers.map((answer) => answer.body).join(' '));
        const loser = answers.findIndex((answer) => answer.statusCode === 400);
        assertRefused(answers[loser] as LightMyRequestResponse, 400, 'invalid_dpop_proof', PROOF_USED);
        assertAccepted(await send(t.app, { assertion: assertions[loser] as string, proof: await newProof() }), "the losing request's assertion");
        assertRefused(await send(t.app, { assertion: assertions[1 - loser] as string, proof: await newProof() }), 401, 'invalid_client', ASSERTION_USED);
      });
    }
  });
}

/** DPoP (RFC 9449, DESIGN.md §13) at /token, /userinfo and /introspect over HTTP, on every store. */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { importJWK, SignJWT } from 'jose';
import type { Config } from '../src/config/types.js';
import { rememberedProofKeys } from '../src/crypto/dpop.js';
import { createLogger } from '../src/log.js';
import { openStore } from '../src/store/open.js';
import type { Store } from '../src/store/types.js';
import { createPostgresDatabase, POSTGRES_SKIP_REASON, POSTGRES_URL, STORE_KINDS } from './helpers/databases.js';
import {
  appPerSuite,
  AUDIENCE,
  basic,
  claimsOf,
  client,
  form,
  ISSUER,
  REDIRECT,
  SECRET,
  signInForCode,
  testApp,
  type TestApp,
  testConfig,
} from './helpers/app.js';
import { athOf, newKey, privateJwkOf, proof, type ClientKey, type ProofAlg } from './helpers/proofs.js';

const TOKEN = `${ISSUER}/token`;
const USERINFO = `${ISSUER}/userinfo`;
const API = AUDIENCE[0] as string;
const RS_SECRET = 'api-resource-server-secret';

async function config(): Promise<Config> {
  const base = await testConfig();
  const clients = new Map(base.clients);
  clients.set('strict', client({ clientId: 'strict', refreshLifetimeMs: 3600_000, requireDpop: true }));
  return {
    ...base,
    clients,
    resourceServers: new Map([[API, { label: API, secret: RS_SECRET }]]),
    dynamicClients: {
      audience: ['https://mcp.example.org/mcp'],
      metadataDocuments: false,
      registration: 'open',
      scopes: ['openid', 'profile'],
      refreshReuseGraceMs: 0,
      allowPrivateAddresses: false,
    },
  };
}

/** POST /token with `pairs`; `auth` null sends none; `dpop` is one proof or several DPoP headers. */
function token(app: FastifyInstance, pairs: readonly (readonly [string, string])[], options: { auth?: string | null; dpop?: string | string[] } = {}): Promise<LightMyRequestResponse> {
  const auth = options.auth === undefined ? basic('service', SECRET) : options.auth;
  return app.inject({
    method: 'POST',
    url: '/token',
    headers: {
      'content-type': 'application/x-www-form-urlencoded',
      ...(auth === null ? {} : { authorization: auth }),
      ...(options.dpop === undefined ? {} : { dpop: options.dpop }),
    },
    payload: form(pairs),
  });
}

const clientCredentials = [['grant_type', 'client_credentials'], ['scope', 'read']] as const;

/** A code of the public client `clientId` and the pairs that exchange it. */
async function codeExchange(app: FastifyInstance, clientId = 'spa', scope = 'openid profile'): Promise<(readonly [string, string])[]> {
  const { code, verifier } = await signInForCode(app, { clientId, scope });
  return [['grant_type', 'authorization_code'], ['code', code], ['redirect_uri', REDIRECT], ['code_verifier', verifier], ['client_id', clientId]];
}

const refreshPairs = (refreshToken: string, clientId = 'spa'): (readonly [string, string])[] => [
  ['grant_type', 'refresh_token'],
  ['refresh_token', refreshToken],
  ['client_id', clientId],
];

function assertProofRefused(response: LightMyRequestResponse, description: RegExp): void {
  assert.equal(response.statusCode, 400, response.body);
  assert.equal(response.json().error, 'invalid_dpop_proof', response.body);
  assert.match(response.json().error_description, description);
}

for (const kind of STORE_KINDS) {
  describe(`DPoP on the ${kind.name} store`, { skip: kind.skip }, () => {
    let t: TestApp;
    let key: ClientKey;
    appPerSuite(kind, async () => ({ config: await config() }), async (opened) => {
      t = opened;
      key = await newKey('ES256');
    });

    const introspect = (accessToken: string): Promise<LightMyRequestResponse> =>
      t.app.inject({
        method: 'POST',
        url: '/introspect',
        headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic(API, RS_SECRET) },
        payload: form([['token', accessToken]]),
      });

    test('with a valid proof of each algorithm, client_credentials gives a DPoP-bound token (cnf.jkt) and token_type DPoP; /introspect says so', async () => {
      for (const alg of ['ES256', 'EdDSA', 'RS256', 'PS256'] as ProofAlg[]) {
        const each = await newKey(alg);
        const response = await token(t.app, clientCredentials, { dpop: await proof(each, { htu: TOKEN }) });
        assert.equal(response.statusCode, 200, `${alg}: ${response.body}`);
        assert.equal(response.json().token_type, 'DPoP');
        assert.deepEqual(claimsOf(response.json().access_token).cnf, { jkt: each.jkt });
        const answer = (await introspect(response.json().access_token)).json();
        assert.equal(answer.active, true);
        assert.equal(answer.token_type, 'DPoP');
        assert.deepEqual(answer.cnf, { jkt: each.jkt });
      }
      // Without a proof: a Bearer token without cnf, as before.
      const bearer = await token(t.app, clientCredentials);
      assert.equal(bearer.json().token_type, 'Bearer');
      assert.equal(claimsOf(bearer.json().access_token).cnf, undefined);
      assert.equal((await introspect(bearer.json().access_token)).json().token_type, 'Bearer');
    });

    test("a stranger's keys fill no memory: a proof whose signature fails leaves its key unremembered, and an RSA key over 4,096 bits is refused unimported", async () => {
      const before = rememberedProofKeys();
      for (let i = 0; i < 5; i += 1) {
        const fresh = await newKey('ES256');
        const [head, body] = (await proof(fresh, { htu: TOKEN })).split('.');
        const forged = `${head}.${body}.${Buffer.alloc(64, i + 1).toString('base64url')}`;
        assertProofRefused(await token(t.app, clientCredentials, { dpop: forged }), /signature does not verify/);
      }
      assert.equal(rememberedProofKeys(), before, 'no key of a refused proof is kept');
      const huge = { kty: 'RSA', e: 'AQAB', n: randomBytes(1024).toString('base64url') };
      const rsaHeader = Buffer.from(JSON.stringify({ typ: 'dpop+jwt', alg: 'RS256', jwk: huge })).toString('base64url');
      const rsaBody = Buffer.from(JSON.stringify({ jti: randomUUID(), htm: 'POST', htu: TOKEN, iat: Math.floor(Date.now() / 1000) })).toString('base64url');
      assertProofRefused(await token(t.app, clientCredentials, { dpop: `${rsaHeader}.${rsaBody}.${Buffer.alloc(1024).toString('base64url')}` }), /usable public key/);
      // Nor a 2,048-bit modulus with a 2,048-bit exponent: each check would cost about 20 times a usual one.
      const hugeExponent = { kty: 'RSA', e: randomBytes(256).toString('base64url'), n: randomBytes(256).toString('base64url') };
      const exponentHeader = Buffer.from(JSON.stringify({ typ: 'dpop+jwt', alg: 'RS256', jwk: hugeExponent })).toString('base64url');
      assertProofRefused(await token(t.app, clientCredentials, { dpop: `${exponentHeader}.${rsaBody}.${Buffer.alloc(256).toString('base64url')}` }), /usable public key/);
      // A proof that verifies is what makes its key remembered.
      const good = await token(t.app, clientCredentials, { dpop: await proof(await newKey('ES256'), { htu: TOKEN }) });
      assert.equal(good.statusCode, 200, good.body);
      assert.equal(rememberedProofKeys(), before + 1);
    });

    test('a key is remembered once imported, yet every proof is verified: a forged proof carrying a remembered key is refused', async () => {
      const rsa = await newKey('RS256');
      // One RSA key under two algorithms: each proof is checked with the algorithm it names.
      const pss: ClientKey = { ...rsa, alg: 'PS256', privateKey: (await importJWK(await privateJwkOf(rsa), 'PS256')) as ClientKey['privateKey'] };
      for (const signer of [rsa, pss]) {
        const response = await token(t.app, clientCredentials, { dpop: await proof(signer, { htu: TOKEN }) });
        assert.equal(response.statusCode, 200, `${signer.alg}: ${response.body}`);
        assert.deepEqual(claimsOf(response.json().access_token).cnf, { jkt: rsa.jkt });
      }
      // Members beside the key's own (RFC 7638 §3.2) change neither the key nor its thumbprint.
      const decorated = await proof(key, { htu: TOKEN, header: { jwk: { ...key.publicJwk, use: 'sig', kid: 'any' } } });
      const same = await token(t.app, clientCredentials, { dpop: decorated });
      assert.equal(same.statusCode, 200, same.body);
      assert.deepEqual(claimsOf(same.json().access_token).cnf, { jkt: key.jkt });
      const forged = await proof(key, { htu: TOKEN, signWith: await newKey('ES256') });
      assertProofRefused(await token(t.app, clientCredentials, { dpop: forged }), /signature does not verify/);
    });

    test('htu is compared without query and fragment; scheme and host case do not matter', async () => {
      const response = await token(t.app, clientCredentials, { dpop: await proof(key, { htu: 'HTTP://127.0.0.1:8080/token?x=1#f' }) });
      assert.equal(response.statusCode, 200, response.body);
      assert.equal(response.json().token_type, 'DPoP');
    });

    test('every refused proof is 400 invalid_dpop_proof saying why, and the code it came with stays usable', async () => {
      const pairs = await codeExchange(t.app);
      const other = await newKey('ES256');
      const now = Math.floor(Date.now() / 1000);
      const hmac = await new SignJWT({ htm: 'POST', htu: TOKEN, iat: now, jti: randomUUID() })
        .setProtectedHeader({ typ: 'dpop+jwt', alg: 'HS256', jwk: { kty: 'oct', k: 'c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0' } as Record<string, string> })
        .sign(new TextEncoder().encode('secretsecretsecretsecretsecret!!'));
      // Each proof is made just before it is sent, and iat (whole seconds, floored) sits 2 s ahead: a slow run must not slide it back into the window.
      const cases: [string, () => Promise<string | string[]>, RegExp][] = [
        ['not a JWT', async () => 'not-a-jwt', /^the DPoP proof is not a JWT$/],
        ['typ JWT', async () => proof(key, { htu: TOKEN, header: { typ: 'JWT' } }), /typ "dpop\+jwt"/],
        ['a symmetric alg', async () => hmac, /must be signed with one of ES256, EdDSA, RS256, PS256/],
        ['no jwk', async () => proof(key, { htu: TOKEN, header: { jwk: undefined } }), /public key in the jwk header/],
        ['a private jwk', async () => proof(key, { htu: TOKEN, header: { jwk: await privateJwkOf(key) } }), /without private key members/],
        ['signed by another key', async () => proof(key, { htu: TOKEN, signWith: other }), /signature does not verify/],
        ['htm GET', async () => proof(key, { htu: TOKEN, htm: 'GET' }), /htm must be "POST"/],
        ['htu of /userinfo', async () => proof(key, { htu: USERINFO }), /htu must be "http:\/\/127\.0\.0\.1:8080\/token"/],
        ['htu of another host', async () => proof(key, { htu: 'http://127.0.0.1:9999/token' }), /htu must be/],
        ['htu with a user name', async () => proof(key, { htu: 'http://someone:pw@127.0.0.1:8080/token' }), /htu must be/],
        ['iat 61 s ago', async () => proof(key, { htu: TOKEN, iat: Math.floor(Date.now() / 1000) - 61 }), /iat is not within 60 seconds/],
        ['iat 61+ s ahead', async () => proof(key, { htu: TOKEN, iat: Math.floor(Date.now() / 1000) + 62 }), /iat is not within 60 seconds/],
        ['no jti', async () => proof(key, { htu: TOKEN, jti: null }), /has no jti claim/],
        ['two DPoP headers', async () => [await proof(key, { htu: TOKEN }), await proof(key, { htu: TOKEN })], /more than one DPoP header/],
      ];
      for (const [name, makeProof, description] of cases) {
        const response = await token(t.app, pairs, { auth: null, dpop: await makeProof() });
        assertProofRefused(response, description);
        assert.doesNotMatch(response.body, /eyJ/, `${name}: the answer echoes no proof`);
      }
      const good = await token(t.app, pairs, { auth: null, dpop: await proof(key, { htu: TOKEN }) });
      assert.equal(good.statusCode, 200, good.body);
    });

    test('a proof is accepted once: the same proof again is refused, also on a request that would otherwise pass', async () => {
      const once = await proof(key, { htu: TOKEN });
      assert.equal((await token(t.app, clientCredentials, { dpop: once })).statusCode, 200);
      assertProofRefused(await token(t.app, clientCredentials, { dpop: once }), /already used/);
      // A replayed proof with a valid code: refused, and the code is still there for a fresh proof.
      const pairs = await codeExchange(t.app);
      const used = await proof(key, { htu: TOKEN });
      assert.equal((await token(t.app, clientCredentials, { dpop: used })).statusCode, 200);
      assertProofRefused(await token(t.app, pairs, { auth: null, dpop: used }), /already used/);
      assert.equal((await token(t.app, pairs, { auth: null, dpop: await proof(key, { htu: TOKEN }) })).statusCode, 200);
    });

    test('two requests racing with one proof: exactly one is answered 200', async () => {
      const raced = await proof(key, { htu: TOKEN });
      const answers = await Promise.all([token(t.app, clientCredentials, { dpop: raced }), token(t.app, clientCredentials, { dpop: raced })]);
      assert.deepEqual(answers.map((answer) => answer.statusCode).sort(), [200, 400]);
    });

    test('a request refused for another reason does not use up its proof (its jti is recorded last)', async () => {
      const pairs = await codeExchange(t.app);
      const kept = await proof(key, { htu: TOKEN });
      const wrongVerifier = pairs.map(([name, value]) => [name, name === 'code_verifier' ? 'x'.repeat(43) : value] as const);
      assert.equal((await token(t.app, wrongVerifier, { auth: null, dpop: kept })).json().error, 'invalid_grant');
      const exchanged = await token(t.app, pairs, { auth: null, dpop: kept });
      assert.equal(exchanged.statusCode, 200, exchanged.body);
      assert.deepEqual(claimsOf(exchanged.json().access_token).cnf, { jkt: key.jkt });
      // ... and once it succeeded, it is used.
      assertProofRefused(await token(t.app, clientCredentials, { dpop: kept }), /already used/);
    });

    test("a public client's refresh token is bound to the proof's key: a refresh needs a proof by that key, else invalid_grant and nothing changes", async () => {
      const exchanged = await token(t.app, await codeExchange(t.app), { auth: null, dpop: await proof(key, { htu: TOKEN }) });
      assert.equal(exchanged.statusCode, 200, exchanged.body);
      assert.equal(exchanged.json().token_type, 'DPoP');
      const refreshToken = exchanged.json().refresh_token as string;

      const unproven = await token(t.app, refreshPairs(refreshToken), { auth: null });
      assert.equal(unproven.statusCode, 400);
      assert.deepEqual(unproven.json(), { error: 'invalid_grant', error_description: 'the refresh token is bound to a DPoP key; send a DPoP proof made with that key' });
      const otherKey = await token(t.app, refreshPairs(refreshToken), { auth: null, dpop: await proof(await newKey('EdDSA'), { htu: TOKEN }) });
      assert.equal(otherKey.statusCode, 400);
      assert.deepEqual(otherKey.json(), { error: 'invalid_grant', error_description: 'the refresh token is bound to another DPoP key than the one of this proof' });

      // The refused refreshes left the token usable; its successor is bound to the same key.
      const refreshed = await token(t.app, refreshPairs(refreshToken), { auth: null, dpop: await proof(key, { htu: TOKEN }) });
      assert.equal(refreshed.statusCode, 200, refreshed.body);
      assert.equal(refreshed.json().token_type, 'DPoP');
      assert.deepEqual(claimsOf(refreshed.json().access_token).cnf, { jkt: key.jkt });
      const next = refreshed.json().refresh_token as string;
      assert.equal((await token(t.app, refreshPairs(next), { auth: null })).json().error, 'invalid_grant');
      // A rotated, bound token presented without its key cannot revoke the grant (reuse detection comes after the binding).
      assert.equal((await token(t.app, refreshPairs(refreshToken), { auth: null })).json().error, 'invalid_grant');
      assert.equal((await token(t.app, refreshPairs(next), { auth: null, dpop: await proof(key, { htu: TOKEN }) })).statusCode, 200);
    });

    test('dpop_jkt at /authorize binds the code to that key (RFC 9449 §10): without its proof, or with another key, invalid_grant and the code stays usable', async () => {
      const pairsOf = async (clientId: string, extra: readonly (readonly [string, string])[]): Promise<(readonly [string, string])[]> => {
        const { code, verifier } = await signInForCode(t.app, { clientId, scope: 'openid profile', extra });
        return [['grant_type', 'authorization_code'], ['code', code], ['redirect_uri', REDIRECT], ['code_verifier', verifier], ['client_id', clientId]];
      };
      const pairs = await pairsOf('spa', [['dpop_jkt', key.jkt]]);
      const unproven = await token(t.app, pairs, { auth: null });
      assert.equal(unproven.statusCode, 400);
      assert.deepEqual(unproven.json(), { error: 'invalid_grant', error_description: 'the authorization code is bound to a DPoP key; send a DPoP proof made with that key' });
      const otherKey = await token(t.app, pairs, { auth: null, dpop: await proof(await newKey('EdDSA'), { htu: TOKEN }) });
      assert.deepEqual(otherKey.json(), { error: 'invalid_grant', error_description: 'the authorization code is bound to another DPoP key than the one of this proof' });

      const exchanged = await token(t.app, pairs, { auth: null, dpop: await proof(key, { htu: TOKEN }) });
      assert.equal(exchanged.statusCode, 200, exchanged.body);
      assert.equal(exchanged.json().token_type, 'DPoP');
      assert.deepEqual(claimsOf(exchanged.json().access_token).cnf, { jkt: key.jkt });
      // A replay of the used, bound code without its key cannot revoke the grant: the binding is judged first.
      assert.equal((await token(t.app, pairs, { auth: null })).json().error, 'invalid_grant');
      assert.equal((await token(t.app, refreshPairs(exchanged.json().refresh_token), { auth: null, dpop: await proof(key, { htu: TOKEN }) })).statusCode, 200);

      // A confidential client's code is bound the same way; without dpop_jkt no key is asked for.
      const confidential = await pairsOf('webapp', [['dpop_jkt', key.jkt]]);
      assert.equal((await token(t.app, confidential, { auth: basic('webapp', SECRET) })).json().error, 'invalid_grant');
      assert.equal((await token(t.app, confidential, { auth: basic('webapp', SECRET), dpop: await proof(key, { htu: TOKEN }) })).statusCode, 200);
      assert.equal((await token(t.app, await pairsOf('spa', []), { auth: null })).statusCode, 200);
    });

    test('a dpop_jkt that is not a SHA-256 thumbprint, or sent twice, is refused at /authorize', async () => {
      const start = (extra: readonly (readonly [string, string])[]): Promise<LightMyRequestResponse> =>
        t.app.inject({
          method: 'GET',
          url: `/authorize?${form([['response_type', 'code'], ['client_id', 'spa'], ['redirect_uri', REDIRECT], ['scope', 'openid'], ['state', 's'], ['code_challenge', 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM'], ['code_challenge_method', 'S256'], ...extra])}`,
        });
      for (const value of ['', 'short', `${key.jkt}=`, `${key.jkt.slice(0, 42)}+`]) {
        const refused = await start([['dpop_jkt', value]]);
        assert.equal(refused.statusCode, 303, refused.body);
        const location = new URL(refused.headers.location as string);
        assert.equal(location.searchParams.get('error'), 'invalid_request', value);
        assert.equal(location.searchParams.get('error_description'), 'dpop_jkt must be the base64url SHA-256 JWK thumbprint of a DPoP key (RFC 9449 §10)');
      }
      const twice = await start([['dpop_jkt', key.jkt], ['dpop_jkt', key.jkt]]);
      assert.equal(twice.statusCode, 400);
    });

    test("a confidential client's refresh token is not bound (RFC 9449 §5): it refreshes without a proof", async () => {
      const { code, verifier } = await signInForCode(t.app, { scope: 'openid' });
      const pairs = [['grant_type', 'authorization_code'], ['code', code], ['redirect_uri', REDIRECT], ['code_verifier', verifier]] as const;
      const exchanged = await token(t.app, pairs, { auth: basic('webapp', SECRET), dpop: await proof(key, { htu: TOKEN }) });
      assert.equal(exchanged.json().token_type, 'DPoP');
      const refreshed = await token(t.app, [['grant_type', 'refresh_token'], ['refresh_token', exchanged.json().refresh_token]], { auth: basic('webapp', SECRET) });
      assert.equal(refreshed.statusCode, 200, refreshed.body);
      assert.equal(refreshed.json().token_type, 'Bearer');
    });

    test('require_dpop: a token request without a proof is invalid_request; with one it succeeds', async () => {
      const pairs = await codeExchange(t.app, 'strict');
      const unproven = await token(t.app, pairs, { auth: null });
      assert.equal(unproven.statusCode, 400);
      assert.deepEqual(unproven.json(), { error: 'invalid_request', error_description: 'this client must send a DPoP proof (RFC 9449) with every token request' });
      const proven = await token(t.app, pairs, { auth: null, dpop: await proof(key, { htu: TOKEN }) });
      assert.equal(proven.statusCode, 200, proven.body);
      assert.equal(proven.json().token_type, 'DPoP');
    });

    test('a client registered with dpop_bound_access_tokens: true must send a proof', async () => {
      const registered = await t.app.inject({
        method: 'POST',
        url: '/register',
        headers: { 'content-type': 'application/json' },
        payload: JSON.stringify({ redirect_uris: ['http://127.0.0.1/cb'], dpop_bound_access_tokens: true }),
      });
      assert.equal(registered.statusCode, 201, registered.body);
      assert.equal(registered.json().dpop_bound_access_tokens, true);
      const clientId = registered.json().client_id as string;
      const pairs = [['grant_type', 'authorization_code'], ['code', 'no-such-code'], ['redirect_uri', 'http://127.0.0.1/cb'], ['code_verifier', 'v'.repeat(43)], ['client_id', clientId]] as const;
      const unproven = await token(t.app, pairs, { auth: null });
      assert.equal(unproven.json().error, 'invalid_request');
      // With a proof the request gets as far as the code.
      assert.equal((await token(t.app, pairs, { auth: null, dpop: await proof(key, { htu: TOKEN }) })).json().error, 'invalid_grant');
    });

    test('/userinfo: a DPoP-bound token with the DPoP scheme and a proof naming it (ath); as Bearer, or with a bad proof, refused', async () => {
      const exchanged = await token(t.app, await codeExchange(t.app), { auth: null, dpop: await proof(key, { htu: TOKEN }) });
      const accessToken = exchanged.json().access_token as string;
      const userinfo = (authorization: string, dpop?: string | string[], method = 'GET'): Promise<LightMyRequestResponse> =>
        t.app.inject({ method, url: '/userinfo', headers: { authorization, ...(dpop === undefined ? {} : { dpop }) } });
      const forUserinfo = (options: Partial<Parameters<typeof proof>[1]> = {}): Promise<string> =>
        proof(key, { htm: 'GET', htu: USERINFO, ath: athOf(accessToken), ...options });

      const ok = await userinfo(`DPoP ${accessToken}`, await forUserinfo());
      assert.equal(ok.statusCode, 200, ok.body);
      assert.equal(ok.json().sub, 'alice');

      const asBearer = await userinfo(`Bearer ${accessToken}`);
      assert.equal(asBearer.statusCode, 401);
      assert.equal(asBearer.json().error, 'invalid_token');
      assert.match(String(asBearer.headers['www-authenticate']), /^DPoP error="invalid_token"/);

      const refusals: [string | string[] | undefined, string, RegExp][] = [
        [undefined, 'invalid_dpop_proof', /needs a DPoP proof header/],
        [await forUserinfo({ ath: athOf('another token') }), 'invalid_dpop_proof', /ath is not the hash/],
        [await forUserinfo({ ath: undefined }), 'invalid_dpop_proof', /ath is not the hash/],
        [await forUserinfo({ htu: TOKEN }), 'invalid_dpop_proof', /htu must be "http:\/\/127\.0\.0\.1:8080\/userinfo"/],
        [await forUserinfo({ htm: 'POST' }), 'invalid_dpop_proof', /htm must be "GET"/],
        [[await forUserinfo(), await forUserinfo()], 'invalid_dpop_proof', /more than one DPoP header/],
        [await proof(await newKey(), { htm: 'GET', htu: USERINFO, ath: athOf(accessToken) }), 'invalid_token', /bound to another key/],
      ];
      for (const [dpop, error, description] of refusals) {
        const response = await userinfo(`DPoP ${accessToken}`, dpop);
        assert.equal(response.statusCode, 401, response.body);
        assert.equal(response.json().error, error);
        assert.match(response.json().error_description, description);
        assert.match(String(response.headers['www-authenticate']), new RegExp(`^DPoP error="${error}"`));
      }
      const used = await forUserinfo();
      assert.equal((await userinfo(`DPoP ${accessToken}`, used)).statusCode, 200);
      const replayed = await userinfo(`DPoP ${accessToken}`, used);
      assert.equal(replayed.statusCode, 401);
      assert.equal(replayed.json().error, 'invalid_dpop_proof');
      // POST /userinfo wants a proof for POST.
      assert.equal((await userinfo(`DPoP ${accessToken}`, await forUserinfo({ htm: 'POST' }), 'POST')).statusCode, 200);
      // A Bearer token under the DPoP scheme is refused too.
      const bearer = (await token(t.app, await codeExchange(t.app), { auth: null })).json().access_token as string;
      const unbound = await userinfo(`DPoP ${bearer}`, await proof(key, { htm: 'GET', htu: USERINFO, ath: athOf(bearer) }));
      assert.equal(unbound.json().error, 'invalid_token');
      assert.equal((await userinfo(`Bearer ${bearer}`)).statusCode, 200);
    });
  });
}

/** Two Pinpoint instances on one store: a proof used at one is refused at the other (DESIGN.md §13 "across instances"). */
const SHARED = [
  {
    name: 'one SQLite file',
    open: async (): Promise<{ stores: [Store, Store]; cleanup: () => Promise<void> }> => {
      const folder = await mkdtemp(join(tmpdir(), 'pinpoint-dpop-'));
      const path = join(folder, 'pinpoint.db');
      const first = await openStore({ kind: 'sqlite', path });
      const second = await openStore({ kind: 'sqlite', path });
      return { stores: [first, second], cleanup: () => rm(folder, { recursive: true, force: true }) };
    },
  },
  {
    name: 'one PostgreSQL database',
    ...(POSTGRES_URL === undefined && { skip: POSTGRES_SKIP_REASON }),
    open: async (): Promise<{ stores: [Store, Store]; cleanup: () => Promise<void> }> => {
      const database = await createPostgresDatabase();
      const first = await openStore({ kind: 'postgres', url: database.url, schema: 'public' });
      const second = await openStore({ kind: 'postgres', url: database.url, schema: 'public' });
      return { stores: [first, second], cleanup: database.drop };
    },
  },
] as const;

for (const shared of SHARED) {
  describe(`DPoP proofs across two instances on ${shared.name}`, { skip: 'skip' in shared ? shared.skip : undefined }, () => {
    let apps: [TestApp, TestApp];
    let cleanup: () => Promise<void>;
    before(async () => {
      const opened = await shared.open();
      cleanup = opened.cleanup;
      const [first, second] = opened.stores;
      const cfg = await config();
      apps = [await testApp({ store: first, config: cfg }), await testApp({ store: second, config: cfg })];
    });
    after(async () => {
      for (const each of apps) {
        await each.app.close();
        await each.store.close();
      }
      await cleanup();
    });

    test('a proof used at one instance is refused at the other; a refresh token bound at one needs the key at the other', async () => {
      const key = await newKey('ES256');
      const [a, b] = apps;
      const once = await proof(key, { htu: TOKEN });
      assert.equal((await token(a.app, clientCredentials, { dpop: once })).statusCode, 200);
      assertProofRefused(await token(b.app, clientCredentials, { dpop: once }), /already used/);

      const exchanged = await token(a.app, await codeExchange(a.app), { auth: null, dpop: await proof(key, { htu: TOKEN }) });
      const refreshToken = exchanged.json().refresh_token as string;
      assert.equal((await token(b.app, refreshPairs(refreshToken), { auth: null })).json().error, 'invalid_grant');
      assert.equal((await token(b.app, refreshPairs(refreshToken), { auth: null, dpop: await proof(key, { htu: TOKEN }) })).statusCode, 200);
    });
  });
}

describe('DPoP in the logs', () => {
  test('no proof, key or access token appears in any log line at level trace', async () => {
    const lines: string[] = [];
    const t = await testApp({ config: await config(), logger: createLogger('trace', { write: (line: string) => void lines.push(line) }) });
    try {
      const key = await newKey('ES256');
      const sent = await proof(key, { htu: TOKEN });
      const response = await token(t.app, clientCredentials, { dpop: sent });
      assert.equal(response.statusCode, 200);
      const refused = await proof(key, { htu: TOKEN, htm: 'GET' });
      assert.equal((await token(t.app, clientCredentials, { dpop: refused })).statusCode, 400);
      assert.ok(lines.length > 0);
      for (const secret of [sent, refused, response.json().access_token as string, key.publicJwk.x as string, key.jkt]) {
        assert.ok(!lines.some((line) => line.includes(secret)), 'a proof, key or token reached the log');
      }
    } finally {
      await t.app.close();
    }
  });
});

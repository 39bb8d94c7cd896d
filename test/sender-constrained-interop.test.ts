/**
 * DESIGN.md §13 against real client and resource-server libraries on a listening Pinpoint: openid-client v6 in its
 * defaults (DPoP() with a code flow, a refresh and /userinfo; buildAuthorizationUrlWithPAR; PrivateKeyJwt()), and a
 * resource server that checks a DPoP-bound token with jose (signature, cnf.jkt against the proof's key, ath).
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { calculateJwkThumbprint, createRemoteJWKSet, decodeJwt, EmbeddedJWK, jwtVerify, type JWK } from 'jose';
import * as client from 'openid-client';
import type { Config } from '../src/config/types.js';
import { AUDIENCE, client as clientRecord, PASSWORD, REDIRECT, testApp, testConfig, type TestApp } from './helpers/app.js';
import { newKey, type ClientKey } from './helpers/proofs.js';

const API = AUDIENCE[0] as string;

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      if (address === null || typeof address === 'string') return reject(new Error('no port'));
      server.close(() => resolve(address.port));
    });
  });
}

/** A browser: follows /authorize through the sign-in form back to the client's redirect URI. */
async function signIn(authorizationUrl: URL): Promise<URL> {
  const cookies = new Map<string, string>();
  const go = async (url: URL, init: RequestInit = {}): Promise<Response> => {
    const headers = new Headers(init.headers);
    if (cookies.size > 0) headers.set('cookie', [...cookies].map(([name, value]) => `${name}=${value}`).join('; '));
    const response = await fetch(url, { ...init, headers, redirect: 'manual' });
    for (const line of response.headers.getSetCookie()) {
      const [pair] = line.split(';');
      const eq = (pair as string).indexOf('=');
      cookies.set((pair as string).slice(0, eq), (pair as string).slice(eq + 1));
    }
    return response;
  };
  const start = await go(authorizationUrl);
  assert.equal(start.status, 303, await start.text());
  const loginUrl = new URL(start.headers.get('location') as string, authorizationUrl);
  const html = await (await go(loginUrl)).text();
  const hidden = (name: string): string => new RegExp(`name="${name}" value="([^"]*)"`).exec(html)?.[1] ?? assert.fail(`no ${name}`);
  const submitted = await go(new URL('/login', loginUrl), {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ csrf: hidden('csrf'), login: hidden('login'), username: 'alice', password: PASSWORD }),
  });
  const resumed = await go(new URL(submitted.headers.get('location') as string, loginUrl));
  assert.equal(resumed.status, 303, await resumed.text());
  return new URL(resumed.headers.get('location') as string);
}

describe('openid-client v6 and a jose resource server against a listening Pinpoint (DESIGN.md §13)', () => {
  let t: TestApp;
  let issuer: string;
  let signerKey: ClientKey;
  let edwardsKey: ClientKey;
  let resourceServer: Server;
  let resourceUrl: URL;
  const insecure = { execute: [client.allowInsecureRequests] };

  before(async () => {
    signerKey = await newKey('ES256');
    edwardsKey = await newKey('EdDSA');
    const port = await freePort();
    issuer = `http://127.0.0.1:${port}`;
    const base = await testConfig({ baseUrl: issuer, listen: { host: '127.0.0.1', port } });
    const signer = clientRecord({
      clientId: 'signer',
      kind: 'confidential',
      assertionKeys: { jwks: { keys: [signerKey.publicJwk] } },
      refreshLifetimeMs: 3600_000,
      scopes: ['openid', 'profile', 'read'],
    });
    const edwards = clientRecord({ clientId: 'edwards', kind: 'confidential', assertionKeys: { jwks: { keys: [edwardsKey.publicJwk] } }, scopes: ['read'] });
    const config: Config = { ...base, clients: new Map([...base.clients, ['signer', signer], ['edwards', edwards]]) };
    t = await testApp({ config });
    await t.app.listen({ port, host: '127.0.0.1' });

    // The resource server: jose verifies the token by the issuer's JWKS, then the DPoP proof against it (RFC 9449 §7).
    const jwks = createRemoteJWKSet(new URL(`${issuer}/jwks`));
    resourceServer = createHttpServer((request, response) => {
      void (async () => {
        const [scheme, accessToken] = (request.headers.authorization ?? '').split(' ');
        const proof = request.headers.dpop;
        if (scheme !== 'DPoP' || accessToken === undefined || typeof proof !== 'string') throw new Error('not a DPoP request');
        const { payload: claims } = await jwtVerify(accessToken, jwks, { issuer, audience: API, typ: 'at+jwt' });
        const { payload: proven, protectedHeader } = await jwtVerify(proof, EmbeddedJWK, { typ: 'dpop+jwt', maxTokenAge: '60s' });
        const jkt = await calculateJwkThumbprint(protectedHeader.jwk as JWK, 'sha256');
        if ((claims.cnf as { jkt?: string } | undefined)?.jkt !== jkt) throw new Error('cnf.jkt is not the proof key');
        if (proven.ath !== createHash('sha256').update(accessToken).digest('base64url')) throw new Error('ath');
        if (proven.htm !== request.method || proven.htu !== `${resourceUrl.origin}${resourceUrl.pathname}`) throw new Error('htm/htu');
        response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ sub: claims.sub }));
      })().catch((error: Error) => response.writeHead(401, { 'content-type': 'text/plain' }).end(error.message));
    });
    await new Promise<void>((resolve) => resourceServer.listen(0, '127.0.0.1', resolve));
    resourceUrl = new URL(`http://127.0.0.1:${(resourceServer.address() as { port: number }).port}/orders`);
  });
  after(async () => {
    await new Promise((resolve) => resourceServer.close(resolve));
    await t.app.close();
  });

  test('DPoP(): code flow, refresh and /userinfo of a public client; the tokens are bound; a jose resource server accepts them', async () => {
    const config = await client.discovery(new URL(issuer), 'spa', undefined, client.None(), insecure);
    assert.deepEqual(config.serverMetadata().dpop_signing_alg_values_supported, ['ES256', 'EdDSA', 'RS256', 'PS256']);
    const keyPair = await client.randomDPoPKeyPair('ES256');
    const DPoP = client.getDPoPHandle(config, keyPair);
    const jkt = await calculateJwkThumbprint(await crypto.subtle.exportKey('jwk', keyPair.publicKey) as JWK, 'sha256');

    const pkceCodeVerifier = client.randomPKCECodeVerifier();
    const expectedState = client.randomState();
    const parameters = new URLSearchParams({
      redirect_uri: REDIRECT,
      scope: 'openid profile',
      code_challenge: await client.calculatePKCECodeChallenge(pkceCodeVerifier),
      code_challenge_method: 'S256',
      state: expectedState,
    });
    const callback = await signIn(client.buildAuthorizationUrl(config, parameters));
    const tokens = await client.authorizationCodeGrant(config, callback, { pkceCodeVerifier, expectedState }, { resource: API }, { DPoP });
    assert.equal(tokens.token_type, 'dpop');
    assert.deepEqual(decodeJwt(tokens.access_token).cnf, { jkt });

    // The resource server, called the way openid-client calls protected resources with DPoP.
    const answer = await client.fetchProtectedResource(config, tokens.access_token, resourceUrl, 'GET', undefined, undefined, { DPoP });
    assert.equal(answer.status, 200, await answer.clone().text());
    assert.deepEqual(await answer.json(), { sub: 'alice' });

    assert.ok(tokens.refresh_token);
    // Without the key, the bound refresh token is refused; with it, refreshed (a fresh proof each time).
    await assert.rejects(client.refreshTokenGrant(config, tokens.refresh_token), (error: { error?: string }) => error.error === 'invalid_grant');
    // Without a resource the refreshed token is for the whole audience, so /userinfo takes it (with DPoP only).
    const whole = await client.refreshTokenGrant(config, tokens.refresh_token, undefined, { DPoP });
    assert.equal(whole.token_type, 'dpop');
    const claims = await client.fetchUserInfo(config, whole.access_token, 'alice', { DPoP });
    assert.equal(claims.sub, 'alice');
    await assert.rejects(client.fetchUserInfo(config, whole.access_token, 'alice'));
  });

  test('buildAuthorizationUrlWithPAR: a public client pushes, signs in through the request_uri, exchanges the code', async () => {
    const config = await client.discovery(new URL(issuer), 'spa', undefined, client.None(), insecure);
    assert.equal(config.serverMetadata().pushed_authorization_request_endpoint, `${issuer}/par`);
    const pkceCodeVerifier = client.randomPKCECodeVerifier();
    const expectedState = client.randomState();
    const url = await client.buildAuthorizationUrlWithPAR(config, {
      redirect_uri: REDIRECT,
      scope: 'openid',
      code_challenge: await client.calculatePKCECodeChallenge(pkceCodeVerifier),
      code_challenge_method: 'S256',
      state: expectedState,
    });
    assert.match(url.searchParams.get('request_uri') ?? '', /^urn:ietf:params:oauth:request_uri:/);
    const tokens = await client.authorizationCodeGrant(config, await signIn(url), { pkceCodeVerifier, expectedState });
    assert.equal(tokens.token_type, 'bearer');
  });

  test('buildAuthorizationUrlWithPAR with DPoP(): the proof at /par binds the code (RFC 9449 §10.1); only that key exchanges it', async () => {
    const config = await client.discovery(new URL(issuer), 'spa', undefined, client.None(), insecure);
    const keyPair = await client.randomDPoPKeyPair('ES256');
    const DPoP = client.getDPoPHandle(config, keyPair);
    const jkt = await calculateJwkThumbprint(await crypto.subtle.exportKey('jwk', keyPair.publicKey) as JWK, 'sha256');
    const authorize = async (): Promise<{ callback: URL; pkceCodeVerifier: string; expectedState: string }> => {
      const pkceCodeVerifier = client.randomPKCECodeVerifier();
      const expectedState = client.randomState();
      const url = await client.buildAuthorizationUrlWithPAR(
        config,
        { redirect_uri: REDIRECT, scope: 'openid', code_challenge: await client.calculatePKCECodeChallenge(pkceCodeVerifier), code_challenge_method: 'S256', state: expectedState },
        { DPoP },
      );
      return { callback: await signIn(url), pkceCodeVerifier, expectedState };
    };
    const bound = await authorize();
    const otherKey = client.getDPoPHandle(config, await client.randomDPoPKeyPair('ES256'));
    await assert.rejects(
      client.authorizationCodeGrant(config, bound.callback, { pkceCodeVerifier: bound.pkceCodeVerifier, expectedState: bound.expectedState }, undefined, { DPoP: otherKey }),
      (error: { error?: string }) => error.error === 'invalid_grant',
    );
    const tokens = await client.authorizationCodeGrant(config, bound.callback, { pkceCodeVerifier: bound.pkceCodeVerifier, expectedState: bound.expectedState }, undefined, { DPoP });
    assert.equal(tokens.token_type, 'dpop');
    assert.deepEqual(decodeJwt(tokens.access_token).cnf, { jkt });
  });

  test('PrivateKeyJwt(): PAR, the code exchange, a refresh and client_credentials of a client with keys', async () => {
    const config = await client.discovery(new URL(issuer), 'signer', undefined, client.PrivateKeyJwt(signerKey.privateKey), insecure);
    assert.ok(config.serverMetadata().token_endpoint_auth_methods_supported?.includes('private_key_jwt'));
    const pkceCodeVerifier = client.randomPKCECodeVerifier();
    const expectedState = client.randomState();
    const url = await client.buildAuthorizationUrlWithPAR(config, {
      redirect_uri: REDIRECT,
      scope: 'openid profile',
      code_challenge: await client.calculatePKCECodeChallenge(pkceCodeVerifier),
      code_challenge_method: 'S256',
      state: expectedState,
    });
    const tokens = await client.authorizationCodeGrant(config, await signIn(url), { pkceCodeVerifier, expectedState });
    assert.equal(tokens.claims()?.aud, 'signer');
    const refreshed = await client.refreshTokenGrant(config, tokens.refresh_token as string);
    assert.ok(refreshed.access_token);
    const machine = await client.clientCredentialsGrant(config, { scope: 'read' });
    assert.equal(machine.scope, 'read');

    const stranger = await newKey('ES256');
    const impostor = await client.discovery(new URL(issuer), 'signer', undefined, client.PrivateKeyJwt(stranger.privateKey), insecure);
    await assert.rejects(client.clientCredentialsGrant(impostor, { scope: 'read' }), (error: { status?: number }) => error.status === 401);
  });

  test('Ed25519 keys, which openid-client labels "Ed25519" (RFC 9864), not "EdDSA": PrivateKeyJwt() authenticates, and a DPoP() proof binds the token', async () => {
    const config = await client.discovery(new URL(issuer), 'edwards', undefined, client.PrivateKeyJwt(edwardsKey.privateKey), insecure);
    const dpop = client.getDPoPHandle(config, await client.randomDPoPKeyPair('EdDSA'));
    const tokens = await client.clientCredentialsGrant(config, { scope: 'read' }, { DPoP: dpop });
    assert.equal(tokens.token_type, 'dpop');
    assert.equal(typeof (decodeJwt(tokens.access_token).cnf as { jkt?: unknown } | undefined)?.jkt, 'string');
  });
});

/** End to end with a real relying party library (openid-client v6) against a listening Pinpoint. */
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { createRemoteJWKSet, decodeJwt, jwtVerify } from 'jose';
import * as client from 'openid-client';
import { AUDIENCE, PASSWORD, REDIRECT, SECRET, testApp, testConfig, type TestApp } from './helpers/app.js';

const API = AUDIENCE[0] as string;
const FILES = AUDIENCE[1] as string;

/** A port that was free a moment ago (bind on 0, read it, close). */
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

/** A minimal browser cookie jar over fetch's Set-Cookie headers. */
class Browser {
  readonly #cookies = new Map<string, string>();

  async fetch(url: URL, init: RequestInit = {}): Promise<Response> {
    const headers = new Headers(init.headers);
    if (this.#cookies.size > 0) headers.set('cookie', [...this.#cookies].map(([name, value]) => `${name}=${value}`).join('; '));
    const response = await fetch(url, { ...init, headers, redirect: 'manual' });
    for (const line of response.headers.getSetCookie()) {
      const [pair] = line.split(';');
      const eq = (pair as string).indexOf('=');
      this.#cookies.set((pair as string).slice(0, eq), (pair as string).slice(eq + 1));
    }
    return response;
  }
}

function hiddenInput(html: string, name: string): string {
  const match = new RegExp(`name="${name}" value="([^"]*)"`).exec(html);
  assert.ok(match, `hidden input ${name}`);
  return match[1] as string;
}

describe('openid-client v6 against a listening Pinpoint', () => {
  let t: TestApp;
  let issuer: string;
  before(async () => {
    const port = await freePort();
    issuer = `http://127.0.0.1:${port}`;
    t = await testApp({ config: await testConfig({ baseUrl: issuer, listen: { host: '127.0.0.1', port } }) });
    await t.app.listen({ port, host: '127.0.0.1' });
  });
  after(async () => t.app.close());

  test('discovery, two resources at /authorize, sign-in, code exchange for one, refresh for the other', async () => {
    const config = await client.discovery(new URL(issuer), 'webapp', SECRET, client.ClientSecretBasic(SECRET), {
      execute: [client.allowInsecureRequests],
    });
    // Verify ID token signatures against jwks_uri too, not only the claims.
    client.enableNonRepudiationChecks(config);
    assert.equal(config.serverMetadata().issuer, issuer);
    assert.equal(config.serverMetadata().authorization_response_iss_parameter_supported, true);

    const pkceCodeVerifier = client.randomPKCECodeVerifier();
    const expectedState = client.randomState();
    const expectedNonce = client.randomNonce();
    const parameters = new URLSearchParams({
      redirect_uri: REDIRECT,
      scope: 'openid profile email',
      code_challenge: await client.calculatePKCECodeChallenge(pkceCodeVerifier),
      code_challenge_method: 'S256',
      state: expectedState,
      nonce: expectedNonce,
    });
    parameters.append('resource', API);
    parameters.append('resource', FILES);
    const authorizationUrl = client.buildAuthorizationUrl(config, parameters);
    assert.equal(authorizationUrl.searchParams.getAll('resource').length, 2);

    // The browser: /authorize -> sign-in page -> POST the form -> back to the client.
    const browser = new Browser();
    const start = await browser.fetch(authorizationUrl);
    assert.equal(start.status, 303, await start.text());
    const loginUrl = new URL(start.headers.get('location') as string, authorizationUrl);
    assert.equal(loginUrl.origin, issuer);
    const page = await browser.fetch(loginUrl);
    assert.equal(page.status, 200);
    const html = await page.text();
    const action = new URL(/<form method="post" action="([^"]+)"/.exec(html)?.[1] ?? '/login', loginUrl);
    const submitted = await browser.fetch(action, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({
        csrf: hiddenInput(html, 'csrf'),
        login: hiddenInput(html, 'login'),
        username: 'alice',
        password: PASSWORD,
      }),
    });
    assert.ok(submitted.status === 302 || submitted.status === 303, `sign-in answered ${submitted.status}`);
    // Sign-in sends the browser back to /authorize/resume, which sends it on to the client.
    const resumed = await browser.fetch(new URL(submitted.headers.get('location') as string, action));
    assert.equal(resumed.status, 303, await resumed.text());
    const callback = new URL(resumed.headers.get('location') as string);
    assert.equal(`${callback.origin}${callback.pathname}`, REDIRECT);

    // openid-client checks state, iss (RFC 9207), PKCE, and the ID token (signature, iss, aud, nonce, exp).
    const tokens = await client.authorizationCodeGrant(
      config,
      callback,
      { pkceCodeVerifier, expectedState, expectedNonce, idTokenExpected: true },
      { resource: API },
    );
    assert.equal(tokens.token_type.toLowerCase(), 'bearer');
    const idClaims = tokens.claims();
    assert.ok(idClaims);
    assert.equal(idClaims.sub, 'alice');
    assert.equal(idClaims.aud, 'webapp');
    assert.equal(idClaims.nonce, expectedNonce);
    assert.equal(idClaims.iss, issuer);
    assert.equal(decodeJwt(tokens.access_token).aud, API);

    // A resource server fetching the JWKS over HTTP accepts the token for itself, and another refuses it.
    const jwks = createRemoteJWKSet(new URL(`${issuer}/jwks`));
    await jwtVerify(tokens.access_token, jwks, { issuer, audience: API, typ: 'at+jwt' });
    await assert.rejects(jwtVerify(tokens.access_token, jwks, { issuer, audience: FILES, typ: 'at+jwt' }));

    assert.ok(tokens.refresh_token);
    const refreshed = await client.refreshTokenGrant(config, tokens.refresh_token, { resource: FILES });
    assert.equal(decodeJwt(refreshed.access_token).aud, FILES);
    await jwtVerify(refreshed.access_token, jwks, { issuer, audience: FILES, typ: 'at+jwt' });
    assert.ok(refreshed.refresh_token);
    assert.notEqual(refreshed.refresh_token, tokens.refresh_token);

    // A resource outside the authorization: openid-client surfaces the server's error as sent.
    await assert.rejects(client.refreshTokenGrant(config, refreshed.refresh_token, { resource: 'https://q.example.org/x?y=1' }), (error: unknown) => {
      const { error: code, error_description: description } = error as { error?: string; error_description?: string };
      assert.equal(code, 'invalid_target');
      assert.equal(description, 'resource "https://q.example.org/x?y=1" was not part of the authorization');
      return true;
    });
    // ... and the refused refresh left the token usable; with no resource, aud is the authorization's two.
    const again = await client.refreshTokenGrant(config, refreshed.refresh_token);
    assert.deepEqual(decodeJwt(again.access_token).aud, [API, FILES]);
  });

  test("openid-client's default client authentication (client_secret_post) works at /token", async () => {
    // No ClientAuth argument: openid-client v6 then sends client_id and client_secret in the body.
    const config = await client.discovery(new URL(issuer), 'service', SECRET, undefined, { execute: [client.allowInsecureRequests] });
    assert.ok((config.serverMetadata().token_endpoint_auth_methods_supported ?? []).includes('client_secret_post'));
    const tokens = await client.clientCredentialsGrant(config, { scope: 'read' });
    assert.equal(tokens.scope, 'read');
    assert.deepEqual(decodeJwt(tokens.access_token).aud, AUDIENCE);
    const wrong = await client.discovery(new URL(issuer), 'service', 'not-the-secret', undefined, { execute: [client.allowInsecureRequests] });
    // 401 with a Basic challenge (RFC 6749 §5.2), which openid-client reports as a WWW-Authenticate challenge error.
    await assert.rejects(client.clientCredentialsGrant(wrong, { scope: 'read' }), (error: unknown) => (error as { status?: number }).status === 401);
  });
});

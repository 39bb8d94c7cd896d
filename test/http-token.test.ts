/** POST /token through HTTP: the /token rows of DESIGN.md §5, its error table, and the §4 token contract. */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { createLocalJWKSet, decodeProtectedHeader, jwtVerify, type JSONWebKeySet } from 'jose';
import type { ClientRecord } from '../src/config/types.js';
import {
  AUDIENCE,
  ISSUER,
  REDIRECT,
  SECRET,
  basic,
  claimsOf,
  exchangeCode,
  form,
  postToken,
  refresh,
  signInForCode,
  testApp,
  testConfig,
  type TestApp,
} from './helpers/app.js';

const API = AUDIENCE[0] as string;
const FILES = AUDIENCE[1] as string;
const LOGICAL = AUDIENCE[2] as string;
const FRAGMENT = AUDIENCE[3] as string;
const QUERY = AUDIENCE[4] as string;

const notRequestable = (resource: string): string => `resource "${resource}" is not one this client may ask a token for`;
const notInAuthorization = (resource: string): string => `resource "${resource}" was not part of the authorization`;
const REFUSED_BY_GRANT = 'resource indicators are taken with the authorization_code and refresh_token grants';
const REPEATED = 'resource appears more than once';
const providerOnly = (resource: string, scope: string): string =>
  `resource "${resource}" cannot be named with scope "${scope}": its tokens are for the provider alone`;

function assertOAuthError(response: LightMyRequestResponse, status: number, error: string, description?: string): void {
  assert.equal(response.statusCode, status, response.body);
  assert.match(String(response.headers['content-type']), /^application\/json/);
  const body = response.json() as { error: string; error_description: string };
  assert.equal(body.error, error, response.body);
  if (description !== undefined) assert.equal(body.error_description, description);
  assert.equal(typeof body.error_description, 'string');
  assert.equal(response.headers['cache-control'], 'no-store');
}

function assertOk(response: LightMyRequestResponse): { access_token: string; refresh_token?: string; id_token?: string; scope: string; token_type: string; expires_in: number } {
  assert.equal(response.statusCode, 200, response.body);
  return response.json();
}

/** POST /token with exactly the Authorization header given (none when undefined): the helper's default would add webapp's. */
function postForm(app: FastifyInstance, pairs: readonly (readonly [string, string])[], auth?: string): Promise<LightMyRequestResponse> {
  return app.inject({
    method: 'POST',
    url: '/token',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...(auth === undefined ? {} : { authorization: auth }) },
    payload: form(pairs),
  });
}

async function jwksOf(app: FastifyInstance): Promise<ReturnType<typeof createLocalJWKSet>> {
  return createLocalJWKSet((await app.inject({ url: '/jwks' })).json() as JSONWebKeySet);
}

describe('/token authorization_code: resource rules and aud (DESIGN.md §5)', () => {
  let t: TestApp;
  before(async () => {
    t = await testApp();
  });
  after(async () => t.app.close());

  test('a second resource, even equal, gives invalid_request; the code stays usable', async () => {
    const grant = await signInForCode(t.app, { resources: [API, FILES] });
    assertOAuthError(await exchangeCode(t.app, grant, [API, API]), 400, 'invalid_request', REPEATED);
    assertOAuthError(await exchangeCode(t.app, grant, [API, FILES]), 400, 'invalid_request', REPEATED);
    const exchanged = assertOk(await exchangeCode(t.app, grant, [API]));
    assert.equal(claimsOf(exchanged.access_token).aud, API);
  });

  test('repeats are judged before the value: two refused values still give invalid_request', async () => {
    const grant = await signInForCode(t.app, { resources: [API] });
    assertOAuthError(await exchangeCode(t.app, grant, [LOGICAL, LOGICAL]), 400, 'invalid_request', REPEATED);
  });

  test('a resource outside the authorization gives the second text; the code stays usable', async () => {
    const grant = await signInForCode(t.app, { resources: [API] });
    assertOAuthError(await exchangeCode(t.app, grant, [FILES]), 400, 'invalid_target', notInAuthorization(FILES));
    assertOAuthError(await exchangeCode(t.app, grant, [QUERY]), 400, 'invalid_target', notInAuthorization(QUERY));
    assert.equal(claimsOf(assertOk(await exchangeCode(t.app, grant, [API])).access_token).aud, API);
  });

  test('a resource that cannot be named gives the first text, checked before the authorization', async () => {
    const grant = await signInForCode(t.app, { resources: [API] });
    for (const resource of [LOGICAL, FRAGMENT, 'https://other.example.org/', 'https://api.example.org', '', ISSUER]) {
      assertOAuthError(await exchangeCode(t.app, grant, [resource]), 400, 'invalid_target', notRequestable(resource));
    }
    assertOk(await exchangeCode(t.app, grant));
  });

  test('no resource at /authorize: any requestable entry can be named, exactly as sent', async () => {
    for (const resource of [API, FILES, QUERY]) {
      const grant = await signInForCode(t.app);
      assert.equal(claimsOf(assertOk(await exchangeCode(t.app, grant, [resource])).access_token).aud, resource);
    }
    const grant = await signInForCode(t.app);
    assertOAuthError(await exchangeCode(t.app, grant, [LOGICAL]), 400, 'invalid_target', notRequestable(LOGICAL));
  });

  test('none named at /token: aud is the resources of the authorization, in their order', async () => {
    const grant = await signInForCode(t.app, { resources: [QUERY, FILES, API] });
    assert.deepEqual(claimsOf(assertOk(await exchangeCode(t.app, grant)).access_token).aud, [QUERY, FILES, API]);
  });

  test('nothing named anywhere: aud is the whole audience in config order', async () => {
    const grant = await signInForCode(t.app);
    assert.deepEqual(claimsOf(assertOk(await exchangeCode(t.app, grant)).access_token).aud, AUDIENCE);
  });

  test('one value: aud is a string', async () => {
    const grant = await signInForCode(t.app, { resources: [FILES] });
    const aud = claimsOf(assertOk(await exchangeCode(t.app, grant)).access_token).aud;
    assert.equal(typeof aud, 'string');
    assert.equal(aud, FILES);
  });

  test('a client whose audience has one entry gets a string aud without naming it', async () => {
    const config = await import('./helpers/app.js').then((m) => m.testConfig());
    const webapp = config.clients.get('webapp');
    assert.ok(webapp);
    const clients = new Map(config.clients);
    clients.set('webapp', { ...webapp, audience: [API] });
    const single = await testApp({ config: { ...config, clients } });
    try {
      const grant = await signInForCode(single.app);
      assert.equal(claimsOf(assertOk(await exchangeCode(single.app, grant)).access_token).aud, API);
    } finally {
      await single.app.close();
    }
  });
});

describe('/token authorization_code: the code', () => {
  let t: TestApp;
  before(async () => {
    t = await testApp();
  });
  after(async () => t.app.close());

  test('single use: a replay is invalid_grant and the refresh token issued from the code stops working', async () => {
    const grant = await signInForCode(t.app, { resources: [API] });
    const first = assertOk(await exchangeCode(t.app, grant));
    assert.ok(first.refresh_token);
    assertOAuthError(await exchangeCode(t.app, grant), 400, 'invalid_grant');
    assertOAuthError(await refresh(t.app, first.refresh_token), 400, 'invalid_grant');
  });

  test('wrong redirect_uri is invalid_grant', async () => {
    const grant = await signInForCode(t.app);
    const response = await postToken(t.app, [
      ['grant_type', 'authorization_code'],
      ['code', grant.code],
      ['redirect_uri', 'http://127.0.0.1:9000/other'],
      ['code_verifier', grant.verifier],
    ]);
    assertOAuthError(response, 400, 'invalid_grant');
  });

  test('missing redirect_uri is invalid_request', async () => {
    const grant = await signInForCode(t.app);
    const response = await postToken(t.app, [
      ['grant_type', 'authorization_code'],
      ['code', grant.code],
      ['code_verifier', grant.verifier],
    ]);
    assertOAuthError(response, 400, 'invalid_request');
  });

  test('wrong PKCE verifier is invalid_grant', async () => {
    const grant = await signInForCode(t.app);
    assertOAuthError(await exchangeCode(t.app, { code: grant.code, verifier: 'x'.repeat(43) }), 400, 'invalid_grant');
  });

  test('missing verifier is invalid_request', async () => {
    const grant = await signInForCode(t.app);
    const response = await postToken(t.app, [
      ['grant_type', 'authorization_code'],
      ['code', grant.code],
      ['redirect_uri', REDIRECT],
    ]);
    assertOAuthError(response, 400, 'invalid_request');
  });

  test('an unknown code is invalid_grant', async () => {
    assertOAuthError(await exchangeCode(t.app, { code: 'not-a-code', verifier: 'v'.repeat(43) }), 400, 'invalid_grant');
  });

  test('a code issued to another client is invalid_grant for this one', async () => {
    const grant = await signInForCode(t.app, { clientId: 'norefresh' });
    assertOAuthError(await exchangeCode(t.app, grant), 400, 'invalid_grant');
    assertOk(await exchangeCode(t.app, grant, [], basic('norefresh', SECRET)));
  });

  test('a code lives 60 seconds', async () => {
    let now = Date.now();
    const timed = await testApp({ now: () => now });
    try {
      const grant = await signInForCode(timed.app);
      now += 61_000;
      assertOAuthError(await exchangeCode(timed.app, grant), 400, 'invalid_grant');
    } finally {
      await timed.app.close();
    }
  });

  test('a public client exchanges with client_id in the body', async () => {
    const grant = await signInForCode(t.app, { clientId: 'spa', resources: [FILES] });
    const body = assertOk(
      await postForm(
        t.app,
        [
          ['grant_type', 'authorization_code'],
          ['client_id', 'spa'],
          ['code', grant.code],
          ['redirect_uri', REDIRECT],
          ['code_verifier', grant.verifier],
        ]),
    );
    assert.equal(claimsOf(body.access_token).client_id, 'spa');
    assert.ok(body.refresh_token);
  });

  test('a client without refresh_lifetime gets no refresh token', async () => {
    const grant = await signInForCode(t.app, { clientId: 'norefresh' });
    const body = assertOk(await exchangeCode(t.app, grant, [], basic('norefresh', SECRET)));
    assert.equal(body.refresh_token, undefined);
    assert.ok(body.id_token);
  });
});

describe('/token refresh_token', () => {
  let t: TestApp;
  before(async () => {
    t = await testApp();
  });
  after(async () => t.app.close());

  async function refreshTokenFor(resources: readonly string[] = [API, FILES], scope?: string): Promise<string> {
    const grant = await signInForCode(t.app, { resources, ...(scope === undefined ? {} : { scope }) });
    const body = assertOk(await exchangeCode(t.app, grant));
    assert.ok(body.refresh_token);
    return body.refresh_token;
  }

  test('refused refreshes leave the refresh token usable', async () => {
    const token = await refreshTokenFor([API]);
    assertOAuthError(await refresh(t.app, token, [LOGICAL]), 400, 'invalid_target', notRequestable(LOGICAL));
    assertOAuthError(await refresh(t.app, token, [FILES]), 400, 'invalid_target', notInAuthorization(FILES));
    assertOAuthError(await refresh(t.app, token, [API, API]), 400, 'invalid_request', REPEATED);
    assertOAuthError(await refresh(t.app, token, [], [['grant_type', 'refresh_token']]), 400, 'invalid_request');
    assertOAuthError(await refresh(t.app, token, [], [['refresh_token', token]]), 400, 'invalid_request');
    assertOAuthError(await refresh(t.app, token, [], [['scope', 'openid ssh']]), 400, 'invalid_scope');
    assertOAuthError(await refresh(t.app, token, [], [], basic('webapp', 'wrong')), 401, 'invalid_client');
    // RFC 6749 §5.2: a client that gets no refresh tokens is not authorized for the grant, whatever token it sends.
    assertOAuthError(await refresh(t.app, token, [], [], basic('norefresh', SECRET)), 400, 'unauthorized_client');
    // DESIGN.md §6: a refresh token presented by a client it was not issued to is invalid_grant and changes nothing.
    assertOAuthError(await refresh(t.app, token, [], [['client_id', 'spa']], null), 400, 'invalid_grant');
    const body = assertOk(await refresh(t.app, token, [API]));
    assert.equal(claimsOf(body.access_token).aud, API);
  });

  test('a successful refresh rotates; the old token then fails and revokes the grant (RFC 9700)', async () => {
    const token = await refreshTokenFor();
    const next = assertOk(await refresh(t.app, token));
    assert.ok(next.refresh_token);
    assert.notEqual(next.refresh_token, token);
    assertOAuthError(await refresh(t.app, token), 400, 'invalid_grant');
    assertOAuthError(await refresh(t.app, next.refresh_token), 400, 'invalid_grant');
  });

  test('the new token can still name any resource of the grant, again and again', async () => {
    let token = await refreshTokenFor([API, FILES]);
    for (const resource of [FILES, API, FILES, undefined]) {
      const body = assertOk(await refresh(t.app, token, resource === undefined ? [] : [resource]));
      assert.deepEqual(claimsOf(body.access_token).aud, resource ?? [API, FILES]);
      assert.ok(body.refresh_token);
      token = body.refresh_token;
    }
    assertOAuthError(await refresh(t.app, token, [QUERY]), 400, 'invalid_target', notInAuthorization(QUERY));
  });

  test('a grant that named nothing: a refresh may name any requestable entry', async () => {
    const token = await refreshTokenFor([]);
    const body = assertOk(await refresh(t.app, token, [QUERY]));
    assert.equal(claimsOf(body.access_token).aud, QUERY);
    const whole = assertOk(await refresh(t.app, body.refresh_token as string));
    assert.deepEqual(claimsOf(whole.access_token).aud, AUDIENCE);
  });

  test('a refresh after a code exchange narrowed to one resource still has the whole grant', async () => {
    const grant = await signInForCode(t.app, { resources: [API, FILES] });
    const exchanged = assertOk(await exchangeCode(t.app, grant, [API]));
    const body = assertOk(await refresh(t.app, exchanged.refresh_token as string));
    assert.deepEqual(claimsOf(body.access_token).aud, [API, FILES]);
  });

  test('scope within the grant is accepted and carried by the access token; the grant keeps its whole scope', async () => {
    const token = await refreshTokenFor([API], 'openid profile email');
    const narrowed = assertOk(await refresh(t.app, token, [], [['scope', 'email']]));
    assert.equal(narrowed.scope, 'email');
    assert.equal(claimsOf(narrowed.access_token).scope, 'email');
    const sentBack = assertOk(await refresh(t.app, narrowed.refresh_token as string, [], [['scope', 'openid profile email']]));
    assert.equal(claimsOf(sentBack.access_token).scope, 'openid profile email');
    const whole = assertOk(await refresh(t.app, sentBack.refresh_token as string));
    assert.equal(claimsOf(whole.access_token).scope, 'openid profile email');
    assert.equal(whole.scope, 'openid profile email');
  });

  test('scope beyond the grant is invalid_scope (even one the client may ask)', async () => {
    const token = await refreshTokenFor([API], 'openid email');
    assertOAuthError(await refresh(t.app, token, [], [['scope', 'openid profile']]), 400, 'invalid_scope');
    assertOAuthError(await refresh(t.app, token, [], [['scope', 'ssh']]), 400, 'invalid_scope');
    assertOk(await refresh(t.app, token, [], [['scope', 'openid email']]));
  });

  test('offline_access (DESIGN.md §9) stays in the grant: a refresh may send it back, and one without scope carries it', async () => {
    const token = await refreshTokenFor([API], 'openid profile offline_access');
    const sentBack = assertOk(await refresh(t.app, token, [], [['scope', 'openid profile offline_access']]));
    assert.equal(sentBack.scope, 'openid profile offline_access');
    assert.equal(claimsOf(sentBack.access_token).scope, 'openid profile offline_access');
    const alone = assertOk(await refresh(t.app, sentBack.refresh_token as string, [], [['scope', 'offline_access']]));
    assert.equal(alone.scope, 'offline_access');
    const whole = assertOk(await refresh(t.app, alone.refresh_token as string));
    assert.equal(whole.scope, 'openid profile offline_access');
  });

  test('a refresh does not issue an ID token', async () => {
    const token = await refreshTokenFor([API]);
    assert.equal(assertOk(await refresh(t.app, token)).id_token, undefined);
  });

  test('an unknown refresh token is invalid_grant', async () => {
    assertOAuthError(await refresh(t.app, 'not-a-refresh-token'), 400, 'invalid_grant');
    assertOAuthError(await refresh(t.app, '.x'), 400, 'invalid_grant');
    assertOAuthError(await refresh(t.app, 'a/b.secret'), 400, 'invalid_grant');
  });

  test('a refresh token names its grant; another grant id or a changed secret is invalid_grant and revokes nothing', async () => {
    const token = await refreshTokenFor([API]);
    const separator = token.indexOf('.');
    assert.ok(separator > 0, 'a refresh token is <grant id>.<secret>');
    const other = await refreshTokenFor([API]);
    const otherGrant = other.slice(0, other.indexOf('.'));
    assertOAuthError(await refresh(t.app, `${otherGrant}${token.slice(separator)}`), 400, 'invalid_grant', 'the refresh token is invalid, expired or revoked');
    assertOAuthError(await refresh(t.app, `${token.slice(0, separator)}.${'A'.repeat(43)}`), 400, 'invalid_grant');
    assertOk(await refresh(t.app, token));
    assertOk(await refresh(t.app, other));
  });

  test('a refresh token of another client is invalid_grant and does not revoke the owner grant', async () => {
    const grant = await signInForCode(t.app, { clientId: 'spa' });
    const spa = assertOk(
      await postForm(t.app,
        [
          ['grant_type', 'authorization_code'],
          ['client_id', 'spa'],
          ['code', grant.code],
          ['redirect_uri', REDIRECT],
          ['code_verifier', grant.verifier],
        ]),
    );
    assertOAuthError(await refresh(t.app, spa.refresh_token as string), 400, 'invalid_grant');
    assertOk(await postForm(t.app, [['grant_type', 'refresh_token'], ['refresh_token', spa.refresh_token as string], ['client_id', 'spa']]));
  });
});

describe('/token client_credentials', () => {
  let t: TestApp;
  before(async () => {
    t = await testApp();
  });
  after(async () => t.app.close());

  const clientCredentials = (extra: readonly (readonly [string, string])[] = [], auth: string | null = basic('service', SECRET)) =>
    postForm(t.app, [['grant_type', 'client_credentials'], ...extra], auth ?? undefined);

  test('a confidential client gets a token for its whole audience, for itself, without refresh or ID token', async () => {
    const body = assertOk(await clientCredentials());
    const claims = claimsOf(body.access_token);
    assert.deepEqual(claims.aud, AUDIENCE);
    assert.equal(claims.sub, 'service');
    assert.equal(claims.client_id, 'service');
    assert.equal(body.refresh_token, undefined);
    assert.equal(body.id_token, undefined);
    assert.equal(body.token_type, 'Bearer');
  });

  test('any resource gives invalid_target with the third text (never ignored)', async () => {
    for (const resources of [[API], [LOGICAL], [''], [API, API]]) {
      const response = await clientCredentials(resources.map((resource) => ['resource', resource] as [string, string]));
      assertOAuthError(response, 400, 'invalid_target', REFUSED_BY_GRANT);
    }
    // The grant type's refusal of resource comes before any scope check (DESIGN.md §5 order), as at /device_authorization.
    assertOAuthError(await clientCredentials([['resource', API], ['scope', 'a"b']]), 400, 'invalid_target', REFUSED_BY_GRANT);
    assertOAuthError(await clientCredentials([['resource', API], ['scope', 'ssh']]), 400, 'invalid_target', REFUSED_BY_GRANT);
  });

  test('scope is optional and checked against the client scopes', async () => {
    const body = assertOk(await clientCredentials([['scope', 'read write']]));
    assert.equal(body.scope, 'read write');
    assert.equal(claimsOf(body.access_token).scope, 'read write');
    assertOAuthError(await clientCredentials([['scope', 'read admin']]), 400, 'invalid_scope');
    assertOAuthError(await clientCredentials([['scope', 'openid']]), 400, 'invalid_scope');
  });

  test('a provider scope makes the issuer the audience', async () => {
    const body = assertOk(await clientCredentials([['scope', 'read nfs']]));
    assert.equal(claimsOf(body.access_token).aud, ISSUER);
  });

  test('a public client is refused', async () => {
    const response = await clientCredentials([['client_id', 'spa']], null);
    assert.equal(response.statusCode, 400, response.body);
    assert.equal(response.json().error, 'unauthorized_client');
  });

  test('a confidential client with a wrong secret is invalid_client', async () => {
    assertOAuthError(await clientCredentials([], basic('service', 'nope')), 401, 'invalid_client');
  });
});

describe('/token provider scopes (DESIGN.md §5)', () => {
  let t: TestApp;
  before(async () => {
    t = await testApp();
  });
  after(async () => t.app.close());

  test('ssh at /authorize: aud is the issuer', async () => {
    const grant = await signInForCode(t.app, { scope: 'openid ssh' });
    assert.equal(claimsOf(assertOk(await exchangeCode(t.app, grant)).access_token).aud, ISSUER);
  });

  test('naming anything but the issuer gives the provider text, at the exchange and at a refresh', async () => {
    const grant = await signInForCode(t.app, { scope: 'openid ssh' });
    for (const resource of [API, LOGICAL, 'https://other.example.org/']) {
      assertOAuthError(await exchangeCode(t.app, grant, [resource]), 400, 'invalid_target', providerOnly(resource, 'ssh'));
    }
    const body = assertOk(await exchangeCode(t.app, grant, [ISSUER]));
    assert.equal(claimsOf(body.access_token).aud, ISSUER);
    assertOAuthError(await refresh(t.app, body.refresh_token as string, [FILES]), 400, 'invalid_target', providerOnly(FILES, 'ssh'));
    const refreshed = assertOk(await refresh(t.app, body.refresh_token as string, [ISSUER]));
    assert.equal(claimsOf(refreshed.access_token).aud, ISSUER);
  });

  test('a refresh narrowing the scope away from ssh still follows the grant: aud stays the issuer', async () => {
    const grant = await signInForCode(t.app, { scope: 'openid ssh' });
    const body = assertOk(await exchangeCode(t.app, grant));
    const refreshed = assertOk(await refresh(t.app, body.refresh_token as string, [], [['scope', 'openid']]));
    assert.equal(claimsOf(refreshed.access_token).aud, ISSUER);
    assertOAuthError(await refresh(t.app, refreshed.refresh_token as string, [API], [['scope', 'openid']]), 400, 'invalid_target', providerOnly(API, 'ssh'));
  });

  test('the issuer named at /authorize with ssh bounds the grant to the issuer', async () => {
    const grant = await signInForCode(t.app, { scope: 'openid ssh', resources: [ISSUER] });
    assert.equal(claimsOf(assertOk(await exchangeCode(t.app, grant)).access_token).aud, ISSUER);
  });

  test('the repeat check comes before the provider check', async () => {
    const grant = await signInForCode(t.app, { scope: 'openid ssh' });
    assertOAuthError(await exchangeCode(t.app, grant, [ISSUER, ISSUER]), 400, 'invalid_request', REPEATED);
  });
});

describe('/token client authentication and request shape', () => {
  let t: TestApp;
  before(async () => {
    t = await testApp();
  });
  after(async () => t.app.close());

  function assertInvalidClient(response: LightMyRequestResponse): void {
    assertOAuthError(response, 401, 'invalid_client');
    assert.equal(response.headers['www-authenticate'], 'Basic realm="pinpoint"');
  }

  test('wrong secret', async () => {
    const grant = await signInForCode(t.app);
    assertInvalidClient(await exchangeCode(t.app, grant, [], basic('webapp', 'wrong-secret')));
    assertOk(await exchangeCode(t.app, grant));
  });

  test('a confidential client without Basic (client_id in the body)', async () => {
    const grant = await signInForCode(t.app);
    const response = await postForm(t.app,
      [
        ['grant_type', 'authorization_code'],
        ['client_id', 'webapp'],
        ['code', grant.code],
        ['redirect_uri', REDIRECT],
        ['code_verifier', grant.verifier],
      ]);
    assertInvalidClient(response);
  });

  test('client_secret_post authenticates (RFC 6749 §2.3.1); a wrong body secret is invalid_client; both methods at once is invalid_request', async () => {
    const accepted = await postForm(t.app, [['grant_type', 'client_credentials'], ['client_id', 'service'], ['client_secret', SECRET]]);
    assert.equal(accepted.statusCode, 200, accepted.body);
    assertInvalidClient(await postForm(t.app, [['grant_type', 'client_credentials'], ['client_id', 'service'], ['client_secret', 'wrong']]));
    assertInvalidClient(await postForm(t.app, [['grant_type', 'client_credentials'], ['client_id', 'nobody'], ['client_secret', SECRET]]));
    // A public client has no secret, so a body secret cannot match.
    assertInvalidClient(await postForm(t.app, [['grant_type', 'client_credentials'], ['client_id', 'spa'], ['client_secret', '']]));
    assertOAuthError(
      await postForm(t.app, [['grant_type', 'client_credentials'], ['client_id', 'service'], ['client_secret', SECRET]], basic('service', SECRET)),
      400,
      'invalid_request',
    );
  });

  test('Basic credentials are form-decoded (RFC 6749 §2.3.1): "+" is a space, %XX a byte; sent raw, a secret that is no valid form text does not match', async () => {
    const secret = 'a b+c%d:é';
    const config = await testConfig();
    const odd = { ...(config.clients.get('service') as ClientRecord), clientId: 'odd client', secret };
    const app = (await testApp({ config: { ...config, clients: new Map([...config.clients, ['odd client', odd]]) } })).app;
    try {
      const encoded = (text: string): string => encodeURIComponent(text).replace(/%20/g, '+');
      const header = (id: string, text: string): string => `Basic ${Buffer.from(`${id}:${text}`).toString('base64')}`;
      assert.equal((await postForm(app, [['grant_type', 'client_credentials']], header(encoded('odd client'), encoded(secret)))).statusCode, 200);
      assert.equal((await postForm(app, [['grant_type', 'client_credentials']], header('odd%20client', encodeURIComponent(secret)))).statusCode, 200);
      // The secret as configured but not encoded: its "+" reads as a space and "%d:" is no escape.
      assertInvalidClient(await postForm(app, [['grant_type', 'client_credentials']], header(encoded('odd client'), secret)));
      assertInvalidClient(await postForm(app, [['grant_type', 'client_credentials']], header(encoded('odd client'), 'a b c%25d:é')));
    } finally {
      await app.close();
    }
  });

  test('a base64 secret sent in Basic without form-encoding (the MCP SDK, curl -u) still matches: its "+" is read as sent when the decoded reading fails', async () => {
    const secret = 'q3+Zk/9w+Xa4Lr0bT7cV1eQ=';
    const config = await testConfig();
    const based = { ...(config.clients.get('service') as ClientRecord), clientId: 'based', secret };
    const app = (await testApp({ config: { ...config, clients: new Map([...config.clients, ['based', based]]) } })).app;
    try {
      const header = (text: string): string => `Basic ${Buffer.from(`based:${text}`).toString('base64')}`;
      assert.equal((await postForm(app, [['grant_type', 'client_credentials']], header(secret))).statusCode, 200, 'sent raw');
      assert.equal((await postForm(app, [['grant_type', 'client_credentials']], header(encodeURIComponent(secret)))).statusCode, 200, 'form-encoded');
      // Neither reading of these is the secret.
      assertInvalidClient(await postForm(app, [['grant_type', 'client_credentials']], header(secret.replaceAll('+', ' '))));
      assertInvalidClient(await postForm(app, [['grant_type', 'client_credentials']], header(`${secret}x`)));
      // client_secret_post is form-decoded by the body parser itself: a raw "+" there is a space, as in any form.
      assertInvalidClient(await postForm(app, [['grant_type', 'client_credentials'], ['client_id', 'based'], ['client_secret', secret.replaceAll('+', ' ')]]));
    } finally {
      await app.close();
    }
  });

  test('no client at all', async () => {
    assertInvalidClient(await postForm(t.app, [['grant_type', 'client_credentials']]));
  });

  test('unknown client, by Basic and by client_id', async () => {
    assertInvalidClient(await postForm(t.app, [['grant_type', 'client_credentials']], basic('nobody', SECRET)));
    assertInvalidClient(await postForm(t.app, [['grant_type', 'refresh_token'], ['client_id', 'nobody'], ['refresh_token', 'x']]));
  });

  test('a public client presenting Basic credentials', async () => {
    assertInvalidClient(await postForm(t.app, [['grant_type', 'client_credentials']], basic('spa', '')));
  });

  test('a malformed Authorization header', async () => {
    assertInvalidClient(await postToken(t.app, [['grant_type', 'client_credentials']], 'Basic !!!'));
    assertInvalidClient(await postToken(t.app, [['grant_type', 'client_credentials']], 'Bearer abc'));
  });

  test('unsupported grant type', async () => {
    assertOAuthError(await postToken(t.app, [['grant_type', 'password'], ['username', 'alice'], ['password', 'x']]), 400, 'unsupported_grant_type');
  });

  test('missing grant_type', async () => {
    assertOAuthError(await postToken(t.app, [['code', 'x']]), 400, 'invalid_request');
  });

  test('a repeated parameter is invalid_request', async () => {
    assertOAuthError(
      await postToken(t.app, [['grant_type', 'client_credentials'], ['grant_type', 'client_credentials']], basic('service', SECRET)),
      400,
      'invalid_request',
    );
  });

  test('a body over 64 KiB gets 413 JSON invalid_request', async () => {
    const response = await t.app.inject({
      method: 'POST',
      url: '/token',
      headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic('service', SECRET) },
      payload: `grant_type=client_credentials&pad=${'a'.repeat(64 * 1024)}`,
    });
    assertOAuthError(response, 413, 'invalid_request');
  });

  test('a body of just under 64 KiB is read', async () => {
    const prefix = 'grant_type=client_credentials&pad=';
    const response = await t.app.inject({
      method: 'POST',
      url: '/token',
      headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic('service', SECRET) },
      payload: `${prefix}${'a'.repeat(64 * 1024 - prefix.length)}`,
    });
    assertOk(response);
  });

  test('a JSON body gets 415 JSON invalid_request', async () => {
    const response = await t.app.inject({
      method: 'POST',
      url: '/token',
      headers: { 'content-type': 'application/json', authorization: basic('service', SECRET) },
      payload: JSON.stringify({ grant_type: 'client_credentials' }),
    });
    assertOAuthError(response, 415, 'invalid_request');
  });

  test('no body at all gets 415', async () => {
    const response = await t.app.inject({ method: 'POST', url: '/token', headers: { authorization: basic('service', SECRET) } });
    assertOAuthError(response, 415, 'invalid_request');
  });

  test('a query string does not stand in for the body', async () => {
    const response = await t.app.inject({
      method: 'POST',
      url: '/token?grant_type=client_credentials',
      headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic('service', SECRET) },
      payload: '',
    });
    assertOAuthError(response, 400, 'invalid_request');
  });

  test('GET /token is not a token endpoint: 405 with Allow: POST', async () => {
    const response = await t.app.inject({ method: 'GET', url: '/token?grant_type=client_credentials', headers: { authorization: basic('service', SECRET) } });
    assert.equal(response.statusCode, 405);
    assert.equal(response.headers.allow, 'POST');
    assert.deepEqual(response.json(), { error: 'invalid_request', error_description: 'GET is not allowed here; use POST' });
    for (const url of ['/revoke', '/introspect', '/device_authorization']) {
      const other = await t.app.inject({ method: 'GET', url });
      assert.equal(other.statusCode, 405, url);
      assert.equal(other.headers.allow, 'POST', url);
    }
    const jwks = await t.app.inject({ method: 'DELETE', url: '/jwks' });
    assert.equal(jwks.statusCode, 405);
    assert.equal(jwks.headers.allow, 'GET, HEAD');
    assert.equal((await t.app.inject({ method: 'GET', url: '/nope' })).statusCode, 404);
  });

  test('success carries Cache-Control: no-store', async () => {
    const response = await postForm(t.app, [['grant_type', 'client_credentials']], basic('service', SECRET));
    assertOk(response);
    assert.equal(response.headers['cache-control'], 'no-store');
    assert.match(String(response.headers['content-type']), /^application\/json/);
  });
});

describe('/token: a client that chose ES256 ID tokens (DESIGN.md §3 id_token_signing_alg)', () => {
  test('its ID token is ES256 and verifies against /jwks; at_hash still matches', async () => {
    const config = await testConfig();
    const webapp = config.clients.get('webapp');
    assert.ok(webapp);
    const t = await testApp({ config: { ...config, clients: new Map([...config.clients, ['webapp', { ...webapp, idTokenSigningAlg: 'ES256' as const }]]) } });
    try {
      const body = assertOk(await exchangeCode(t.app, await signInForCode(t.app, { nonce: 'n-es' })));
      const idToken = body.id_token as string;
      assert.equal(decodeProtectedHeader(idToken).alg, 'ES256');
      assert.equal(decodeProtectedHeader(idToken).typ, 'JWT');
      const { payload } = await jwtVerify(idToken, await jwksOf(t.app), { issuer: ISSUER, audience: 'webapp', algorithms: ['ES256'] });
      assert.equal(payload.nonce, 'n-es');
      assert.equal(payload.at_hash, createHash('sha256').update(body.access_token, 'ascii').digest().subarray(0, 16).toString('base64url'));
    } finally {
      await t.app.close();
    }
  });
});

describe('/token: the tokens themselves', () => {
  let t: TestApp;
  before(async () => {
    t = await testApp();
  });
  after(async () => t.app.close());

  test('token response fields', async () => {
    const grant = await signInForCode(t.app, { resources: [API] });
    const response = await exchangeCode(t.app, grant);
    const body = assertOk(response);
    assert.equal(response.headers['cache-control'], 'no-store');
    assert.equal(body.token_type, 'Bearer');
    assert.equal(body.expires_in, 3600);
    assert.equal(body.scope, 'openid profile email');
    assert.equal(typeof body.refresh_token, 'string');
    assert.equal(typeof body.id_token, 'string');
  });

  test('the ID token: RS256, aud the client_id, nonce, auth_time, at_hash; verified against /jwks', async () => {
    const before = Math.floor(Date.now() / 1000);
    const grant = await signInForCode(t.app, { resources: [API], nonce: 'nonce-123' });
    const body = assertOk(await exchangeCode(t.app, grant));
    const idToken = body.id_token as string;
    const header = decodeProtectedHeader(idToken);
    assert.equal(header.alg, 'RS256');
    assert.equal(typeof header.kid, 'string');
    const jwks = await jwksOf(t.app);
    const { payload } = await jwtVerify(idToken, jwks, { issuer: ISSUER, audience: 'webapp', algorithms: ['RS256'] });
    assert.equal(payload.aud, 'webapp');
    assert.equal(payload.sub, 'alice');
    assert.equal(payload.nonce, 'nonce-123');
    assert.equal(payload.email, 'alice@example.org');
    assert.equal(payload.name, 'Alice Example');
    assert.equal(typeof payload.auth_time, 'number');
    assert.ok((payload.auth_time as number) >= before - 1 && (payload.auth_time as number) <= (payload.iat as number));
    const digest = createHash('sha256').update(body.access_token, 'ascii').digest();
    assert.equal(payload.at_hash, digest.subarray(0, 16).toString('base64url'));
    await assert.rejects(jwtVerify(idToken, jwks, { issuer: ISSUER, audience: API }));
  });

  test('no nonce sent: the ID token carries none; scope openid only: no email or name', async () => {
    const grant = await signInForCode(t.app, { scope: 'openid' });
    const claims = claimsOf(assertOk(await exchangeCode(t.app, grant)).id_token as string);
    assert.equal(claims.nonce, undefined);
    assert.equal(claims.email, undefined);
    assert.equal(claims.name, undefined);
  });

  test('no openid: no ID token', async () => {
    const grant = await signInForCode(t.app, { scope: 'profile email' });
    assert.equal(assertOk(await exchangeCode(t.app, grant)).id_token, undefined);
  });

  test('the access token: typ at+jwt, ES256, its claims; verifies for the named resource only', async () => {
    const grant = await signInForCode(t.app, { resources: [API, FILES] });
    const body = assertOk(await exchangeCode(t.app, grant, [FILES]));
    const header = decodeProtectedHeader(body.access_token);
    assert.equal(header.typ, 'at+jwt');
    assert.equal(header.alg, 'ES256');
    assert.equal(typeof header.kid, 'string');
    const jwks = await jwksOf(t.app);
    // As a resource server would check it (RFC 9068 §4).
    const { payload } = await jwtVerify(body.access_token, jwks, { issuer: ISSUER, audience: FILES, typ: 'at+jwt', algorithms: ['ES256'] });
    for (const claim of ['iss', 'sub', 'aud', 'exp', 'iat', 'jti', 'client_id', 'scope']) assert.ok(claim in payload, `claim ${claim}`);
    assert.equal(payload.iss, ISSUER);
    assert.equal(payload.sub, 'alice');
    assert.equal(payload.aud, FILES);
    assert.equal(payload.client_id, 'webapp');
    assert.equal(payload.scope, 'openid profile email');
    assert.equal((payload.exp as number) - (payload.iat as number), 3600);
    for (const other of [API, QUERY, LOGICAL]) {
      await assert.rejects(jwtVerify(body.access_token, jwks, { issuer: ISSUER, audience: other, typ: 'at+jwt' }), /aud/);
    }
  });

  test('two tokens get different jti', async () => {
    const a = assertOk(await postToken(t.app, [['grant_type', 'client_credentials']], basic('service', SECRET)));
    const b = assertOk(await postToken(t.app, [['grant_type', 'client_credentials']], basic('service', SECRET)));
    assert.notEqual(claimsOf(a.access_token).jti, claimsOf(b.access_token).jti);
  });
});

describe('/token refresh lifetime (DESIGN.md §6: each refresh token expires refresh_lifetime after it was issued)', () => {
  test('an active client stays signed in; an idle one does not', async () => {
    let now = Date.now();
    const t = await testApp({ now: () => now });
    try {
      const grant = await signInForCode(t.app, { clientId: 'spa' });
      const exchanged = assertOk(
        await postForm(t.app, [
          ['grant_type', 'authorization_code'],
          ['client_id', 'spa'],
          ['code', grant.code],
          ['redirect_uri', REDIRECT],
          ['code_verifier', grant.verifier],
        ]),
      );
      let token = exchanged.refresh_token as string;
      // spa's refresh_lifetime is 1h: three refreshes 50 minutes apart go past it in total.
      for (let i = 0; i < 3; i++) {
        now += 50 * 60_000;
        token = assertOk(await postForm(t.app, [['grant_type', 'refresh_token'], ['client_id', 'spa'], ['refresh_token', token]])).refresh_token as string;
      }
      now += 61 * 60_000;
      assertOAuthError(await postForm(t.app, [['grant_type', 'refresh_token'], ['client_id', 'spa'], ['refresh_token', token]]), 400, 'invalid_grant');
    } finally {
      await t.app.close();
    }
  });
});

describe('/token limits on values', () => {
  let t: TestApp;
  before(async () => {
    t = await testApp();
  });
  after(async () => t.app.close());

  test('a resource over 2,048 characters is invalid_request', async () => {
    const grant = await signInForCode(t.app);
    const long = `${API}${'a'.repeat(2049 - API.length)}`;
    assertOAuthError(await exchangeCode(t.app, grant, [long]), 400, 'invalid_request');
    assertOk(await exchangeCode(t.app, grant));
  });

  test('more than 20 resource values is invalid_request', async () => {
    const grant = await signInForCode(t.app);
    assertOAuthError(await exchangeCode(t.app, grant, Array.from({ length: 21 }, () => API)), 400, 'invalid_request');
  });
});

describe('/token rate limit', () => {
  test('too many failures from one address give 429 with Retry-After, for good requests too', async () => {
    const t = await testApp({ limits: { addressFailures: 3 } });
    try {
      for (let i = 0; i < 3; i++) assertOAuthError(await postToken(t.app, [['grant_type', 'password']]), 400, 'unsupported_grant_type');
      const limited = await postToken(t.app, [['grant_type', 'client_credentials']], basic('service', SECRET));
      assertOAuthError(limited, 429, 'invalid_request');
      const retryAfter = Number(limited.headers['retry-after']);
      assert.ok(Number.isInteger(retryAfter) && retryAfter > 0, `Retry-After: ${limited.headers['retry-after']}`);
    } finally {
      await t.app.close();
    }
  });

  test('the window ends and requests are served again', async () => {
    let now = Date.now();
    const t = await testApp({ limits: { clientFailures: 2, failureWindowMs: 10_000 }, now: () => now });
    try {
      for (let i = 0; i < 2; i++) assertOAuthError(await postToken(t.app, [['grant_type', 'client_credentials']], basic('service', 'bad')), 401, 'invalid_client');
      assertOAuthError(await postToken(t.app, [['grant_type', 'client_credentials']], basic('service', SECRET)), 429, 'invalid_request');
      now += 11_000;
      assertOk(await postToken(t.app, [['grant_type', 'client_credentials']], basic('service', SECRET)));
    } finally {
      await t.app.close();
    }
  });

  test('failures for one client from one address never lock that client out for other addresses (real sockets, 127.0.0.2 and .3)', async () => {
    const t = await testApp({ limits: { clientFailures: 5, addressFailures: 1000 } });
    try {
      await t.app.listen({ host: '127.0.0.1', port: 0 });
      const port = (t.app.server.address() as { port: number }).port;
      const from = (localAddress: string, secret: string): Promise<{ status: number; body: string; retryAfter?: string }> =>
        new Promise((resolve, reject) => {
          const body = 'grant_type=client_credentials';
          const request = httpRequest(
            {
              host: '127.0.0.1',
              port,
              localAddress,
              method: 'POST',
              path: '/token',
              headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic('service', secret), 'content-length': body.length },
            },
            (response) => {
              let text = '';
              response.on('data', (chunk) => (text += chunk));
              response.on('end', () => resolve({ status: response.statusCode ?? 0, body: text, retryAfter: response.headers['retry-after'] }));
            },
          );
          request.on('error', reject);
          request.end(body);
        });
      // The attacker's address fails many times more than the limit, some of them at once.
      await Promise.all(Array.from({ length: 30 }, () => from('127.0.0.2', 'wrong')));
      const attacker = await from('127.0.0.2', SECRET);
      assert.equal(attacker.status, 429, 'the failing address is limited for this client, the right secret included');
      assert.ok(Number(attacker.retryAfter) > 0);
      const victim = await from('127.0.0.3', SECRET);
      assert.equal(victim.status, 200, `another address is served: ${victim.body}`);
    } finally {
      await t.app.close();
    }
  });

  test('an address that fails too often is limited for every client; other addresses are not', async () => {
    const t = await testApp({ limits: { addressFailures: 3 } });
    try {
      const from = (address: string, client: string, secret: string): Promise<LightMyRequestResponse> =>
        t.app.inject({
          method: 'POST',
          url: '/token',
          remoteAddress: address,
          headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic(client, secret) },
          payload: 'grant_type=client_credentials',
        });
      for (let i = 0; i < 3; i++) assertOAuthError(await from('10.0.0.1', 'service', 'bad'), 401, 'invalid_client');
      assertOAuthError(await from('10.0.0.1', 'norefresh', SECRET), 429, 'invalid_request');
      assertOk(await from('10.0.0.2', 'service', SECRET));
    } finally {
      await t.app.close();
    }
  });
});

describe('/token: a refused request writes nothing; replay revokes only for the credential\'s own client (DESIGN.md §1, §6)', () => {
  let t: TestApp;
  before(async () => {
    t = await testApp();
  });
  after(async () => t.app.close());

  const replayCode = (grant: { code: string; verifier: string }, overrides: { verifier?: string; redirectUri?: string; clientId?: string } = {}) =>
    postToken(
      t.app,
      [
        ['grant_type', 'authorization_code'],
        ['code', grant.code],
        ['redirect_uri', overrides.redirectUri ?? REDIRECT],
        ['code_verifier', overrides.verifier ?? grant.verifier],
        ...(overrides.clientId === undefined ? [] : [['client_id', overrides.clientId] as [string, string]]),
      ],
      overrides.clientId === undefined ? basic('webapp', SECRET) : null,
    );

  test('a used code presented by another client, or with a wrong verifier or redirect_uri, revokes nothing; by its own client, it revokes', async () => {
    const grant = await signInForCode(t.app);
    const exchanged = await exchangeCode(t.app, grant);
    assert.equal(exchanged.statusCode, 200, exchanged.body);
    let refreshToken = exchanged.json().refresh_token as string;
    const stillAlive = async (): Promise<void> => {
      const next = await refresh(t.app, refreshToken);
      assert.equal(next.statusCode, 200, `the grant is still alive: ${next.body}`);
      refreshToken = next.json().refresh_token as string;
    };

    assertOAuthError(await replayCode(grant, { clientId: 'spa' }), 400, 'invalid_grant');
    await stillAlive();
    assertOAuthError(await replayCode(grant, { verifier: 'w'.repeat(43) }), 400, 'invalid_grant', 'code_verifier does not match the code_challenge');
    await stillAlive();
    assertOAuthError(await replayCode(grant, { redirectUri: 'http://127.0.0.1:9000/other' }), 400, 'invalid_grant');
    await stillAlive();
    assertOAuthError(await postToken(t.app, [['grant_type', 'authorization_code'], ['code', grant.code], ['redirect_uri', REDIRECT], ['code_verifier', grant.verifier]], basic('webapp', 'wrong')), 401, 'invalid_client');
    await stillAlive();

    assertOAuthError(await replayCode(grant), 400, 'invalid_grant');
    assertOAuthError(await refresh(t.app, refreshToken), 400, 'invalid_grant');
  });

  test('a rotated refresh token presented by another client or with a wrong secret revokes nothing; by its own client, it revokes', async () => {
    const grant = await signInForCode(t.app);
    const first = (await exchangeCode(t.app, grant)).json().refresh_token as string;
    const second = (await refresh(t.app, first)).json().refresh_token as string;
    assert.ok(second);

    assertOAuthError(await refresh(t.app, first, [], [['client_id', 'spa']], null), 400, 'invalid_grant');
    assertOAuthError(await refresh(t.app, first, [], [], basic('webapp', 'wrong')), 401, 'invalid_client');
    const third = await refresh(t.app, second);
    assert.equal(third.statusCode, 200, third.body);

    assertOAuthError(await refresh(t.app, first), 400, 'invalid_grant');
    assertOAuthError(await refresh(t.app, third.json().refresh_token as string), 400, 'invalid_grant');
  });
});

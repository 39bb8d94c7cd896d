/** GET/POST /userinfo through HTTP (DESIGN.md §4): only tokens that carry openid and were not narrowed. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { AUDIENCE, ISSUER, SECRET, basic, claimsOf, client, exchangeCode, postToken, signInForCode, testApp, testConfig, type TestApp } from './helpers/app.js';

const API = AUDIENCE[0] as string;
const FILES = AUDIENCE[1] as string;

function userinfo(app: FastifyInstance, token: string | undefined, method: 'GET' | 'POST' = 'GET'): Promise<LightMyRequestResponse> {
  return app.inject({
    method,
    url: '/userinfo',
    headers: {
      ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
      ...(method === 'POST' ? { 'content-type': 'application/x-www-form-urlencoded' } : {}),
    },
    ...(method === 'POST' ? { payload: '' } : {}),
  });
}

async function accessToken(app: FastifyInstance, options: { scope?: string; resources?: readonly string[]; named?: string } = {}): Promise<string> {
  const grant = await signInForCode(app, {
    ...(options.scope === undefined ? {} : { scope: options.scope }),
    ...(options.resources === undefined ? {} : { resources: options.resources }),
  });
  const response = await exchangeCode(app, grant, options.named === undefined ? [] : [options.named]);
  assert.equal(response.statusCode, 200, response.body);
  return response.json().access_token as string;
}

function assertInvalidToken(response: LightMyRequestResponse): void {
  assert.equal(response.statusCode, 401, response.body);
  assert.match(String(response.headers['www-authenticate']), /^Bearer error="invalid_token"/);
  assert.equal(response.headers['cache-control'], 'no-store');
  assert.equal(response.body.includes('alice@example.org'), false);
}

describe('/userinfo', () => {
  let t: TestApp;
  before(async () => {
    t = await testApp();
  });
  after(async () => t.app.close());

  test('a token for the whole audience with openid profile email: sub, email and name', async () => {
    const token = await accessToken(t.app);
    assert.deepEqual(claimsOf(token).aud, AUDIENCE);
    const response = await userinfo(t.app, token);
    assert.equal(response.statusCode, 200, response.body);
    assert.equal(response.headers['cache-control'], 'no-store');
    assert.deepEqual(response.json(), { sub: 'alice', email: 'alice@example.org', name: 'Alice Example' });
  });

  test('a token of a revoked grant is refused at once (DESIGN.md §8)', async () => {
    const token = await accessToken(t.app);
    assert.equal((await userinfo(t.app, token)).statusCode, 200);
    const revoked = await t.app.inject({
      method: 'POST',
      url: '/revoke',
      headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic('webapp', SECRET) },
      payload: `token=${token}`,
    });
    assert.equal(revoked.statusCode, 200, revoked.body);
    const response = await userinfo(t.app, token);
    assertInvalidToken(response);
    assert.equal(response.json().error_description, 'the access token is no longer valid');
  });

  test('the claims follow the scope', async () => {
    assert.deepEqual((await userinfo(t.app, await accessToken(t.app, { scope: 'openid email' }))).json(), { sub: 'alice', email: 'alice@example.org' });
    assert.deepEqual((await userinfo(t.app, await accessToken(t.app, { scope: 'openid profile' }))).json(), { sub: 'alice', name: 'Alice Example' });
    assert.deepEqual((await userinfo(t.app, await accessToken(t.app, { scope: 'openid' }))).json(), { sub: 'alice' });
  });

  test('a token addressed to the issuer through a provider scope', async () => {
    const token = await accessToken(t.app, { scope: 'openid email ssh' });
    assert.equal(claimsOf(token).aud, ISSUER);
    const response = await userinfo(t.app, token);
    assert.equal(response.statusCode, 200, response.body);
    assert.deepEqual(response.json(), { sub: 'alice', email: 'alice@example.org' });
  });

  test('a token named to the issuer at /token with a provider scope', async () => {
    const token = await accessToken(t.app, { scope: 'openid ssh', named: ISSUER });
    assert.equal((await userinfo(t.app, token)).statusCode, 200);
  });

  test('POST works too', async () => {
    const response = await userinfo(t.app, await accessToken(t.app), 'POST');
    assert.equal(response.statusCode, 200, response.body);
    assert.equal(response.json().sub, 'alice');
  });

  test('a token narrowed to another resource server at /token: 401 invalid_token', async () => {
    const token = await accessToken(t.app, { resources: [API, FILES], named: API });
    assert.equal(claimsOf(token).aud, API);
    assertInvalidToken(await userinfo(t.app, token));
    assertInvalidToken(await userinfo(t.app, token, 'POST'));
  });

  test('a token narrowed at /authorize to part of the audience: 401 invalid_token', async () => {
    const token = await accessToken(t.app, { resources: [API, FILES] });
    assert.deepEqual(claimsOf(token).aud, [API, FILES]);
    assertInvalidToken(await userinfo(t.app, token));
  });

  test('a token narrowed to one resource with no resource at /authorize: 401 invalid_token', async () => {
    const token = await accessToken(t.app, { named: FILES });
    assertInvalidToken(await userinfo(t.app, token));
  });

  test('a token without openid: 401 invalid_token', async () => {
    assertInvalidToken(await userinfo(t.app, await accessToken(t.app, { scope: 'profile email' })));
    const service = await postToken(t.app, [['grant_type', 'client_credentials'], ['scope', 'read']], basic('service', SECRET));
    assert.equal(service.statusCode, 200, service.body);
    assertInvalidToken(await userinfo(t.app, service.json().access_token));
  });

  test('a refreshed token narrowed to another resource server: 401; the whole grant again: 200', async () => {
    const grant = await signInForCode(t.app);
    const exchanged = (await exchangeCode(t.app, grant)).json();
    const narrowed = await postToken(t.app, [
      ['grant_type', 'refresh_token'],
      ['refresh_token', exchanged.refresh_token],
      ['resource', FILES],
    ]);
    assert.equal(narrowed.statusCode, 200, narrowed.body);
    assertInvalidToken(await userinfo(t.app, narrowed.json().access_token));
    const whole = await postToken(t.app, [['grant_type', 'refresh_token'], ['refresh_token', narrowed.json().refresh_token]]);
    assert.equal((await userinfo(t.app, whole.json().access_token)).statusCode, 200);
  });

  test('no token: 401 with a Bearer challenge', async () => {
    const response = await userinfo(t.app, undefined);
    assert.equal(response.statusCode, 401);
    assert.match(String(response.headers['www-authenticate']), /^Bearer/);
    const post = await userinfo(t.app, undefined, 'POST');
    assert.equal(post.statusCode, 401);
  });

  test('another scheme: 401', async () => {
    const response = await t.app.inject({ method: 'GET', url: '/userinfo', headers: { authorization: basic('webapp', SECRET) } });
    assert.equal(response.statusCode, 401);
    assert.match(String(response.headers['www-authenticate']), /^Bearer/);
  });

  test('a garbage token: 401 invalid_token', async () => {
    assertInvalidToken(await userinfo(t.app, 'garbage'));
    assertInvalidToken(await userinfo(t.app, 'a.b.c'));
  });

  test('a token with a tampered payload: 401 invalid_token', async () => {
    const token = await accessToken(t.app, { named: FILES });
    const [header, , signature] = token.split('.');
    const payload = { ...claimsOf(token), aud: AUDIENCE };
    const forged = `${header}.${Buffer.from(JSON.stringify(payload)).toString('base64url')}.${signature}`;
    assertInvalidToken(await userinfo(t.app, forged));
  });

  test('an ID token is not an access token: 401 invalid_token', async () => {
    const grant = await signInForCode(t.app);
    const idToken = (await exchangeCode(t.app, grant)).json().id_token as string;
    assertInvalidToken(await userinfo(t.app, idToken));
  });

  test('a token from another server: 401 invalid_token', async () => {
    const other = await testApp();
    try {
      assertInvalidToken(await userinfo(t.app, await accessToken(other.app)));
    } finally {
      await other.app.close();
    }
  });
});

describe('/userinfo and time', () => {
  test('an expired token: 401 invalid_token', async () => {
    let now = Date.now();
    const t = await testApp({ now: () => now });
    try {
      const token = await accessToken(t.app);
      assert.equal((await userinfo(t.app, token)).statusCode, 200);
      now += 3600_000 + 120_000;
      assertInvalidToken(await userinfo(t.app, token));
    } finally {
      await t.app.close();
    }
  });
});

describe('/userinfo and tokens with no person (DESIGN.md §7)', () => {
  test('a client_credentials token whose sub (the client_id) equals a user name gets 401, not that user\'s claims', async () => {
    const config = await testConfig();
    const alias = client({ clientId: 'alice', kind: 'confidential', secret: SECRET, redirectUris: [], scopes: ['openid', 'profile', 'email'] });
    const t = await testApp({ config: { ...config, clients: new Map([...config.clients, ['alice', alias]]) } });
    try {
      const issued = await postToken(t.app, [['grant_type', 'client_credentials'], ['scope', 'openid profile email']], basic('alice', SECRET));
      assert.equal(issued.statusCode, 200, issued.body);
      const token = issued.json().access_token as string;
      assert.equal(claimsOf(token).sub, 'alice');
      const response = await userinfo(t.app, token);
      assertInvalidToken(response);
      assert.match(String(response.headers['www-authenticate']), /issued to a client, not for a person/);
    } finally {
      await t.app.close();
    }
  });
});

describe('/userinfo and exchanged tokens (DESIGN.md §12)', () => {
  test("an exchanged token gets no claims, even when the exchanging client holds the person's grant itself (an audit: its own revocation went unseen there)", async () => {
    const base = await testConfig();
    const webapp = base.clients.get('webapp');
    assert.ok(webapp !== undefined);
    // webapp may exchange tokens addressed to its own first audience entry: the grant holder and the caller are one.
    const { app } = await testApp({ config: { ...base, clients: new Map(base.clients).set('webapp', { ...webapp, tokenExchange: { subjectAudience: [AUDIENCE[0] as string] } }) } });
    try {
      const person = (await exchangeCode(app, await signInForCode(app, { scope: 'openid profile email' }))).json() as { access_token: string };
      const exchanged = await postToken(app, [
        ['grant_type', 'urn:ietf:params:oauth:grant-type:token-exchange'],
        ['subject_token', person.access_token],
        ['subject_token_type', 'urn:ietf:params:oauth:token-type:access_token'],
      ]);
      assert.equal(exchanged.statusCode, 200, exchanged.body);
      const hop = exchanged.json().access_token as string;
      const userinfo = (): Promise<LightMyRequestResponse> => app.inject({ url: '/userinfo', headers: { authorization: `Bearer ${hop}` } });
      const asked = await userinfo();
      assert.equal(asked.statusCode, 401, asked.body);
      assert.match(String(asked.headers['www-authenticate']), /made by token exchange/);
      const revoked = await app.inject({ method: 'POST', url: '/revoke', headers: { authorization: basic('webapp', SECRET), 'content-type': 'application/x-www-form-urlencoded' }, payload: `token=${hop}` });
      assert.equal(revoked.statusCode, 200);
      assert.equal((await userinfo()).statusCode, 401);
      // The person's own token still answers: only the exchanged one is refused.
      assert.equal((await app.inject({ url: '/userinfo', headers: { authorization: `Bearer ${person.access_token}` } })).statusCode, 200);
    } finally {
      await app.close();
    }
  });
});

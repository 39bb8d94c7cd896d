/**
 * A grant's `aud` is decided by one function of policy/resource.ts (DESIGN.md §1, §5 `aud` and provider scopes, §8
 * /introspect): the token endpoint and /introspect of a refresh token give the same answer, provider scopes included.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { decodeJwt } from 'jose';
import { grantAudience } from '../src/policy/resource.js';
import { STORE_KINDS } from './helpers/databases.js';
import { appPerSuite, AUDIENCE, basic, exchangeCode, form, ISSUER, refresh, SECRET, signInForCode, type TestApp } from './helpers/app.js';

const API = AUDIENCE[0] as string;
const FILES = AUDIENCE[1] as string;

test('grantAudience: the issuer with a provider scope, else the authorization\'s resources, else the whole audience', () => {
  const client = { clientId: 'c', audience: AUDIENCE };
  assert.deepEqual(grantAudience({ client, issuer: ISSUER, scope: ['openid', 'ssh'], resources: [] }), [ISSUER]);
  assert.deepEqual(grantAudience({ client, issuer: ISSUER, scope: ['openid', 'ssh'], resources: [ISSUER] }), [ISSUER]);
  assert.deepEqual(grantAudience({ client, issuer: ISSUER, scope: ['openid'], resources: [FILES, API] }), [FILES, API]);
  assert.deepEqual(grantAudience({ client, issuer: ISSUER, scope: ['openid'], resources: [] }), AUDIENCE);
});

for (const kind of STORE_KINDS) {
  describe(`a grant's aud at /token and /introspect on the ${kind.name} store`, { skip: kind.skip }, () => {
    let t: TestApp;
    appPerSuite(kind, async () => ({}), (opened) => {
      t = opened;
    });

    const introspect = async (token: string): Promise<Record<string, unknown>> => {
      const response = await t.app.inject({
        method: 'POST',
        url: '/introspect',
        headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic('webapp', SECRET) },
        payload: form([['token', token]]),
      });
      assert.equal(response.statusCode, 200, response.body);
      return response.json();
    };

    test('a refresh token of an `openid ssh` grant introspects with aud = the issuer, as its access tokens have', async () => {
      const tokens = await exchangeCode(t.app, await signInForCode(t.app, { scope: 'openid ssh' }));
      assert.equal(tokens.statusCode, 200, tokens.body);
      const { access_token: access, refresh_token: refreshToken } = tokens.json() as { access_token: string; refresh_token: string };
      assert.equal(decodeJwt(access).aud, ISSUER, 'DESIGN.md §5: a provider scope makes a token for the provider alone');
      const answer = await introspect(refreshToken);
      assert.equal(answer.active, true);
      assert.equal(answer.token_use, 'refresh_token');
      assert.equal(answer.aud, ISSUER, 'the aud an access token of the grant gets when no resource is named');
      const refreshed = await refresh(t.app, refreshToken);
      assert.equal(refreshed.statusCode, 200, refreshed.body);
      assert.equal(decodeJwt(refreshed.json().access_token as string).aud, answer.aud);
    });

    test('without a provider scope: the authorization\'s resources, else the whole audience, at /token and /introspect alike', async () => {
      const named = await exchangeCode(t.app, await signInForCode(t.app, { scope: 'openid', resources: [FILES, API] }));
      assert.equal(named.statusCode, 200, named.body);
      assert.deepEqual(decodeJwt(named.json().access_token as string).aud, [FILES, API]);
      assert.deepEqual((await introspect(named.json().refresh_token as string)).aud, [FILES, API]);
      const whole = await exchangeCode(t.app, await signInForCode(t.app, { scope: 'openid' }));
      assert.equal(whole.statusCode, 200, whole.body);
      assert.deepEqual(decodeJwt(whole.json().access_token as string).aud, AUDIENCE);
      assert.deepEqual((await introspect(whole.json().refresh_token as string)).aud, AUDIENCE);
    });
  });
}

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createLocalJWKSet, jwtVerify } from 'jose';
import { claimsOf, exchangeCode, ISSUER, refresh, signInForCode, testApp, type TestApp } from './helpers/app.js';

describe('authorization code flow with resource indicators', () => {
  let t: TestApp;
  before(async () => {
    t = await testApp();
  });
  after(async () => t.app.close());

  test('two resources at /authorize, code exchange naming one, refresh naming the other', async () => {
    const grant = await signInForCode(t.app, { resources: ['https://api.example.org/', 'https://files.example.org'], nonce: 'n-1' });
    assert.equal(grant.location.searchParams.get('iss'), ISSUER);
    assert.equal(grant.location.searchParams.get('state'), 'st-1');
    const exchanged = await exchangeCode(t.app, grant, ['https://api.example.org/']);
    assert.equal(exchanged.statusCode, 200, exchanged.body);
    assert.equal(exchanged.headers['cache-control'], 'no-store');
    const body = exchanged.json();
    assert.equal(body.token_type, 'Bearer');
    assert.equal(claimsOf(body.access_token).aud, 'https://api.example.org/');
    assert.equal(claimsOf(body.id_token).nonce, 'n-1');

    const jwks = createLocalJWKSet((await t.app.inject({ url: '/jwks' })).json());
    const verified = await jwtVerify(body.access_token, jwks, { issuer: ISSUER, audience: 'https://api.example.org/', typ: 'at+jwt' });
    assert.equal(verified.payload.client_id, 'webapp');
    await assert.rejects(jwtVerify(body.access_token, jwks, { issuer: ISSUER, audience: 'https://files.example.org' }));

    const refreshed = await refresh(t.app, body.refresh_token, ['https://files.example.org']);
    assert.equal(refreshed.statusCode, 200, refreshed.body);
    assert.equal(claimsOf(refreshed.json().access_token).aud, 'https://files.example.org');
    const outside = await refresh(t.app, refreshed.json().refresh_token, ['billing']);
    assert.equal(outside.statusCode, 400);
    assert.deepEqual(outside.json(), { error: 'invalid_target', error_description: 'resource "billing" is not one this client may ask a token for' });
  });
});

/**
 * Access tokens from before 0.3.0, whose jti named no grant (0.2.0 drew it at random): after an upgrade, a person's
 * such token must not stand at /introspect or /userinfo, since nothing can tell whether its grant was revoked (an
 * upgrade audit: they stayed active after their grant was revoked, and their person removed). A client's own token
 * (client_credentials, sub the client) never named a grant, and stands as before.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { randomBytes } from 'node:crypto';
import { signJwt } from '../src/crypto/jwt.js';
import { MemoryStore } from '../src/store/memory.js';
import { accessTokenClaims } from '../src/tokens/claims.js';
import { AUDIENCE, ISSUER, SECRET, basic, exchangeCode, form, signInForCode, testApp, type TestApp } from './helpers/app.js';
import { loadSigningKeys } from './helpers/keys.js';

describe('access tokens whose jti names no grant (issued before 0.3.0)', () => {
  let t: TestApp;
  let signedLikeOldRelease: (subject: string, clientId: string, scope: readonly string[]) => Promise<string>;

  before(async () => {
    const store = new MemoryStore();
    t = await testApp({ store });
    const keys = await loadSigningKeys(store);
    signedLikeOldRelease = async (subject, clientId, scope) => {
      const claims = accessTokenClaims({ issuer: ISSUER, subject, clientId, audience: AUDIENCE[0] as string, scope, lifetimeSeconds: 3600 }, Date.now());
      // 0.2.0's jti: random, with no grant id before a '.'.
      return signJwt(keys.accessToken, 'at+jwt', { ...claims, jti: randomBytes(16).toString('hex') });
    };
  });
  after(async () => t.app.close());

  const introspect = async (token: string): Promise<Record<string, unknown>> => {
    const answer = await t.app.inject({
      method: 'POST',
      url: '/introspect',
      headers: { authorization: basic('webapp', SECRET), 'content-type': 'application/x-www-form-urlencoded' },
      payload: form([['token', token]]),
    });
    assert.equal(answer.statusCode, 200, answer.body);
    return answer.json();
  };

  test("a person's token is inactive at /introspect and gets no claims at /userinfo", async () => {
    const token = await signedLikeOldRelease('alice', 'webapp', ['openid', 'profile']);
    assert.deepEqual(await introspect(token), { active: false });
    const userinfo = await t.app.inject({ url: '/userinfo', headers: { authorization: `Bearer ${token}` } });
    assert.equal(userinfo.statusCode, 401, userinfo.body);
    assert.match(String(userinfo.headers['www-authenticate']), /error="invalid_token"/);
  });

  test("a client's own token (sub the client) stands as before, until revoked", async () => {
    const token = await signedLikeOldRelease('webapp', 'webapp', []);
    const claims = await introspect(token);
    assert.equal(claims.active, true, JSON.stringify(claims));
    assert.equal(claims.sub, 'webapp');
    const revoked = await t.app.inject({
      method: 'POST',
      url: '/revoke',
      headers: { authorization: basic('webapp', SECRET), 'content-type': 'application/x-www-form-urlencoded' },
      payload: form([['token', token]]),
    });
    assert.equal(revoked.statusCode, 200);
    assert.deepEqual(await introspect(token), { active: false });
  });

  test("a person's token of this version, naming its grant, stands", async () => {
    const tokens = (await exchangeCode(t.app, await signInForCode(t.app))).json();
    assert.equal((await introspect(tokens.access_token)).active, true);
  });
});

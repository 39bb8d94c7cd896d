/** VerifiedAccessTokens (src/crypto/jwt.ts): a verified access token is remembered only while its key is published and it is unexpired. */
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { signJwt, VerifiedAccessTokens } from '../src/crypto/jwt.js';
import type { SigningKeys } from '../src/crypto/keys.js';
import { loadSigningKeys } from './helpers/keys.js';
import { openStore } from '../src/store/open.js';

const ISSUER = 'https://auth.example.org';
const NOW = Date.UTC(2026, 10, 24, 12, 0, 0);

describe('VerifiedAccessTokens', () => {
  let keys: SigningKeys;
  let serial = 0;
  const token = (expiresInSeconds = 300): Promise<string> =>
    signJwt(keys.accessToken, 'at+jwt', { iss: ISSUER, sub: 'alice', aud: 'https://api.example.org/', client_id: 'webapp', iat: NOW / 1000, exp: NOW / 1000 + expiresInSeconds, jti: `t${(serial += 1)}` });

  before(async () => {
    keys = await loadSigningKeys(await openStore({ kind: 'memory' }), NOW);
  });

  test('a token verified once is remembered: the same claims object answers again', async () => {
    const tokens = new VerifiedAccessTokens(10);
    const value = await token();
    const first = await tokens.verify(keys, value, ISSUER, NOW);
    assert.equal(first.sub, 'alice');
    assert.equal(await tokens.verify(keys, value, ISSUER, NOW + 1000), first);
    assert.ok(Object.isFrozen(first), 'callers cannot change what the next caller reads');
  });

  test('a remembered token is refused once its key is no longer published (retired)', async () => {
    const tokens = new VerifiedAccessTokens(10);
    const value = await token();
    await tokens.verify(keys, value, ISSUER, NOW);
    const retired: SigningKeys = { ...keys, byKid: new Map([...keys.byKid].filter(([kid]) => kid !== keys.accessToken.kid)) };
    await assert.rejects(tokens.verify(retired, value, ISSUER, NOW));
  });

  test('a remembered token is refused from the second of its exp on, as jose refuses it', async () => {
    const tokens = new VerifiedAccessTokens(10);
    const value = await token(60);
    await tokens.verify(keys, value, ISSUER, NOW);
    assert.ok(await tokens.verify(keys, value, ISSUER, NOW + 59_999));
    await assert.rejects(tokens.verify(keys, value, ISSUER, NOW + 60_000));
  });

  test('a forged token is refused every time, and at most `capacity` tokens are kept (the oldest leave first)', async () => {
    const tokens = new VerifiedAccessTokens(2);
    const value = await token();
    const forged = `${value.slice(0, value.lastIndexOf('.') + 1)}${'A'.repeat(86)}`;
    await assert.rejects(tokens.verify(keys, forged, ISSUER, NOW));
    await assert.rejects(tokens.verify(keys, forged, ISSUER, NOW));
    const [a, b, c] = await Promise.all([token(), token(), token()]);
    const first = await tokens.verify(keys, a as string, ISSUER, NOW);
    const second = await tokens.verify(keys, b as string, ISSUER, NOW);
    await tokens.verify(keys, c as string, ISSUER, NOW);
    assert.equal(await tokens.verify(keys, b as string, ISSUER, NOW), second, 'the newer two are kept');
    assert.notEqual(await tokens.verify(keys, a as string, ISSUER, NOW), first, 'the oldest was dropped and is verified again');
  });
});

/** The pure rules of upstream sign-in: which claims are believed (upstream-identity.ts) and which auth_time (upstream-reauthentication.ts). */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { identityOf, mergedClaims, subjectValueOf, wantsUserinfo } from '../src/login/upstream-identity.js';
import { AUTH_TIME_SKEW_MS, reauthenticationFor, upstreamAuthTime, upstreamParameters } from '../src/login/upstream-reauthentication.js';
import type { PendingAuthorization } from '../src/store/types.js';

describe('upstream identity', () => {
  test('email and email_verified come as a pair from one source', () => {
    const fromUserinfo = mergedClaims({ sub: 'u', email_verified: true }, { sub: 'u', email: 'ceo@corp.example', email_verified: false, name: 'N' });
    assert.equal(identityOf(fromUserinfo).email, undefined);
    assert.equal(fromUserinfo.name, 'N');
    const idTokenWins = mergedClaims({ sub: 'u', email: 'a@x.example' }, { sub: 'u', email: 'a@x.example', email_verified: true });
    assert.equal(identityOf(idTokenWins).email, undefined, "userinfo's flag does not vouch for the ID token's address");
    assert.equal(identityOf(mergedClaims({ sub: 'u' }, { sub: 'u', email: 'b@x.example', email_verified: true })).email, 'b@x.example');
    assert.equal(identityOf(mergedClaims({ sub: 'u', email: 'c@x.example', email_verified: 'true' }, undefined)).email, undefined);
  });

  test('an email is a subject only when verified; another claim when it is a non-empty string', () => {
    const mail = { subjectClaim: 'email' };
    assert.deepEqual(subjectValueOf(mail, 'u', { email: 'a@x.example', email_verified: true }), { ok: true, value: 'a@x.example' });
    assert.deepEqual(subjectValueOf(mail, 'u', { email: 'a@x.example', email_verified: false }), { ok: false, reason: 'unverified email' });
    assert.deepEqual(subjectValueOf(mail, 'u', { email: 'a@x.example' }), { ok: false, reason: 'unverified email' });
    assert.deepEqual(subjectValueOf(mail, 'u', {}), { ok: false, reason: 'missing' });
    assert.deepEqual(subjectValueOf({ subjectClaim: 'oid' }, 'u', { oid: '' }), { ok: false, reason: 'missing' });
    assert.deepEqual(subjectValueOf({}, 'u', { email: 'a@x.example' }), { ok: true, value: 'u' });
  });

  test('userinfo is asked for a missing email, name or subject claim', () => {
    const scopes = ['openid', 'email', 'profile'];
    assert.equal(wantsUserinfo({ scopes }, { email: 'a', name: 'n' }), false);
    assert.equal(wantsUserinfo({ scopes, subjectClaim: 'preferred_username' }, { email: 'a', name: 'n' }), true);
    assert.equal(wantsUserinfo({ scopes: ['openid'] }, {}), false);
  });
});

describe('upstream auth_time', () => {
  const askedAt = Date.parse('2030-01-01T00:00:00Z');
  const now = askedAt + 60_000;
  const seconds = (ms: number): number => Math.floor(ms / 1000);

  test('prompt=login and max_age are passed on from the authorization, not from a device approval', () => {
    assert.deepEqual(upstreamParameters(reauthenticationFor({ kind: 'authorize', authorization: { prompt: 'login', maxAge: 600 } as PendingAuthorization })), { prompt: 'login', max_age: '0' });
    assert.deepEqual(upstreamParameters(reauthenticationFor({ kind: 'authorize', authorization: { maxAge: 600 } as PendingAuthorization })), { max_age: '600' });
    assert.deepEqual(upstreamParameters(reauthenticationFor({ kind: 'authorize', authorization: { prompt: 'consent' } as PendingAuthorization })), {});
    assert.deepEqual(reauthenticationFor({ kind: 'device', userCode: 'ABCD-EFGH' }), {});
  });

  test('nothing asked: the upstream auth_time however old, never later than now; none: now', () => {
    assert.equal(upstreamAuthTime({}, seconds(askedAt - 86_400_000), askedAt, now), askedAt - 86_400_000);
    assert.equal(upstreamAuthTime({}, seconds(now + 3_600_000), askedAt, now), now);
    assert.equal(upstreamAuthTime({}, undefined, askedAt, now), now);
    assert.equal(upstreamAuthTime({}, 'yesterday', askedAt, now), now);
  });

  test('prompt=login: an authentication after the request, or within the skew before it (taken as the request time)', () => {
    const login = { prompt: 'login' } as const;
    assert.equal(upstreamAuthTime(login, undefined, askedAt, now), undefined);
    assert.equal(upstreamAuthTime(login, seconds(askedAt + 30_000), askedAt, now), askedAt + 30_000);
    assert.equal(upstreamAuthTime(login, seconds(askedAt - AUTH_TIME_SKEW_MS), askedAt, now), askedAt);
    assert.equal(upstreamAuthTime(login, seconds(askedAt - AUTH_TIME_SKEW_MS - 1000), askedAt, now), undefined);
    assert.equal(upstreamAuthTime({ ...login, maxAge: 3600 }, seconds(askedAt - 60_000), askedAt, now), undefined, 'max_age does not loosen prompt=login');
  });

  test('max_age: an earlier authentication young enough keeps its time; max_age=0 needs one made for the request', () => {
    assert.equal(upstreamAuthTime({ maxAge: 300 }, seconds(now - 200_000), askedAt, now), now - 200_000);
    assert.equal(upstreamAuthTime({ maxAge: 300 }, seconds(now - 400_000), askedAt, now), undefined);
    assert.equal(upstreamAuthTime({ maxAge: 0 }, seconds(askedAt + 20_000), askedAt, now), askedAt + 20_000);
    assert.equal(upstreamAuthTime({ maxAge: 0 }, seconds(askedAt - 60_000), askedAt, now), undefined);
  });
});

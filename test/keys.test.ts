/**
 * Key rotation across instances (DESIGN.md §2 `keys`): a key rotated through the store is published by every
 * instance, then signs on every instance, without a restart; a resource server using jose's createRemoteJWKSet
 * accepts tokens from before and after; a retired key leaves /jwks and its tokens turn inactive. Timing is scaled
 * down here (production: published within 10 s, signing within 55 s; the lead covers jose's 30 s cooldown).
 */
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createRemoteJWKSet, decodeProtectedHeader, jwtVerify } from 'jose';
import { KeyRing, keyStates, retireKey, rotateKeys, type KeyTiming } from '../src/crypto/keys.js';
import { MemoryStore } from '../src/store/memory.js';
import { openStore } from '../src/store/open.js';
import type { Store } from '../src/store/types.js';
import { createPostgresDatabase, POSTGRES_SKIP_REASON, POSTGRES_URL } from './helpers/databases.js';
import { AUDIENCE, basic, postToken, SECRET, testApp, testConfig, type TestApp } from './helpers/app.js';

const API = AUDIENCE[0] as string;
// The lead leaves a loaded machine room to see the new key published before it signs (the test asserts that order).
const TIMING: KeyTiming = { reloadMs: 100, leadMs: 3000, jwksMaxAgeSeconds: 1 };
/** The resource server's re-fetch cooldown, scaled like TIMING (jose's default is 30 s against a 45 s lead). */
const COOLDOWN_MS = 1000;

/** Polls `check` every 50 ms for at most `ms`. */
async function eventually(ms: number, check: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await check()) return;
    await sleep(50);
  }
  assert.fail(`not within ${ms} ms: ${what}`);
}

describe('key rotation across two instances sharing one PostgreSQL database', { skip: POSTGRES_URL === undefined ? POSTGRES_SKIP_REASON : undefined }, () => {
  let database: Awaited<ReturnType<typeof createPostgresDatabase>>;
  const stores: Store[] = [];
  const rings: KeyRing[] = [];
  const apps: TestApp[] = [];
  let jwksUrl: string;

  before(async () => {
    database = await createPostgresDatabase();
    const resourceServers = new Map([[API, { label: API, secret: 'rs' }]]);
    for (let i = 0; i < 2; i++) {
      const store = await openStore({ kind: 'postgres', url: database.url, schema: 'public' });
      const ring = await KeyRing.open(store, { timing: TIMING });
      ring.start((error) => assert.fail(String(error)));
      stores.push(store);
      rings.push(ring);
      apps.push(await testApp({ store, keys: ring, config: { ...(await testConfig()), resourceServers } }));
    }
    await apps[0]?.app.listen({ host: '127.0.0.1', port: 0 });
    jwksUrl = `http://127.0.0.1:${((apps[0]?.app.server.address() as AddressInfo).port)}/jwks`;
  });
  after(async () => {
    for (const ring of rings) ring.stop();
    for (const t of apps) await t.app.close();
    for (const store of stores) await store.close();
    await database?.drop();
  });

  const tokenFrom = async (t: TestApp): Promise<string> => {
    const response = await postToken(t.app, [['grant_type', 'client_credentials']], basic('service', SECRET));
    assert.equal(response.statusCode, 200, response.body);
    return response.json().access_token as string;
  };
  const kidsOf = async (t: TestApp): Promise<string[]> =>
    ((await t.app.inject({ url: '/jwks' })).json() as { keys: { kid: string }[] }).keys.map((key) => key.kid);
  const introspect = async (t: TestApp, token: string): Promise<boolean> =>
    (await t.app.inject({ method: 'POST', url: '/introspect', headers: { authorization: basic(API, 'rs'), 'content-type': 'application/x-www-form-urlencoded' }, payload: `token=${token}` })).json().active === true;

  test('rotate: published everywhere, then signing everywhere; a remote JWKS resource server accepts tokens from before and after; retire: gone', async () => {
    const [a, b] = apps as [TestApp, TestApp];
    const before = await tokenFrom(b);
    const oldKid = decodeProtectedHeader(before).kid as string;
    assert.deepEqual(await kidsOf(a), await kidsOf(b), 'both instances publish the same keys');
    const jwks = createRemoteJWKSet(new URL(jwksUrl), { cooldownDuration: COOLDOWN_MS });
    await jwtVerify(before, jwks, { audience: API, typ: 'at+jwt' });
    const cacheControl = (await a.app.inject({ url: '/jwks' })).headers['cache-control'];
    assert.equal(cacheControl, `public, max-age=${TIMING.jwksMaxAgeSeconds}`);

    const rotatedAt = Date.now();
    const added = await rotateKeys(stores[0] as Store, rotatedAt);
    const newKid = added.find((key) => key.alg === 'ES256')?.kid as string;
    for (const t of [a, b]) await eventually(TIMING.reloadMs * 10, async () => (await kidsOf(t)).includes(newKid), 'the new key is published');
    const signedNow = await tokenFrom(b);
    // Only meaningful while the lead runs: a machine that stalled past it has rightly switched already.
    if (Date.now() - rotatedAt < TIMING.leadMs - 200) assert.equal(decodeProtectedHeader(signedNow).kid, oldKid, 'published before it signs');
    for (const t of [a, b]) {
      await eventually(TIMING.leadMs + TIMING.reloadMs * 5, async () => decodeProtectedHeader(await tokenFrom(t)).kid === newKid, 'the new key signs');
    }
    const afterRotation = await tokenFrom(a);
    await jwtVerify(afterRotation, jwks, { audience: API, typ: 'at+jwt' });
    await jwtVerify(before, jwks, { audience: API, typ: 'at+jwt' });
    assert.ok(await introspect(b, before), 'a token of the old key stays active while the key is published');

    const refused = await retireKey(stores[1] as Store, newKid, Date.now(), TIMING);
    assert.equal(refused.ok, false, 'a key that signs cannot be retired');
    // Within one reload of the switch an instance may still sign with the old key: retiring it then is refused.
    const switchedAt = rotatedAt + TIMING.leadMs;
    const early = await retireKey(stores[1] as Store, oldKid, switchedAt + TIMING.reloadMs / 2, TIMING);
    assert.equal(early.ok, false);
    assert.match((early as { reason: string }).reason, /running instances may still sign with it/);
    const states = keyStates(await (stores[1] as Store).listKeys(), Date.now(), TIMING.leadMs);
    assert.equal(states.get(oldKid), 'published');
    assert.deepEqual(await retireKey(stores[1] as Store, oldKid, Math.max(Date.now(), switchedAt + TIMING.reloadMs + 1), TIMING), { ok: true });
    for (const t of [a, b]) await eventually(TIMING.reloadMs * 5, async () => !(await kidsOf(t)).includes(oldKid), 'the retired key leaves /jwks');
    assert.equal(await introspect(a, before), false, 'a token signed by a retired key is inactive');
    assert.equal(await introspect(a, afterRotation), true);
  });
});

describe('retiring the key that signs is refused, saying what to do', () => {
  test('before a rotation: rotate first; after one: which key takes over, and when', async () => {
    const store = new MemoryStore();
    const keys = await KeyRing.open(store, { now: () => 1_000_000, timing: TIMING });
    const signing = keys.current.accessToken.kid;
    const first = await retireKey(store, signing, 1_000_000, TIMING);
    assert.deepEqual(first, { ok: false, reason: `key ${signing} signs new tokens; rotate first, then retire it once the new key signs` });
    const rotatedAt = 2_000_000;
    const successor = (await rotateKeys(store, rotatedAt)).find((key) => key.alg === 'ES256')?.kid as string;
    const during = await retireKey(store, signing, rotatedAt + 1000, TIMING);
    const retirable = rotatedAt + TIMING.leadMs + TIMING.reloadMs;
    assert.deepEqual(during, { ok: false, reason: `key ${signing} signs new tokens until key ${successor}, published by a rotation, takes over; retire it from ${new Date(retirable).toISOString()}` });
    // A second rotation within the lead: the first successor still takes over first.
    await rotateKeys(store, rotatedAt + 500);
    assert.match((await retireKey(store, signing, rotatedAt + 1000, TIMING) as { reason: string }).reason, new RegExp(`until key ${successor},`));
    // From the time it names, retiring is taken.
    assert.deepEqual(await retireKey(store, signing, retirable, TIMING), { ok: true });
  });
});

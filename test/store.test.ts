/**
 * One suite for every Store implementation (DESIGN.md §6): memory, SQLite (a temporary file), and
 * PostgreSQL when PINPOINT_TEST_POSTGRES_URL names a server (a database created for the run, dropped after).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import pg from 'pg';
import { MemoryStore } from '../src/store/memory.js';
import { MIGRATIONS, migratePostgres } from '../src/store/migrations.js';
import { GRANT_EXPIRY_SLACK_MS, grantParams } from '../src/store/rows.js';
import { openStore } from '../src/store/open.js';
import { PostgresStore } from '../src/store/postgres.js';
import { SqliteStore } from '../src/store/sqlite.js';
import type { AuthorizationCodeRecord, DeviceAuthorizationRecord, Grant, RefreshTokenRecord, Store, StoredKey } from '../src/store/types.js';

const POSTGRES_URL = process.env['PINPOINT_TEST_POSTGRES_URL'];
const MINUTE = 60_000;

const digest = (): string => createHash('sha256').update(randomBytes(16)).digest('hex');
const randomId = (prefix: string): string => `${prefix}-${randomBytes(8).toString('hex')}`;

function makeGrant(now: number, overrides: Partial<Grant> = {}): Grant {
  return {
    id: randomId('grant'),
    clientId: 'webapp',
    subject: 'alice',
    scope: ['openid', 'profile', 'email'],
    resources: ['https://files.example.org', 'https://api.example.org/', 'https://docs.example.org/v2'],
    claims: { email: 'alice@example.org', name: 'Alice Example' },
    authTime: now - 1000,
    createdAt: now,
    expiresAt: now + MINUTE,
    ...overrides,
  };
}

function makeCode(grant: Grant, now: number, overrides: Partial<AuthorizationCodeRecord> = {}): AuthorizationCodeRecord {
  return {
    digest: digest(),
    grantId: grant.id,
    clientId: grant.clientId,
    redirectUri: 'https://app.example.org/callback',
    codeChallenge: 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM',
    nonce: 'n-0S6_WzA2Mj',
    expiresAt: now + MINUTE,
    ...overrides,
  };
}

/** The tables as migration 1 made them, with the migrations table (what a database of Pinpoint 0.1 holds). */
const versionOneSchema = (): string[] => [
  'CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)',
  ...(MIGRATIONS[0]?.statements as readonly string[]),
];

const makeRefresh = (grant: Grant, now: number, lifetimeMs = 60 * MINUTE): RefreshTokenRecord => ({
  digest: digest(),
  grantId: grant.id,
  issuedAt: now,
  expiresAt: now + lifetimeMs,
});

/** After migration 2, a version 1 refresh token is found under its grant, rotates, and its row stays beside the new one; closes `store`. */
async function assertMigratedRefreshToken(
  store: Store,
  { grant, token, now }: { grant: Grant; token: RefreshTokenRecord; now: number },
  rows: (store: Store, table: string) => Promise<number>,
): Promise<void> {
  try {
    assert.deepEqual(await store.findRefreshToken(grant.id, token.digest, now), { status: 'active', token, grant });
    assert.equal(await store.rotateRefreshToken(token.digest, makeRefresh(grant, now), now), true);
    assert.equal(await rows(store, 'refresh_tokens'), 2);
  } finally {
    await store.close();
  }
}

function makeDevice(now: number, overrides: Partial<DeviceAuthorizationRecord> = {}): DeviceAuthorizationRecord {
  return {
    deviceCodeDigest: digest(),
    userCode: randomBytes(4).toString('hex').toUpperCase(),
    clientId: 'tv',
    scope: ['openid', 'profile'],
    status: 'pending',
    intervalSeconds: 5,
    createdAt: now,
    expiresAt: now + 10 * MINUTE,
    ...overrides,
  };
}

const makeKeys = (now: number): StoredKey[] => [
  { kid: randomId('es'), alg: 'ES256', privateJwk: JSON.stringify({ kty: 'EC', d: randomId('d') }), createdAt: now },
  { kid: randomId('rs'), alg: 'RS256', privateJwk: JSON.stringify({ kty: 'RSA', d: randomId('d') }), createdAt: now },
];

const byKid = (keys: readonly StoredKey[]): StoredKey[] => [...keys].sort((a, b) => a.kid.localeCompare(b.kid));

interface Backend {
  /** A store with empty state (its own file, schema or Maps). */
  open(): Promise<Store>;
  /** Physical row count of a table, to see what sweep removed; absent for memory. */
  rows?(store: Store, table: string): Promise<number>;
}

/** The shared contract every implementation must meet. */
function storeSuite(name: string, backend: () => Backend): void {
  describe(`${name} store`, () => {
    const opened: Store[] = [];
    const open = async (): Promise<Store> => {
      const store = await backend().open();
      opened.push(store);
      return store;
    };
    /** A fresh store holding one grant and its unused code. */
    const openWithCode = async (): Promise<{ store: Store; now: number; grant: Grant; code: AuthorizationCodeRecord }> => {
      const store = await open();
      const now = Date.now();
      const grant = makeGrant(now);
      const code = makeCode(grant, now);
      await store.createGrantWithCode(grant, code);
      return { store, now, grant, code };
    };
    after(async () => {
      for (const store of opened) await store.close();
    });

    it('creates the keys once and returns the stored ones afterwards', async () => {
      const store = await open();
      const now = Date.now();
      const first = makeKeys(now);
      assert.deepEqual(byKid(await store.loadOrCreateKeys(first)), byKid(first));
      assert.deepEqual(byKid(await store.loadOrCreateKeys(makeKeys(now + 1))), byKid(first));
    });

    it('stores a grant with its code, keeping scope and resources in order', async () => {
      const store = await open();
      const now = Date.now();
      const grant = makeGrant(now, { resources: ['https://z.example.org', 'https://a.example.org', 'https://m.example.org/'] });
      const code = makeCode(grant, now);
      await store.createGrantWithCode(grant, code);
      assert.deepEqual(await store.getGrant(grant.id), grant);
      assert.equal(await store.getGrant('no-such-grant'), undefined);
      assert.deepEqual(await store.findCode(code.digest, now), { status: 'active', code, grant });

      const bare = makeGrant(now, { resources: [], claims: {} });
      const bareCode = makeCode(bare, now, { nonce: undefined });
      delete (bareCode as { nonce?: string }).nonce;
      await store.createGrantWithCode(bare, bareCode);
      const lookup = await store.findCode(bareCode.digest, now);
      assert.equal(lookup.status, 'active');
      assert.ok(lookup.status === 'active' && !('nonce' in lookup.code));
      assert.deepEqual(await store.getGrant(bare.id), bare);
    });

    it('writes neither grant nor code when the code cannot be stored', async () => {
      const store = await open();
      const now = Date.now();
      const first = makeGrant(now);
      const code = makeCode(first, now);
      await store.createGrantWithCode(first, code);
      const second = makeGrant(now);
      await assert.rejects(store.createGrantWithCode(second, { ...code, grantId: second.id }));
      assert.equal(await store.getGrant(second.id), undefined);
    });

    it('uses a code once: used after consumption, unknown when expired or unknown', async () => {
      const { store, now, grant, code } = await openWithCode();
      assert.equal(await store.consumeCode(code.digest, now), true);
      assert.equal(await store.consumeCode(code.digest, now), false);
      assert.deepEqual(await store.findCode(code.digest, now), { status: 'used', grantId: grant.id });
      assert.deepEqual(await store.findCode(code.digest, code.expiresAt), { status: 'unknown' });
      assert.deepEqual(await store.findCode(digest(), now), { status: 'unknown' });
      assert.equal(await store.consumeCode(digest(), now), false);

      const late = makeCode(grant, now);
      await store.createGrantWithCode(makeGrant(now, { id: randomId('g') }), { ...late, grantId: grant.id });
      assert.deepEqual(await store.findCode(late.digest, late.expiresAt + 1), { status: 'unknown' });
      assert.equal(await store.consumeCode(late.digest, late.expiresAt + 1), false);
    });

    it('lets exactly one of 50 concurrent consumeCode calls win', async () => {
      const { store, now, grant, code } = await openWithCode();
      const results = await Promise.all(Array.from({ length: 50 }, () => store.consumeCode(code.digest, now)));
      assert.equal(results.filter(Boolean).length, 1);
    });

    it('consumes a code and stores its first refresh token in one transaction; once only', async () => {
      const { store, now, grant, code } = await openWithCode();
      const candidates = Array.from({ length: 20 }, () => makeRefresh(grant, now));
      const results = await Promise.all(candidates.map((refresh) => store.consumeCode(code.digest, now, refresh)));
      assert.equal(results.filter(Boolean).length, 1);
      const statuses = await Promise.all(candidates.map(async (refresh) => (await store.findRefreshToken(grant.id, refresh.digest, now)).status));
      assert.deepEqual(
        statuses.map((status, i) => [status, results[i]]).filter(([status]) => status === 'active'),
        [['active', true]],
        "only the winner's refresh token was stored",
      );
      assert.equal((await store.getGrant(grant.id))?.expiresAt, (candidates[0] as RefreshTokenRecord).expiresAt + GRANT_EXPIRY_SLACK_MS);
      assert.deepEqual(await store.findCode(code.digest, now), { status: 'used', grantId: grant.id });

      const expired = makeCode(grant, now);
      await store.createGrantWithCode(makeGrant(now), { ...expired, grantId: grant.id });
      const late = makeRefresh(grant, expired.expiresAt);
      assert.equal(await store.consumeCode(expired.digest, expired.expiresAt, late), false);
      assert.deepEqual(await store.findRefreshToken(grant.id, late.digest, expired.expiresAt), { status: 'unknown' }, 'nothing written');
    });

    it('adds a refresh token, extending the grant to outlive it by the slack', async () => {
      const { store, now, grant } = await openWithCode();
      const token = makeRefresh(grant, now + 1000);
      await store.addRefreshToken(token);
      const lookup = await store.findRefreshToken(token.grantId, token.digest, now);
      const extended = token.expiresAt + GRANT_EXPIRY_SLACK_MS;
      assert.deepEqual(lookup, { status: 'active', token, grant: { ...grant, expiresAt: extended } });
      assert.equal((await store.getGrant(grant.id))?.expiresAt, extended);
      assert.deepEqual(await store.findRefreshToken(token.grantId, token.digest, token.expiresAt), { status: 'unknown' });
      assert.deepEqual(await store.findRefreshToken(grant.id, digest(), now), { status: 'unknown' });
      assert.deepEqual(await store.findRefreshToken(randomId('grant'), token.digest, now), { status: 'unknown' }, 'found only under its grant');

      const short = makeRefresh(grant, now, 1000);
      await store.addRefreshToken(short);
      assert.equal((await store.getGrant(grant.id))?.expiresAt, extended, 'never shortened');
      const withinSlack = makeRefresh(grant, now + GRANT_EXPIRY_SLACK_MS / 2);
      await store.addRefreshToken(withinSlack);
      assert.equal((await store.getGrant(grant.id))?.expiresAt, extended, 'a token expiring within the slack leaves the grant row alone');
      const beyond = makeRefresh(grant, now + GRANT_EXPIRY_SLACK_MS * 2);
      await store.addRefreshToken(beyond);
      assert.equal((await store.getGrant(grant.id))?.expiresAt, beyond.expiresAt + GRANT_EXPIRY_SLACK_MS);
    });

    it('rotates a refresh token: the old one reads rotated, the new one active, the grant outliving both', async () => {
      const { store, now, grant } = await openWithCode();
      const first = makeRefresh(grant, now);
      await store.addRefreshToken(first);
      const next = makeRefresh(grant, now + 5000);
      assert.equal(await store.rotateRefreshToken(first.digest, next, now + 5000), true);
      assert.deepEqual(await store.findRefreshToken(first.grantId, first.digest, now + 5000), {
        status: 'rotated',
        grantId: grant.id,
        clientId: grant.clientId,
      });
      const lookup = await store.findRefreshToken(next.grantId, next.digest, now + 5000);
      assert.equal(lookup.status, 'active');
      assert.ok(lookup.status === 'active');
      assert.deepEqual(lookup.token, next);
      assert.equal(lookup.grant.expiresAt, first.expiresAt + GRANT_EXPIRY_SLACK_MS, 'within the slack: the grant row was not rewritten');
      assert.deepEqual(lookup.grant.resources, grant.resources);
    });

    it('writes nothing when a rotation fails', async () => {
      const { store, now, grant } = await openWithCode();
      const first = makeRefresh(grant, now, MINUTE * 2);
      await store.addRefreshToken(first);
      const second = makeRefresh(grant, now + 1000, MINUTE * 3);
      assert.equal(await store.rotateRefreshToken(first.digest, second, now + 1000), true);
      const expiryBefore = (await store.getGrant(grant.id))?.expiresAt;

      const reused = makeRefresh(grant, now + 2000, MINUTE * 500);
      assert.equal(await store.rotateRefreshToken(first.digest, reused, now + 2000), false);
      assert.deepEqual(await store.findRefreshToken(reused.grantId, reused.digest, now + 2000), { status: 'unknown' });
      assert.equal((await store.getGrant(grant.id))?.expiresAt, expiryBefore);

      const afterExpiry = makeRefresh(grant, second.expiresAt, MINUTE * 500);
      assert.equal(await store.rotateRefreshToken(second.digest, afterExpiry, second.expiresAt), false);
      assert.deepEqual(await store.findRefreshToken(afterExpiry.grantId, afterExpiry.digest, now), { status: 'unknown' });
      assert.equal((await store.getGrant(grant.id))?.expiresAt, expiryBefore);

      const otherGrant = makeGrant(now);
      await store.createGrantWithCode(otherGrant, makeCode(otherGrant, now));
      const underOtherGrant = makeRefresh(otherGrant, now + 3000, MINUTE * 500);
      assert.equal(await store.rotateRefreshToken(second.digest, underOtherGrant, now + 3000), false, "a token is rotated only within its grant");
      assert.deepEqual(await store.findRefreshToken(otherGrant.id, underOtherGrant.digest, now + 3000), { status: 'unknown' });

      const unknown = makeRefresh(grant, now, MINUTE * 500);
      assert.equal(await store.rotateRefreshToken(digest(), unknown, now), false);
      assert.deepEqual(await store.findRefreshToken(unknown.grantId, unknown.digest, now), { status: 'unknown' });
      assert.equal((await store.getGrant(grant.id))?.expiresAt, expiryBefore);
      assert.equal((await store.findRefreshToken(second.grantId, second.digest, now + 3000)).status, 'active');
    });

    it('lets exactly one of 50 concurrent rotations of one token win, leaving one new active token', async () => {
      const { store, now, grant } = await openWithCode();
      const first = makeRefresh(grant, now);
      await store.addRefreshToken(first);
      const candidates = Array.from({ length: 50 }, () => makeRefresh(grant, now + 1000));
      const results = await Promise.all(candidates.map((next) => store.rotateRefreshToken(first.digest, next, now + 1000)));
      assert.equal(results.filter(Boolean).length, 1);
      const statuses = await Promise.all(candidates.map(async (next) => (await store.findRefreshToken(next.grantId, next.digest, now + 1000)).status));
      assert.equal(statuses.filter((status) => status === 'active').length, 1);
      assert.equal(statuses.filter((status) => status === 'unknown').length, 49);
      assert.equal(statuses.indexOf('active'), results.indexOf(true));
    });

    it('revokes a grant with its codes and live refresh tokens', async () => {
      const { store, now, grant, code } = await openWithCode();
      assert.equal(await store.consumeCode(code.digest, now), true);
      const token = makeRefresh(grant, now);
      await store.addRefreshToken(token);
      const other = makeGrant(now);
      const otherToken = makeRefresh(other, now);
      await store.createGrantWithCode(other, makeCode(other, now));
      await store.addRefreshToken(otherToken);

      await store.revokeGrant(grant.id);
      assert.equal(await store.getGrant(grant.id), undefined);
      assert.deepEqual(await store.findRefreshToken(token.grantId, token.digest, now), { status: 'unknown' });
      assert.notEqual((await store.findCode(code.digest, now)).status, 'active');
      assert.equal(await store.consumeCode(code.digest, now), false);
      assert.equal(await store.rotateRefreshToken(token.digest, makeRefresh(grant, now), now), false);
      assert.equal((await store.findRefreshToken(otherToken.grantId, otherToken.digest, now)).status, 'active', 'other grants untouched');
      await store.revokeGrant(grant.id);
      await store.revokeGrant('no-such-grant');
    });

    it('never reports a code of a revoked grant as active, even unused', async () => {
      const { store, now, grant, code } = await openWithCode();
      await store.revokeGrant(grant.id);
      assert.notEqual((await store.findCode(code.digest, now)).status, 'active');
      assert.equal(await store.consumeCode(code.digest, now), false);
    });

    it('runs the device flow: poll, approve, redeem once', async () => {
      const store = await open();
      const now = Date.now();
      const record = makeDevice(now);
      await store.createDeviceAuthorization(record);
      assert.deepEqual(await store.findByUserCode(record.userCode, now), record);
      assert.deepEqual(await store.findByDeviceCode(record.deviceCodeDigest), record);
      assert.equal(await store.findByUserCode('NOSUCHCD', now), undefined);
      assert.equal(await store.findByDeviceCode(digest()), undefined);

      await store.recordPoll(record.deviceCodeDigest, now + 5000, false);
      let polled = await store.findByDeviceCode(record.deviceCodeDigest);
      assert.equal(polled?.lastPolledAt, now + 5000);
      assert.equal(polled?.intervalSeconds, 5);
      await store.recordPoll(record.deviceCodeDigest, now + 6000, true);
      polled = await store.findByDeviceCode(record.deviceCodeDigest);
      assert.equal(polled?.lastPolledAt, now + 6000);
      assert.equal(polled?.intervalSeconds, 10);
      await store.recordPoll(digest(), now, true);

      const grant = makeGrant(now, { clientId: 'tv', resources: [] });
      const refresh = makeRefresh(grant, now);
      assert.equal(await store.redeemDeviceCode(record.deviceCodeDigest, grant, refresh, now), false, 'pending');
      assert.equal(await store.getGrant(grant.id), undefined);

      const approval = { approved: true as const, subject: 'alice', claims: { email: 'alice@example.org' }, authTime: now + 7000 };
      assert.equal(await store.decideDeviceAuthorization(record.userCode, approval, now + 7000), true);
      assert.equal(await store.decideDeviceAuthorization(record.userCode, { approved: false }, now + 7000), false);
      const approved = await store.findByDeviceCode(record.deviceCodeDigest);
      assert.equal(approved?.status, 'approved');
      assert.equal(approved?.subject, 'alice');
      assert.deepEqual(approved?.claims, { email: 'alice@example.org' });
      assert.equal(approved?.authTime, now + 7000);

      const results = await Promise.all(
        Array.from({ length: 10 }, (_, index) =>
          store.redeemDeviceCode(record.deviceCodeDigest, index === 0 ? grant : makeGrant(now), index === 0 ? refresh : undefined, now + 8000),
        ),
      );
      assert.equal(results.filter(Boolean).length, 1);
      assert.equal((await store.findByDeviceCode(record.deviceCodeDigest))?.status, 'redeemed');
      const winner = results.indexOf(true);
      if (winner === 0) {
        assert.deepEqual(await store.getGrant(grant.id), { ...grant, expiresAt: refresh.expiresAt + GRANT_EXPIRY_SLACK_MS });
        assert.equal((await store.findRefreshToken(refresh.grantId, refresh.digest, now + 8000)).status, 'active');
      } else {
        assert.equal(await store.getGrant(grant.id), undefined);
      }
    });

    it('denies, and refuses decisions and redemption after expiry', async () => {
      const store = await open();
      const now = Date.now();
      const denied = makeDevice(now);
      await store.createDeviceAuthorization(denied);
      assert.equal(await store.decideDeviceAuthorization(denied.userCode, { approved: false }, now), true);
      assert.equal((await store.findByDeviceCode(denied.deviceCodeDigest))?.status, 'denied');
      const approval = { approved: true as const, subject: 'alice', claims: {}, authTime: now };
      assert.equal(await store.decideDeviceAuthorization(denied.userCode, approval, now), false);
      assert.equal(await store.redeemDeviceCode(denied.deviceCodeDigest, makeGrant(now), undefined, now), false);

      const expiring = makeDevice(now);
      await store.createDeviceAuthorization(expiring);
      assert.equal(await store.findByUserCode(expiring.userCode, expiring.expiresAt), undefined);
      assert.equal(await store.decideDeviceAuthorization(expiring.userCode, approval, expiring.expiresAt), false);
      assert.deepEqual(await store.findByDeviceCode(expiring.deviceCodeDigest), expiring, 'expired records stay readable');

      const late = makeDevice(now);
      await store.createDeviceAuthorization(late);
      assert.equal(await store.decideDeviceAuthorization(late.userCode, approval, now), true);
      const grant = makeGrant(now);
      assert.equal(await store.redeemDeviceCode(late.deviceCodeDigest, grant, undefined, late.expiresAt), false);
      assert.equal(await store.getGrant(grant.id), undefined);
    });

    it('keeps a user code for one live record, and gives it up when that record expired', async () => {
      const store = await open();
      const now = Date.now();
      const first = makeDevice(now);
      await store.createDeviceAuthorization(first);
      await assert.rejects(store.createDeviceAuthorization(makeDevice(now, { userCode: first.userCode })));
      assert.deepEqual(await store.findByUserCode(first.userCode, now), first);
      const later = makeDevice(first.expiresAt, { userCode: first.userCode });
      await store.createDeviceAuthorization(later);
      assert.deepEqual(await store.findByUserCode(first.userCode, first.expiresAt), later);
    });

    it('keeps sessions until they expire or are deleted', async () => {
      const store = await open();
      const now = Date.now();
      const session = { digest: digest(), subject: 'alice', claims: { name: 'Alice' }, authTime: now, expiresAt: now + MINUTE };
      await store.createSession(session);
      assert.deepEqual(await store.findSession(session.digest, now), session);
      assert.equal(await store.findSession(session.digest, session.expiresAt), undefined);
      assert.equal(await store.findSession(digest(), now), undefined);
      await store.deleteSession(session.digest);
      assert.equal(await store.findSession(session.digest, now), undefined);
      await store.deleteSession(session.digest);
    });

    it('keeps transient values by kind and id, and takes each once', async () => {
      const store = await open();
      const now = Date.now();
      const value = { clientId: 'webapp', resources: ['b', 'a'], nested: { n: 1, flag: true, none: null } };
      await store.putTransient('login', 'one', value, now + MINUTE);
      await store.putTransient('other', 'one', 'x', now + MINUTE);
      assert.deepEqual(await store.getTransient('login', 'one', now), value);
      assert.equal(await store.getTransient('login', 'one', now + MINUTE), undefined);
      assert.equal(await store.getTransient('login', 'two', now), undefined);
      await store.putTransient('login', 'one', { replaced: true }, now + 2 * MINUTE);
      assert.deepEqual(await store.getTransient('login', 'one', now + MINUTE), { replaced: true });

      const takes = await Promise.all(Array.from({ length: 20 }, () => store.takeTransient('login', 'one', now)));
      assert.deepEqual(takes.filter((taken) => taken !== undefined), [{ replaced: true }]);
      assert.equal(await store.getTransient('login', 'one', now), undefined);
      assert.equal(await store.getTransient('other', 'one', now), 'x');

      await store.putTransient('login', 'stale', 1, now);
      assert.equal(await store.takeTransient('login', 'stale', now), undefined);
      assert.equal(await store.takeTransient('login', 'stale', now - 1), undefined, 'taken even when expired');
    });

    it('counts attempts in a fixed window per key', async () => {
      const store = await open();
      const now = Date.now();
      assert.equal(await store.peekAttempts('login-user:alice', now), 0);
      assert.equal(await store.countAttempt('login-user:alice', now, MINUTE), 1);
      assert.equal(await store.countAttempt('login-user:alice', now + 1000, MINUTE), 2);
      assert.equal(await store.countAttempt('login-user:bob', now + 1000, MINUTE), 1);
      assert.equal(await store.countAttempt('login-user:alice', now + MINUTE - 1, MINUTE), 3);
      assert.equal(await store.peekAttempts('login-user:alice', now + MINUTE - 1), 3);
      assert.equal(await store.peekAttempts('login-user:alice', now + MINUTE), 0);
      assert.equal(await store.countAttempt('login-user:alice', now + MINUTE, MINUTE), 1, 'a new window');
      assert.equal(await store.peekAttempts('login-user:alice', now + 2 * MINUTE - 1), 1);
      const counts = await Promise.all(Array.from({ length: 20 }, () => store.countAttempt('login-address:203.0.113.9', now, MINUTE)));
      assert.deepEqual([...counts].sort((a, b) => a - b), Array.from({ length: 20 }, (_, index) => index + 1));
      await store.clearAttempts('login-user:alice');
      assert.equal(await store.peekAttempts('login-user:alice', now + MINUTE), 0);
      assert.equal(await store.peekAttempts('login-user:bob', now + 1000), 1);
    });

    it('sweeps expired rows and keeps live ones', async () => {
      const instance = backend();
      const store = await instance.open();
      opened.push(store);
      const now = Date.now();
      const past = now - 20 * MINUTE;

      const oldGrant = makeGrant(past, { expiresAt: now - 1 });
      const oldCode = makeCode(oldGrant, past, { expiresAt: now + MINUTE });
      await store.createGrantWithCode(oldGrant, oldCode);
      const liveGrant = makeGrant(now, { expiresAt: now + MINUTE });
      const expiredCode = makeCode(liveGrant, past, { expiresAt: now - 1 });
      const liveCode = makeCode(liveGrant, now);
      await store.createGrantWithCode(liveGrant, expiredCode);
      await store.createGrantWithCode(makeGrant(now, { id: randomId('g') }), { ...liveCode, grantId: liveGrant.id });
      const expiredToken = makeRefresh(liveGrant, past, MINUTE);
      const liveToken = makeRefresh(liveGrant, now, MINUTE / 2);
      await store.addRefreshToken(expiredToken);
      await store.addRefreshToken(liveToken);

      const longExpiredDevice = makeDevice(past, { expiresAt: now - 11 * MINUTE });
      const recentlyExpiredDevice = makeDevice(past, { expiresAt: now - MINUTE });
      const liveDevice = makeDevice(now);
      for (const record of [longExpiredDevice, recentlyExpiredDevice, liveDevice]) await store.createDeviceAuthorization(record);

      const expiredSession = { digest: digest(), subject: 'a', claims: {}, authTime: past, expiresAt: now - 1 };
      const liveSession = { digest: digest(), subject: 'a', claims: {}, authTime: now, expiresAt: now + MINUTE };
      await store.createSession(expiredSession);
      await store.createSession(liveSession);

      // More than one sweep batch of transient rows.
      await Promise.all(Array.from({ length: 1234 }, (_, index) => store.putTransient('login', `old-${index}`, index, now - 1)));
      await store.putTransient('login', 'live', 'kept', now + MINUTE);
      await store.countAttempt('old', past, MINUTE);
      await store.countAttempt('live', now, MINUTE);

      await store.sweep(now);

      assert.equal(await store.getGrant(oldGrant.id), undefined);
      assert.equal((await store.getGrant(liveGrant.id))?.id, liveGrant.id);
      assert.deepEqual(await store.findCode(oldCode.digest, now), { status: 'unknown' }, "an expired grant's code goes with it");
      assert.equal((await store.findCode(liveCode.digest, now)).status, 'active');
      assert.equal((await store.findRefreshToken(liveToken.grantId, liveToken.digest, now)).status, 'active');
      assert.equal(await store.findByDeviceCode(longExpiredDevice.deviceCodeDigest), undefined);
      assert.ok(await store.findByDeviceCode(recentlyExpiredDevice.deviceCodeDigest), 'kept a while for expired_token');
      assert.ok(await store.findByDeviceCode(liveDevice.deviceCodeDigest));
      assert.ok(await store.findSession(liveSession.digest, now));
      assert.equal(await store.getTransient('login', 'live', now), 'kept');
      assert.equal(await store.peekAttempts('live', now), 1);

      if (instance.rows !== undefined) {
        assert.equal(await instance.rows(store, 'authorization_codes'), 1);
        assert.equal(await instance.rows(store, 'refresh_tokens'), 1);
        assert.equal(await instance.rows(store, 'grants'), 2);
        assert.equal(await instance.rows(store, 'device_authorizations'), 2);
        assert.equal(await instance.rows(store, 'sessions'), 1);
        assert.equal(await instance.rows(store, 'transient'), 1);
        assert.equal(await instance.rows(store, 'attempts'), 1);
      }
      await store.sweep(now);
    });

    it('answers ping, describes itself, and closes', async () => {
      const store = await backend().open();
      await store.ping();
      assert.match(store.description, /^(memory|sqlite |postgres )/);
      assert.doesNotMatch(store.description, /password|secret/i);
      await store.close();
      await store.close();
    });
  });
}

storeSuite('memory', () => ({ open: async () => new MemoryStore() }));

test('openStore with no state block opens the memory store (the config loader gives the warning)', async () => {
  const warnings: string[] = [];
  const store = await openStore({ kind: 'memory' }, { warn: (msg) => warnings.push(msg) });
  assert.equal(store.description, 'memory');
  assert.ok(store instanceof MemoryStore);
  assert.deepEqual(warnings, []);
  await store.close();
});

describe('sqlite', () => {
  let folder = '';
  let files = 0;
  before(async () => {
    folder = await mkdtemp(join(tmpdir(), 'pinpoint-store-'));
  });
  after(async () => {
    await rm(folder, { recursive: true, force: true });
  });
  const nextFile = (): string => join(folder, `nested-${++files}`, 'state', 'pinpoint.db');
  const rows = async (store: Store, table: string): Promise<number> => {
    const file = store.description.replace(/^sqlite /, '');
    const db = new Database(file, { readonly: true });
    try {
      return (db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;
    } finally {
      db.close();
    }
  };

  storeSuite('sqlite', () => ({ open: async () => openStore({ kind: 'sqlite', path: nextFile() }), rows }));

  it('creates the folder and a file of mode 0600 in WAL mode', async () => {
    const file = nextFile();
    const store = await openStore({ kind: 'sqlite', path: file });
    try {
      assert.equal(store.description, `sqlite ${file}`);
      assert.equal((await stat(file)).mode & 0o777, 0o600);
      await store.createSession({ digest: digest(), subject: 'a', claims: {}, authTime: 0, expiresAt: Date.now() + MINUTE });
      assert.equal((await stat(`${file}-wal`)).mode & 0o777, 0o600);
      const db = new Database(file, { readonly: true });
      assert.equal(db.pragma('journal_mode', { simple: true }), 'wal');
      assert.equal((db.prepare('SELECT count(*) AS n FROM schema_migrations').get() as { n: number }).n, MIGRATIONS.length);
      db.close();
    } finally {
      await store.close();
    }
  });

  it('gives a second instance on the same file the same keys and state', async () => {
    const file = nextFile();
    const now = Date.now();
    const first = new SqliteStore(file);
    const keys = makeKeys(now);
    await first.loadOrCreateKeys(keys);
    const grant = makeGrant(now);
    const token = makeRefresh(grant, now);
    await first.createGrantWithCode(grant, makeCode(grant, now));
    await first.addRefreshToken(token);
    const second = new SqliteStore(file);
    assert.deepEqual(byKid(await second.loadOrCreateKeys(makeKeys(now))), byKid(keys));
    assert.equal(await second.rotateRefreshToken(token.digest, makeRefresh(grant, now), now), true);
    assert.equal((await first.findRefreshToken(token.grantId, token.digest, now)).status, 'rotated');
    await first.close();
    await second.close();
    const reopened = new SqliteStore(file);
    assert.deepEqual(byKid(await reopened.loadOrCreateKeys(makeKeys(now))), byKid(keys));
    await reopened.close();
  });

  it('lets processes starting at once on a new file agree on one set of keys', async () => {
    const file = nextFile();
    const module = fileURLToPath(new URL('../src/store/open.ts', import.meta.url));
    const script = `
      const { openStore } = await import(${JSON.stringify(module)});
      const store = await openStore({ kind: 'sqlite', path: ${JSON.stringify(file)} });
      const kid = 'kid-' + process.pid;
      const keys = await store.loadOrCreateKeys([{ kid, alg: 'ES256', privateJwk: '{}', createdAt: 1 }]);
      console.log(JSON.stringify(keys.map((key) => key.kid)));
      await store.close();`;
    const run = (): Promise<string> =>
      new Promise((resolve, reject) => {
        const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
        let out = '';
        let err = '';
        child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
        child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
        child.on('error', reject);
        child.on('close', (status) => (status === 0 ? resolve(out.trim()) : reject(new Error(`child exited ${status}: ${err}`))));
      });
    const outputs = await Promise.all([run(), run(), run(), run()]);
    assert.equal(new Set(outputs).size, 1, outputs.join(' | '));
    assert.equal((JSON.parse(outputs[0] ?? '[]') as string[]).length, 1);
  });

  it('migrates a version 1 database: its grants and refresh tokens are found under the new key', async () => {
    const file = nextFile();
    const now = Date.now();
    const grant = makeGrant(now);
    const token = makeRefresh(grant, now);
    await mkdir(dirname(file), { recursive: true });
    const db = new Database(file);
    for (const statement of versionOneSchema()) db.exec(statement);
    db.prepare('INSERT INTO schema_migrations (version, applied_at) VALUES (1, ?)').run(now);
    db.prepare(`INSERT INTO grants VALUES (${grantParams(grant).map(() => '?').join(', ')})`).run(...grantParams(grant));
    db.prepare("INSERT INTO refresh_tokens (digest, grant_id, issued_at, expires_at, status) VALUES (?, ?, ?, ?, 'active')").run(
      token.digest, grant.id, token.issuedAt, token.expiresAt,
    );
    db.close();
    await assertMigratedRefreshToken(new SqliteStore(file), { grant, token, now }, rows);
    const check = new Database(file, { readonly: true });
    assert.deepEqual((check.prepare('SELECT version FROM schema_migrations ORDER BY version').all() as { version: number }[]).map((row) => row.version), MIGRATIONS.map((migration) => migration.version));
    check.close();
  });

  it('reports a busy database as StoreUnavailableError', async () => {
    const { StoreUnavailableError } = await import('../src/errors.js');
    const file = nextFile();
    const store = new SqliteStore(file);
    const blocker = new Database(file, { timeout: 0 });
    blocker.exec('BEGIN IMMEDIATE');
    try {
      const started = Date.now();
      await assert.rejects(store.putTransient('k', 'i', 1, Date.now() + MINUTE), StoreUnavailableError);
      assert.ok(Date.now() - started >= 4000, 'waited for busy_timeout first');
    } finally {
      blocker.exec('ROLLBACK');
      blocker.close();
    }
    await store.putTransient('k', 'i', 1, Date.now() + MINUTE);
    await store.close();
  });
});

if (POSTGRES_URL === undefined) {
  test('postgres store', (t) => {
    t.skip('PINPOINT_TEST_POSTGRES_URL not set: set it (e.g. postgres://postgres@127.0.0.1:5432/test) to run the PostgreSQL suite');
  });
} else {
  const adminUrl = POSTGRES_URL;
  const databases: string[] = [];
  const urlOf = (database: string): string => {
    const url = new URL(adminUrl);
    url.pathname = `/${database}`;
    return url.toString();
  };
  const admin = async <T>(work: (client: pg.Client) => Promise<T>, url = adminUrl): Promise<T> => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      return await work(client);
    } finally {
      await client.end();
    }
  };
  const createDatabase = async (): Promise<string> => {
    const name = `pinpoint_test_${randomBytes(6).toString('hex')}`;
    await admin((client) => client.query(`CREATE DATABASE ${name}`));
    databases.push(name);
    return name;
  };

  describe('postgres', () => {
    let database = '';
    let schemas = 0;
    before(async () => {
      database = await createDatabase();
    });
    after(async () => {
      for (const name of databases) await admin((client) => client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
    });
    const rows = async (store: Store, table: string): Promise<number> => {
      const schema = (store as PostgresStore).schema;
      return admin(async (client) => Number((await client.query(`SELECT count(*) AS n FROM "${schema}".${table}`)).rows[0].n), urlOf(database));
    };

    storeSuite('postgres', () => ({
      open: async () => openStore({ kind: 'postgres', url: urlOf(database), schema: `suite_${++schemas}` }),
      rows,
    }));

    it('describes itself without the password', async () => {
      const url = new URL(urlOf(database));
      url.password = 's3cret-pw';
      const store = new PostgresStore({ kind: 'postgres', url: url.toString(), schema: 'public' });
      assert.equal(store.description, `postgres ${url.hostname}:${url.port || '5432'}/${database} (schema public)`);
      await store.close();
    });

    it('uses a custom schema, creating it, and nothing in public', async () => {
      const store = await openStore({ kind: 'postgres', url: urlOf(database), schema: 'Pinpoint State', password: 'unused-with-trust' });
      try {
        await store.ping();
        const tables = await admin(
          async (client) =>
            (await client.query("SELECT table_schema, table_name FROM information_schema.tables WHERE table_name = 'grants'")).rows,
          urlOf(database),
        );
        assert.ok(tables.some((row: { table_schema: string }) => row.table_schema === 'Pinpoint State'));
        assert.ok(!tables.some((row: { table_schema: string }) => row.table_schema === 'public'));
      } finally {
        await store.close();
      }
    });

    it('migrates a version 1 schema: its grants and refresh tokens are found under the new key', async () => {
      const now = Date.now();
      const grant = makeGrant(now);
      const token = makeRefresh(grant, now);
      const schema = `v1_${++schemas}`;
      await admin(async (client) => {
        await client.query(`CREATE SCHEMA ${schema}`);
        await client.query(`SET search_path TO ${schema}`);
        for (const statement of versionOneSchema()) await client.query(statement);
        await client.query('INSERT INTO schema_migrations (version, applied_at) VALUES (1, $1)', [now]);
        await client.query(`INSERT INTO grants VALUES (${grantParams(grant).map((_, i) => `$${i + 1}`).join(', ')})`, [...grantParams(grant)]);
        await client.query("INSERT INTO refresh_tokens (digest, grant_id, issued_at, expires_at, status) VALUES ($1, $2, $3, $4, 'active')", [
          token.digest, grant.id, token.issuedAt, token.expiresAt,
        ]);
      }, urlOf(database));
      await assertMigratedRefreshToken(await openStore({ kind: 'postgres', url: urlOf(database), schema }), { grant, token, now }, rows);
    });

    it('opens twice at once on a fresh database: both succeed, one migration run, the same keys', async () => {
      const fresh = await createDatabase();
      const state = { kind: 'postgres' as const, url: urlOf(fresh), schema: 'public' };
      const [first, second] = await Promise.all([openStore(state), openStore(state)]);
      try {
        const now = Date.now();
        const [a, b] = await Promise.all([first.loadOrCreateKeys(makeKeys(now)), second.loadOrCreateKeys(makeKeys(now))]);
        assert.deepEqual(byKid(a), byKid(b));
        assert.equal(a.length, 2);
        const versions = await admin(async (client) => (await client.query('SELECT version FROM public.schema_migrations')).rows, urlOf(fresh));
        assert.deepEqual(
          versions.map((row: { version: number }) => row.version),
          MIGRATIONS.map((migration) => migration.version),
        );
        const third = new PostgresStore(state);
        assert.deepEqual(byKid(await third.loadOrCreateKeys(makeKeys(now))), byKid(a));
        assert.deepEqual(await third.migrate(), []);
        await third.close();
      } finally {
        await first.close();
        await second.close();
      }
    });

    it('applies each migration once when instances migrate at the same moment', async () => {
      const clients = await Promise.all(
        Array.from({ length: 4 }, async () => {
          const client = new pg.Client({ connectionString: urlOf(database) });
          await client.connect();
          return client;
        }),
      );
      try {
        const applied = await Promise.all(clients.map((client) => migratePostgres(client, 'racing')));
        assert.deepEqual(applied.flat().sort(), MIGRATIONS.map((migration) => migration.version).sort());
      } finally {
        for (const client of clients) await client.end();
      }
    });

    it('lets one rotation win across two instances sharing the database', async () => {
      const state = { kind: 'postgres' as const, url: urlOf(database), schema: 'shared' };
      const [first, second] = await Promise.all([openStore(state), openStore(state)]);
      try {
        const now = Date.now();
        for (let round = 0; round < 5; round += 1) {
          const grant = makeGrant(now);
          await first.createGrantWithCode(grant, makeCode(grant, now));
          const token = makeRefresh(grant, now);
          await first.addRefreshToken(token);
          const results = await Promise.all(
            Array.from({ length: 40 }, (_, index) => (index % 2 === 0 ? first : second).rotateRefreshToken(token.digest, makeRefresh(grant, now), now)),
          );
          assert.equal(results.filter(Boolean).length, 1);
          const code = makeCode(grant, now);
          await second.createGrantWithCode(makeGrant(now, { id: randomId('g') }), { ...code, grantId: grant.id });
          const consumed = await Promise.all(Array.from({ length: 20 }, (_, index) => (index % 2 === 0 ? first : second).consumeCode(code.digest, now)));
          assert.equal(consumed.filter(Boolean).length, 1);
        }
      } finally {
        await first.close();
        await second.close();
      }
    });

    it('survives a connection killed by the server and serves again', async () => {
      const store = await openStore({ kind: 'postgres', url: urlOf(database), schema: 'killed' });
      try {
        await Promise.all(Array.from({ length: 5 }, () => store.ping()));
        await admin(
          (client) =>
            client.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'pinpoint' AND datname = $1", [database]),
        );
        await new Promise((resolve) => setTimeout(resolve, 200));
        await store.ping();
        assert.equal(await store.getGrant('none'), undefined);
      } finally {
        await store.close();
      }
    });
  });
}

/**
 * A PostgreSQL store whose server is unreachable rejects quickly with StoreUnavailableError (so routes
 * answer 503, DESIGN.md §7) and serves again by itself once the server is back.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer, type AddressInfo } from 'node:net';
import { describe, it, test } from 'node:test';
import pg from 'pg';
import { StoreUnavailableError } from '../src/store/unavailable.js';
import { openStore } from '../src/store/open.js';
import { PostgresStore } from '../src/store/postgres.js';
import { startRelay } from './helpers/relay.js';

const POSTGRES_URL = process.env['PINPOINT_TEST_POSTGRES_URL'];
const PASSWORD = 'never-in-errors-7f3a';

/** Checks that a rejection is StoreUnavailableError and carries no password anywhere in its text. */
function unavailableWithoutPassword(error: unknown): boolean {
  assert.ok(error instanceof StoreUnavailableError, `expected StoreUnavailableError, got ${String(error)}`);
  const text = `${error.message} ${error.stack ?? ''} ${String((error as Error & { cause?: unknown }).cause)}`;
  assert.ok(!text.includes(PASSWORD));
  return true;
}

describe('postgres outage', () => {
  it('rejects openStore quickly when the port refuses connections', async () => {
    const started = Date.now();
    await assert.rejects(
      openStore({ kind: 'postgres', url: `postgres://pinpoint:${PASSWORD}@127.0.0.1:1/pinpoint`, schema: 'public' }),
      unavailableWithoutPassword,
    );
    assert.ok(Date.now() - started < 2500, `took ${Date.now() - started} ms`);
  });

  it('rejects every call, ping included, with StoreUnavailableError', async () => {
    const store = new PostgresStore({ kind: 'postgres', url: 'postgres://pinpoint@127.0.0.1:1/pinpoint', schema: 'public', password: PASSWORD });
    try {
      const now = Date.now();
      const started = Date.now();
      await assert.rejects(store.ping(), unavailableWithoutPassword);
      await assert.rejects(store.findCode('c', now), unavailableWithoutPassword);
      await assert.rejects(store.findRefreshToken('g', 'd', now), unavailableWithoutPassword);
      await assert.rejects(store.rotateRefreshToken('d', { digest: 'e', grantId: 'g', issuedAt: now, expiresAt: now + 1 }, now), unavailableWithoutPassword);
      await assert.rejects(store.loadOrCreateKeys([]), unavailableWithoutPassword);
      await assert.rejects(store.sweep(now), unavailableWithoutPassword);
      assert.ok(Date.now() - started < 2500, `took ${Date.now() - started} ms`);
      assert.ok(!store.description.includes(PASSWORD));
    } finally {
      await store.close();
    }
  });

  it('gives up within the connect timeout when the server does not answer at all', async () => {
    // A listener that accepts TCP but never speaks the protocol, like a server hung or behind a dead route.
    const silent = createServer(() => undefined);
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const { port } = silent.address() as AddressInfo;
    const store = new PostgresStore({ kind: 'postgres', url: `postgres://pinpoint@127.0.0.1:${port}/pinpoint`, schema: 'public' });
    try {
      const started = Date.now();
      await assert.rejects(store.ping(), unavailableWithoutPassword);
      const elapsed = Date.now() - started;
      assert.ok(elapsed >= 1500 && elapsed < 4000, `took ${elapsed} ms`);
    } finally {
      await store.close();
      silent.close();
    }
  });
});

if (POSTGRES_URL === undefined) {
  test('postgres outage and recovery', (t) => {
    t.skip('PINPOINT_TEST_POSTGRES_URL not set: set it (e.g. postgres://postgres@127.0.0.1:5432/test) to run the recovery test');
  });
} else {
  const adminUrl = POSTGRES_URL;
  test('postgres outage and recovery: 503-worthy errors while down, serving again once back, no crash', async () => {
    const relay = await startRelay(adminUrl);
    const schema = `outage_${randomBytes(6).toString('hex')}`;
    const warnings: string[] = [];
    const store = await openStore({ kind: 'postgres', url: relay.urlFor(adminUrl), schema }, { warn: (msg) => warnings.push(msg) });
    try {
      await Promise.all(Array.from({ length: 5 }, () => store.ping()));
      const now = Date.now();
      await store.saveSubjectClaims('before', { name: 'Before' }, now + 60_000);

      await relay.stop();
      const started = Date.now();
      await assert.rejects(store.ping(), StoreUnavailableError);
      await assert.rejects(store.findSubjectClaims('before', now), StoreUnavailableError);
      await assert.rejects(store.saveSubjectClaims('during', {}, now + 60_000), StoreUnavailableError);
      await assert.rejects(store.rotateRefreshToken('d', { digest: 'e', grantId: 'g', issuedAt: now, expiresAt: now + 1 }, now), StoreUnavailableError);
      assert.ok(Date.now() - started < 3000, `took ${Date.now() - started} ms`);
      assert.ok(warnings.length > 0, 'idle connections lost were reported, not thrown');

      await relay.start();
      await store.ping();
      assert.deepEqual(await store.findSubjectClaims('before', now), { name: 'Before' });
      const state = { state: 'after', loginId: 'l', upstream: 'u', codeVerifier: 'v', nonce: 'n', browser: 'b', expiresAt: now + 60_000 };
      await store.saveFederationState(state);
      assert.deepEqual(await store.takeFederationState('after', now), state);
    } finally {
      await store.close();
      await relay.stop();
      const admin = new pg.Client({ connectionString: adminUrl });
      await admin.connect();
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await admin.end();
    }
  });
}

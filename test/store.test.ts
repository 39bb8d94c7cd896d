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
import { after, afterEach, before, describe, it, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import pg from 'pg';
import { POSTGRES, SQLITE } from '../src/store/dialect.js';
import { MemoryStore } from '../src/store/memory.js';
import { MIGRATIONS, migratePostgres } from '../src/store/migrations.js';
import { codeParams, grantParams, refreshTokenParams, sessionParams } from '../src/store/rows.js';
import { GRANT_EXPIRY_SLACK_MS, MAX_SESSIONS_PER_SUBJECT } from '../src/store/rules.js';
import { REVOKE_BATCH, SWEEP_BATCH } from '../src/store/sql.js';
import { openStore } from '../src/store/open.js';
import { PostgresStore } from '../src/store/postgres.js';
import { SqliteStore } from '../src/store/sqlite.js';
import type {
  AuthorizationCodeRecord,
  ConsentRecord,
  DeviceAuthorizationRecord,
  FederationStateRecord,
  Grant,
  GrantFilter,
  KeyEvent,
  LoginRequestRecord,
  RefreshTokenRecord,
  RegisteredClientRecord,
  ReplayKind,
  SessionRecord,
  Store,
  StoredKey,
  UsedOnceEntry,
} from '../src/store/types.js';
import { postgresInspector, schemaAt, sqliteInspector, type StoreInspector } from './helpers/store-inspect.js';

const POSTGRES_URL = process.env['PINPOINT_TEST_POSTGRES_URL'];
const MINUTE = 60_000;
/** An access token's lifetime: what the token endpoint passes consumeCode as grantUntil. */
const ACCESS_TOKEN_MS = 5 * MINUTE;

const digest = (): string => createHash('sha256').update(randomBytes(16)).digest('hex');
const randomId = (prefix: string): string => `${prefix}-${randomBytes(8).toString('hex')}`;

/**
 * `make` for each of `count`, at most 25 at a time: bulk set-up as a busy server's pool sees it, not a thousand writes
 * queued for ten PostgreSQL connections (on a loaded machine the last ones waited past the pool's connect timeout).
 */
async function inBatches<T>(count: number, make: (index: number) => Promise<T>): Promise<T[]> {
  const made: T[] = [];
  for (let start = 0; start < count; start += 25) {
    made.push(...(await Promise.all(Array.from({ length: Math.min(25, count - start) }, (_, offset) => make(start + offset)))));
  }
  return made;
}

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

const makeRefresh = (grant: Grant, now: number, lifetimeMs = 60 * MINUTE): RefreshTokenRecord => ({
  digest: digest(),
  grantId: grant.id,
  issuedAt: now,
  expiresAt: now + lifetimeMs,
});

const DAY = 24 * 60 * MINUTE;

/** A client as /register stores it; without a secret unless `overrides` give one. */
const makeRegisteredClient = (now: number, overrides: Partial<RegisteredClientRecord> = {}): RegisteredClientRecord => ({
  clientId: randomId('dyn'),
  metadata: {
    redirect_uris: ['http://127.0.0.1/callback', 'cursor://anysphere.cursor-mcp/oauth/callback'],
    token_endpoint_auth_method: 'none',
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    client_name: 'Claude Code (pinpoint)',
  },
  createdAt: now,
  expiresAt: now + DAY,
  ...overrides,
});

const CONSENT_ORIGIN = 'https://app.example.org';

const makeConsent = (subject: string, clientId: string, now: number, overrides: Partial<ConsentRecord> = {}): ConsentRecord => ({
  subject,
  clientId,
  redirectOrigin: CONSENT_ORIGIN,
  scope: ['openid', 'mcp:tools', 'offline_access'],
  resources: ['https://mcp.example.org/mcp', 'https://api.example.org/'],
  wholeAudience: false,
  grantedAt: now,
  ...overrides,
});

/**
 * `parallel` refreshes of `token` at once, spread over `stores`, as the token endpoint makes them for a client with a
 * reuse grace: rotate, and when another rotated first, add a sibling (DESIGN.md §6). Returns each one's new token and outcome.
 */
async function refreshRace(stores: readonly Store[], token: RefreshTokenRecord, now: number, parallel = 10) {
  const next = Array.from({ length: parallel }, (): RefreshTokenRecord => ({ digest: digest(), grantId: token.grantId, issuedAt: now, expiresAt: now + 60 * MINUTE }));
  const outcomes = await Promise.all(
    next.map(async (record, index) => {
      const store = stores[index % stores.length] as Store;
      if (await store.rotateRefreshToken(token.digest, record, now)) return 'rotated';
      return (await store.addRefreshToken(record, now)) ? 'added' : 'refused';
    }),
  );
  return { next, outcomes };
}

/** A one-time credential of `kind` under a new id, recorded until `expiresAt`. */
const usedOnce = (kind: ReplayKind, expiresAt: number): UsedOnceEntry => ({ kind, id: digest(), expiresAt });

/**
 * `parallel` batches at once, spread over `stores`, as requests replaying one DPoP proof with fresh client assertions
 * make them: exactly one wins, the others are told the proof was used, and only the winner's assertion is recorded.
 */
async function assertOneBatchWins(stores: readonly Store[], now: number, parallel = 20): Promise<void> {
  const shared = usedOnce('dpop', now + MINUTE);
  const assertions = Array.from({ length: parallel }, () => usedOnce('client_assertion', now + MINUTE));
  const storeOf = (index: number): Store => stores[index % stores.length] as Store;
  const outcomes = await Promise.all(assertions.map((entry, index) => storeOf(index).markAllUsedOnce([entry, shared], now)));
  assert.equal(outcomes.filter((outcome) => outcome.ok).length, 1, JSON.stringify(outcomes));
  for (const outcome of outcomes) if (!outcome.ok) assert.deepEqual(outcome, { ok: false, used: 'dpop' });
  // Asked of another instance than the one that ran the batch, where there are several.
  const again = await Promise.all(assertions.map((entry, index) => storeOf(index + 1).markAllUsedOnce([entry], now)));
  assert.deepEqual(again.map((outcome) => outcome.ok), outcomes.map((outcome) => !outcome.ok), "only the winner's assertion was recorded");
}

/** One rotation, the others siblings, every new token active and the presented one rotated at `now`; the grant lives. */
async function assertRaceSettled(store: Store, grant: Grant, token: RefreshTokenRecord, race: Awaited<ReturnType<typeof refreshRace>>, now: number): Promise<void> {
  const { next, outcomes } = race;
  assert.equal(outcomes.filter((outcome) => outcome === 'rotated').length, 1, outcomes.join(' '));
  assert.equal(outcomes.filter((outcome) => outcome === 'added').length, next.length - 1, outcomes.join(' '));
  for (const record of next) assert.equal((await store.findRefreshToken(grant.id, record.digest, now)).status, 'active');
  assert.deepEqual(await store.findRefreshToken(grant.id, token.digest, now), { status: 'rotated', grantId: grant.id, clientId: grant.clientId, rotatedAt: now });
  assert.ok(await store.findGrant(grant.id, now), 'the grant survives');
}

/** The grant `id` is not stored: a grant of that id can be stored now (and is removed again). Works on every store. */
async function assertNoGrant(store: Store, grant: Grant, now: number): Promise<void> {
  await store.createGrantWithCode(grant, makeCode(grant, now));
  await store.revokeGrant(grant.id);
}

/** A version 1 database (Pinpoint 0.1) holding `grant` and a refresh token of it, in the given placeholders' form. */
const versionOneRows = (grant: Grant, token: RefreshTokenRecord, placeholder: (index: number) => string) => [
  { text: `INSERT INTO grants VALUES (${grantParams(grant).map((_, i) => placeholder(i + 1)).join(', ')})`, values: grantParams(grant) },
  {
    text: `INSERT INTO refresh_tokens (digest, grant_id, issued_at, expires_at, status) VALUES (${[1, 2, 3, 4].map(placeholder).join(', ')}, 'active')`,
    values: [token.digest, grant.id, token.issuedAt, token.expiresAt],
  },
];

/** After migration 2 the grant is still there and its old refresh token gone; the grant takes new tokens. Closes `store`. */
async function assertOldTokensDropped(
  store: Store,
  inspect: StoreInspector,
  { grant, token, now }: { grant: Grant; token: RefreshTokenRecord; now: number },
): Promise<void> {
  try {
    assert.deepEqual(await inspect.grant(grant.id), grant);
    assert.deepEqual(await store.findRefreshToken(grant.id, token.digest, now), { status: 'unknown' });
    assert.equal(await inspect.rows('refresh_tokens'), 0, 'the old tokens are gone, not merely unreachable');
    const code = makeCode(grant, now);
    await store.createGrantWithCode(makeGrant(now), { ...code, grantId: grant.id });
    const fresh = makeRefresh(grant, now);
    assert.equal(await store.consumeCode(code.digest, now, now + ACCESS_TOKEN_MS, fresh), true);
    assert.equal((await store.findRefreshToken(grant.id, fresh.digest, now)).status, 'active');
  } finally {
    await store.close();
  }
}

/** What a version 2 database holds in `transient` (kind, id, value, expires_at): a login request, an upstream sign-in, subject claims. */
function transientRows(now: number) {
  const federation: FederationStateRecord = {
    state: randomId('state'),
    loginId: randomId('login'),
    upstream: 'corp',
    codeVerifier: randomId('verifier'),
    nonce: randomId('nonce'),
    browser: digest(),
    expiresAt: now + 10 * MINUTE,
  };
  const { state, expiresAt, ...federationValue } = federation;
  const claims = { email: 'carol@corp.example', name: 'Carol' };
  const rows: [string, string, string, number][] = [
    ['login', randomId('login'), JSON.stringify({ clientId: 'webapp', redirectUri: REDIRECT }), now + 15 * MINUTE],
    ['federation', state, JSON.stringify(federationValue), expiresAt],
    ['subject-claims', 'corp:carol', JSON.stringify(claims), now + 30 * 24 * 60 * MINUTE],
  ];
  return { rows, federation, claims, subject: 'corp:carol' };
}

/** After migration 3, the subject claims and the upstream sign-in are found through their own stores; closes `store`. */
async function assertTransientKept(store: Store, inspect: StoreInspector, kept: ReturnType<typeof transientRows>, now: number): Promise<void> {
  try {
    assert.deepEqual(await store.findSubjectClaims(kept.subject, now), kept.claims);
    assert.deepEqual(await store.takeFederationState(kept.federation.state, now), kept.federation);
    assert.equal(await inspect.rows('login_requests'), 0, 'login requests of the old shape are dropped');
  } finally {
    await store.close();
  }
}

/** A version 3 database (Pinpoint 0.3) holding a key, a grant with a code and a refresh token, and a session, in the given placeholders' form. */
function versionThreeRows(now: number, placeholder: (index: number) => string) {
  const key = makeKeys(now - MINUTE)[0] as StoredKey;
  const grant = makeGrant(now - MINUTE, { expiresAt: now + 60 * MINUTE });
  const code = makeCode(grant, now);
  const token = makeRefresh(grant, now - MINUTE);
  const session: SessionRecord = { digest: digest(), subject: grant.subject, claims: { name: 'Alice' }, authTime: now, expiresAt: now + MINUTE };
  const insert = (table: string, columns: string, values: readonly unknown[]) => ({
    text: `INSERT INTO ${table} (${columns}) VALUES (${values.map((_, i) => placeholder(i + 1)).join(', ')})`,
    values,
  });
  const rows = [
    insert('keys', 'kid, alg, private_jwk, created_at', [key.kid, key.alg, key.privateJwk, key.createdAt]),
    insert('grants', 'id, client_id, subject, scope, resources, claims, auth_time, created_at, expires_at', grantParams(grant)),
    insert('authorization_codes', 'digest, grant_id, client_id, redirect_uri, code_challenge, nonce, expires_at', codeParams(code).slice(0, 7)),
    insert('refresh_tokens', 'grant_id, digest, issued_at, expires_at', refreshTokenParams(token)),
    insert('sessions', 'digest, subject, claims, auth_time, expires_at', sessionParams(session)),
  ];
  return { rows, key, grant, code, token, session, now };
}

/** After migration 4 the old state is all there and the new methods work on it; closes `store`. */
async function assertVersionThreeKept(store: Store, inspect: StoreInspector, kept: ReturnType<typeof versionThreeRows>): Promise<void> {
  const { key, grant, code, token, session, now } = kept;
  try {
    assert.deepEqual(await store.listKeys(), [key]);
    assert.ok(!('retiredAt' in ((await store.listKeys())[0] as StoredKey)), 'an old key is not retired');
    assert.deepEqual(await store.findGrant(grant.id, now), grant);
    assert.deepEqual(await store.findCode(code.digest, now), { status: 'active', code, grant });
    assert.deepEqual(await store.findRefreshToken(grant.id, token.digest, now), { status: 'active', token, grant });
    assert.deepEqual(await store.findSession(session.digest, now), session);
    assert.deepEqual(await store.listGrants({ subject: grant.subject }, now), [{ grant, lastRefreshAt: token.issuedAt }]);

    assert.equal(await store.retireKey(key.kid, now), true);
    assert.deepEqual(await store.listKeys(), [{ ...key, retiredAt: now }]);
    await store.revokeAccessToken('jti-1', now + MINUTE);
    assert.equal(await store.isAccessTokenRevoked('jti-1', now), true);
    assert.equal(await store.deleteSessionsOf(session.subject), 1);
    assert.equal(await store.revokeGrants({ clientId: grant.clientId }), 1);
    assert.deepEqual(await store.findRefreshToken(grant.id, token.digest, now), { status: 'unknown' });

    const expected: [string, string][] = [
      ['grants', 'grants_subject'],
      ['grants', 'grants_client_id'],
      ['sessions', 'sessions_subject'],
      ['revoked_access_tokens', 'revoked_access_tokens_expires_at'],
    ];
    for (const [table, index] of expected) assert.ok((await inspect.indexes(table)).includes(index), `${table} has ${index}`);
  } finally {
    await store.close();
  }
}

/** A version 4 database (before the reuse grace and dynamic clients): a grant with a used code, a rotated and an active refresh token. */
function versionFourRows(now: number, placeholder: (index: number) => string) {
  const grant = makeGrant(now - MINUTE, { expiresAt: now + 60 * MINUTE });
  const code = makeCode(grant, now - MINUTE);
  const rotated = makeRefresh(grant, now - MINUTE);
  const token = makeRefresh(grant, now - 30_000);
  const insert = (table: string, columns: string, values: readonly unknown[]) => ({
    text: `INSERT INTO ${table} (${columns}) VALUES (${values.map((_, i) => placeholder(i + 1)).join(', ')})`,
    values,
  });
  const rows = [
    insert('grants', 'id, client_id, subject, scope, resources, claims, auth_time, created_at, expires_at', grantParams(grant)),
    insert('authorization_codes', 'digest, grant_id, client_id, redirect_uri, code_challenge, nonce, expires_at, used', [...codeParams(code).slice(0, 7), 1]),
    insert('refresh_tokens', 'grant_id, digest, issued_at, expires_at, status', [...refreshTokenParams(rotated), 'rotated']),
    insert('refresh_tokens', 'grant_id, digest, issued_at, expires_at, status', [...refreshTokenParams(token), 'active']),
  ];
  return { rows, grant, code, rotated, token, now };
}

/**
 * After migration 5 the old state is there, a token rotated before it reads as rotated long ago (rotatedAt 0: no
 * reuse grace), and the new tables work; closes `store`.
 */
async function assertVersionFourKept(store: Store, inspect: StoreInspector, kept: ReturnType<typeof versionFourRows>): Promise<void> {
  const { grant, code, rotated, token, now } = kept;
  try {
    assert.deepEqual(await store.findGrant(grant.id, now), grant);
    assert.deepEqual(await store.findCode(code.digest, now), { status: 'used', code });
    assert.deepEqual(await store.findRefreshToken(grant.id, rotated.digest, now), { status: 'rotated', grantId: grant.id, clientId: grant.clientId, rotatedAt: 0 });
    assert.deepEqual(await store.findRefreshToken(grant.id, token.digest, now), { status: 'active', token, grant });

    const next = makeRefresh(grant, now);
    assert.equal(await store.rotateRefreshToken(token.digest, next, now), true);
    assert.deepEqual(await store.findRefreshToken(grant.id, token.digest, now), { status: 'rotated', grantId: grant.id, clientId: grant.clientId, rotatedAt: now });
    const sibling = makeRefresh(grant, now);
    assert.equal(await store.addRefreshToken(sibling, now), true);
    assert.equal((await store.findRefreshToken(grant.id, sibling.digest, now)).status, 'active');

    const client = makeRegisteredClient(now, { secretDigest: digest() });
    await store.saveRegisteredClient(client);
    assert.deepEqual(await store.findRegisteredClient(client.clientId), client);
    const consent = makeConsent(grant.subject, client.clientId, now);
    await store.saveConsent(consent);
    assert.deepEqual(await store.findConsent(grant.subject, client.clientId, CONSENT_ORIGIN), consent);

    assert.ok((await inspect.indexes('registered_clients')).includes('registered_clients_expires_at'));
    assert.ok((await inspect.indexes('consents')).includes('consents_client_id'));
  } finally {
    await store.close();
  }
}

const REDIRECT = 'https://app.example.org/callback';

const makeLoginRequest = (now: number, overrides: Partial<LoginRequestRecord> = {}): LoginRequestRecord => ({
  id: randomId('login'),
  purpose: {
    kind: 'authorize',
    authorization: {
      clientId: 'webapp',
      redirectUri: REDIRECT,
      state: 'xyz',
      codeChallenge: 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM',
      scope: ['openid', 'profile'],
      resources: ['https://b.example.org', 'https://a.example.org'],
      prompt: 'login',
      maxAge: 300,
    },
  },
  browser: digest(),
  createdAt: now,
  expiresAt: now + 15 * MINUTE,
  ...overrides,
});

const makeFederationState = (now: number, overrides: Partial<FederationStateRecord> = {}): FederationStateRecord => ({
  state: randomId('state'),
  loginId: randomId('login'),
  upstream: 'corp',
  codeVerifier: randomId('verifier'),
  nonce: randomId('nonce'),
  browser: digest(),
  expiresAt: now + 10 * MINUTE,
  ...overrides,
});

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
const byEvent = (events: readonly KeyEvent[]): KeyEvent[] => [...events].sort((a, b) => `${a.kid} ${a.event}`.localeCompare(`${b.kid} ${b.event}`));

interface Backend {
  /** A store with empty state (its own file, schema or Maps), and for SQL stores a way to read its rows from outside. */
  open(): Promise<{ store: Store; inspect?: StoreInspector }>;
}

/** The shared contract every implementation must meet. */
function storeSuite(name: string, backend: () => Backend): void {
  describe(`${name} store`, () => {
    const opened: Store[] = [];
    const open = async (): Promise<Store> => {
      const { store } = await backend().open();
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
    // Each test's stores close when it ends, so a PostgreSQL run holds a few pools at a time, not one per test.
    afterEach(async () => {
      for (const store of opened.splice(0)) await store.close();
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
      assert.deepEqual(await store.findCode(code.digest, now), { status: 'active', code, grant });

      const bare = makeGrant(now, { resources: [], claims: {} });
      const bareCode = makeCode(bare, now, { nonce: undefined });
      delete (bareCode as { nonce?: string }).nonce;
      await store.createGrantWithCode(bare, bareCode);
      const lookup = await store.findCode(bareCode.digest, now);
      assert.deepEqual(lookup, { status: 'active', code: bareCode, grant: bare });
      assert.ok(lookup.status === 'active' && !('nonce' in lookup.code));
      assert.ok(lookup.status === 'active' && !('boundKey' in lookup.code), 'a code of a request without dpop_jkt is bound to no key');
    });

    it('keeps the DPoP key a code is bound to (RFC 9449 §10), also once the code is used', async () => {
      const { store, now, grant } = await openWithCode();
      const bound = { ...makeCode(grant, now), boundKey: 'Nl9Nc2nIB6G9-fLu2yaPyEBoT5s9KpYWv4i8gG1qI5c' };
      const other = makeGrant(now);
      await store.createGrantWithCode(other, { ...bound, grantId: other.id });
      assert.deepEqual(await store.findCode(bound.digest, now), { status: 'active', code: { ...bound, grantId: other.id }, grant: other });
      assert.ok(await store.consumeCode(bound.digest, now, now + MINUTE));
      assert.deepEqual(await store.findCode(bound.digest, now), { status: 'used', code: { ...bound, grantId: other.id } });
    });

    it('writes neither grant nor code when the code cannot be stored', async () => {
      const store = await open();
      const now = Date.now();
      const first = makeGrant(now);
      const code = makeCode(first, now);
      await store.createGrantWithCode(first, code);
      const second = makeGrant(now);
      await assert.rejects(store.createGrantWithCode(second, { ...code, grantId: second.id }));
      await assertNoGrant(store, second, now);
    });

    it('uses a code once: used after consumption, unknown when expired unused or unknown', async () => {
      const { store, now, grant, code } = await openWithCode();
      assert.equal(await store.consumeCode(code.digest, now, now + ACCESS_TOKEN_MS), true);
      assert.equal(await store.consumeCode(code.digest, now, now + ACCESS_TOKEN_MS), false);
      assert.deepEqual(await store.findCode(code.digest, now), { status: 'used', code });
      assert.deepEqual(await store.findCode(digest(), now), { status: 'unknown' });
      assert.equal(await store.consumeCode(digest(), now, now + ACCESS_TOKEN_MS), false);

      const late = makeCode(grant, now);
      await store.createGrantWithCode(makeGrant(now, { id: randomId('g') }), { ...late, grantId: grant.id });
      assert.deepEqual(await store.findCode(late.digest, late.expiresAt + 1), { status: 'unknown' });
      assert.equal(await store.consumeCode(late.digest, late.expiresAt + 1, late.expiresAt + 1 + ACCESS_TOKEN_MS), false);
    });

    it('reports a used code as used after it expired, for as long as its grant lives (DESIGN.md §6)', async () => {
      const { store, now, grant, code } = await openWithCode();
      const refresh = makeRefresh(grant, now);
      assert.equal(await store.consumeCode(code.digest, now, now + ACCESS_TOKEN_MS, refresh), true);
      const later = code.expiresAt + 10 * MINUTE;
      assert.deepEqual(await store.findCode(code.digest, later), { status: 'used', code });
      await store.sweep(later);
      assert.deepEqual(await store.findCode(code.digest, later), { status: 'used', code }, 'the sweep keeps a used code of a live grant');
      await store.revokeGrant(grant.id);
      assert.deepEqual(await store.findCode(code.digest, later), { status: 'unknown' }, 'gone with its grant');
    });

    it('lets exactly one of 50 concurrent consumeCode calls win', async () => {
      const { store, now, code } = await openWithCode();
      const results = await Promise.all(Array.from({ length: 50 }, () => store.consumeCode(code.digest, now, now + ACCESS_TOKEN_MS)));
      assert.equal(results.filter(Boolean).length, 1);
    });

    it('consumes a code and stores its first refresh token in one transaction; once only', async () => {
      const { store, now, grant, code } = await openWithCode();
      const candidates = Array.from({ length: 20 }, () => makeRefresh(grant, now));
      const results = await Promise.all(candidates.map((refresh) => store.consumeCode(code.digest, now, now + ACCESS_TOKEN_MS, refresh)));
      assert.equal(results.filter(Boolean).length, 1);
      const statuses = await Promise.all(candidates.map(async (refresh) => (await store.findRefreshToken(grant.id, refresh.digest, now)).status));
      assert.deepEqual(
        statuses.map((status, i) => [status, results[i]]).filter(([status]) => status === 'active'),
        [['active', true]],
        "only the winner's refresh token was stored",
      );
      const winner = candidates[results.indexOf(true)] as RefreshTokenRecord;
      const lookup = await store.findRefreshToken(grant.id, winner.digest, now);
      assert.equal(lookup.status === 'active' && lookup.grant.expiresAt, winner.expiresAt + GRANT_EXPIRY_SLACK_MS, 'the grant outlives its first token');
      assert.deepEqual(await store.findCode(code.digest, now), { status: 'used', code });

      const expired = makeCode(grant, now);
      await store.createGrantWithCode(makeGrant(now), { ...expired, grantId: grant.id });
      const late = makeRefresh(grant, expired.expiresAt);
      assert.equal(await store.consumeCode(expired.digest, expired.expiresAt, expired.expiresAt + ACCESS_TOKEN_MS, late), false);
      assert.deepEqual(await store.findRefreshToken(grant.id, late.digest, expired.expiresAt), { status: 'unknown' }, 'nothing written');
    });

    it('extends the grant to outlive each new refresh token by the slack, never shortening it', async () => {
      const { store, now, grant, code } = await openWithCode();
      const expiryOf = async (token: RefreshTokenRecord, at: number): Promise<number | undefined> => {
        const lookup = await store.findRefreshToken(token.grantId, token.digest, at);
        return lookup.status === 'active' ? lookup.grant.expiresAt : undefined;
      };
      const token = makeRefresh(grant, now + 1000);
      assert.equal(await store.consumeCode(code.digest, now, now + ACCESS_TOKEN_MS, token), true);
      const extended = token.expiresAt + GRANT_EXPIRY_SLACK_MS;
      assert.deepEqual(await store.findRefreshToken(token.grantId, token.digest, now), { status: 'active', token, grant: { ...grant, expiresAt: extended } });
      assert.deepEqual(await store.findRefreshToken(token.grantId, token.digest, token.expiresAt), { status: 'unknown' });
      assert.deepEqual(await store.findRefreshToken(grant.id, digest(), now), { status: 'unknown' });
      assert.deepEqual(await store.findRefreshToken(randomId('grant'), token.digest, now), { status: 'unknown' }, 'found only under its grant');

      const short = makeRefresh(grant, now + 2000, 1000);
      assert.equal(await store.rotateRefreshToken(token.digest, short, now + 2000), true);
      assert.equal(await expiryOf(short, now + 2000), extended, 'never shortened');
      const withinSlack = makeRefresh(grant, now + GRANT_EXPIRY_SLACK_MS / 2);
      assert.equal(await store.rotateRefreshToken(short.digest, withinSlack, now + 2500), true);
      assert.equal(await expiryOf(withinSlack, now + 2500), extended, 'a token expiring within the slack leaves the grant row alone');
      const beyond = makeRefresh(grant, now + GRANT_EXPIRY_SLACK_MS * 2);
      assert.equal(await store.rotateRefreshToken(withinSlack.digest, beyond, now + 3000), true);
      assert.equal(await expiryOf(beyond, now + 3000), beyond.expiresAt + GRANT_EXPIRY_SLACK_MS);

      // With the grant's expiry as the caller read it: the same outcomes (the row's statement is skipped when it already outlives the token).
      const known = (await expiryOf(beyond, now + 3500)) as number;
      const inside = makeRefresh(grant, now + 4000);
      assert.equal(await store.rotateRefreshToken(beyond.digest, inside, now + 4000, known), true);
      assert.equal(await expiryOf(inside, now + 4000), known, 'a grant that outlives the token is left alone');
      const further = makeRefresh(grant, now + GRANT_EXPIRY_SLACK_MS * 4);
      assert.equal(await store.rotateRefreshToken(inside.digest, further, now + 4500, known), true);
      assert.equal(await expiryOf(further, now + 4500), further.expiresAt + GRANT_EXPIRY_SLACK_MS, 'one that does not is extended');
      const stale = makeRefresh(grant, now + 5000);
      assert.equal(await store.rotateRefreshToken(further.digest, stale, now + 5000, known), true);
      assert.equal(await expiryOf(stale, now + 5000), further.expiresAt + GRANT_EXPIRY_SLACK_MS, 'an older reading never shortens it');
    });

    it('rotates a refresh token: the old one reads rotated, the new one active, the grant outliving both', async () => {
      const { store, now, grant, code } = await openWithCode();
      const first = makeRefresh(grant, now);
      assert.equal(await store.consumeCode(code.digest, now, now + ACCESS_TOKEN_MS, first), true);
      const next = makeRefresh(grant, now + 5000);
      assert.equal(await store.rotateRefreshToken(first.digest, next, now + 5000), true);
      assert.deepEqual(await store.findRefreshToken(first.grantId, first.digest, now + 5000), {
        status: 'rotated',
        grantId: grant.id,
        clientId: grant.clientId,
        rotatedAt: now + 5000,
      });
      const lookup = await store.findRefreshToken(next.grantId, next.digest, now + 5000);
      assert.equal(lookup.status, 'active');
      assert.ok(lookup.status === 'active');
      assert.deepEqual(lookup.token, next);
      assert.equal(lookup.grant.expiresAt, first.expiresAt + GRANT_EXPIRY_SLACK_MS, 'within the slack: the grant row was not rewritten');
      assert.deepEqual(lookup.grant.resources, grant.resources);
    });

    it('writes nothing when a rotation fails', async () => {
      const { store, now, grant, code } = await openWithCode();
      const first = makeRefresh(grant, now, MINUTE * 2);
      assert.equal(await store.consumeCode(code.digest, now, now + ACCESS_TOKEN_MS, first), true);
      const second = makeRefresh(grant, now + 1000, MINUTE * 3);
      assert.equal(await store.rotateRefreshToken(first.digest, second, now + 1000), true);
      const grantExpiry = async (): Promise<number | undefined> => {
        const lookup = await store.findRefreshToken(second.grantId, second.digest, now + 1000);
        return lookup.status === 'active' ? lookup.grant.expiresAt : undefined;
      };
      const expiryBefore = await grantExpiry();
      assert.equal(expiryBefore, first.expiresAt + GRANT_EXPIRY_SLACK_MS);

      const reused = makeRefresh(grant, now + 2000, MINUTE * 500);
      assert.equal(await store.rotateRefreshToken(first.digest, reused, now + 2000), false);
      assert.deepEqual(await store.findRefreshToken(reused.grantId, reused.digest, now + 2000), { status: 'unknown' });
      assert.equal(await grantExpiry(), expiryBefore);

      const afterExpiry = makeRefresh(grant, second.expiresAt, MINUTE * 500);
      assert.equal(await store.rotateRefreshToken(second.digest, afterExpiry, second.expiresAt), false);
      assert.deepEqual(await store.findRefreshToken(afterExpiry.grantId, afterExpiry.digest, now), { status: 'unknown' });
      assert.equal(await grantExpiry(), expiryBefore);

      const otherGrant = makeGrant(now);
      await store.createGrantWithCode(otherGrant, makeCode(otherGrant, now));
      const underOtherGrant = makeRefresh(otherGrant, now + 3000, MINUTE * 500);
      assert.equal(await store.rotateRefreshToken(second.digest, underOtherGrant, now + 3000), false, "a token is rotated only within its grant");
      assert.deepEqual(await store.findRefreshToken(otherGrant.id, underOtherGrant.digest, now + 3000), { status: 'unknown' });

      const unknown = makeRefresh(grant, now, MINUTE * 500);
      assert.equal(await store.rotateRefreshToken(digest(), unknown, now), false);
      assert.deepEqual(await store.findRefreshToken(unknown.grantId, unknown.digest, now), { status: 'unknown' });
      assert.equal(await grantExpiry(), expiryBefore);
      assert.equal((await store.findRefreshToken(second.grantId, second.digest, now + 3000)).status, 'active');
    });

    it('lets exactly one of 50 concurrent rotations of one token win, leaving one new active token', async () => {
      const { store, now, grant, code } = await openWithCode();
      const first = makeRefresh(grant, now);
      assert.equal(await store.consumeCode(code.digest, now, now + ACCESS_TOKEN_MS, first), true);
      const candidates = Array.from({ length: 50 }, () => makeRefresh(grant, now + 1000));
      const results = await Promise.all(candidates.map((next) => store.rotateRefreshToken(first.digest, next, now + 1000)));
      assert.equal(results.filter(Boolean).length, 1);
      const statuses = await Promise.all(candidates.map(async (next) => (await store.findRefreshToken(next.grantId, next.digest, now + 1000)).status));
      assert.equal(statuses.filter((status) => status === 'active').length, 1);
      assert.equal(statuses.filter((status) => status === 'unknown').length, 49);
      assert.equal(statuses.indexOf('active'), results.indexOf(true));
    });

    it('records when a token was rotated: the rotation\'s now, not the new token\'s issue time', async () => {
      const { store, now, grant, code } = await openWithCode();
      const first = makeRefresh(grant, now);
      assert.equal(await store.consumeCode(code.digest, now, now + ACCESS_TOKEN_MS, first), true);
      const second = makeRefresh(grant, now + 6000);
      assert.equal(await store.rotateRefreshToken(first.digest, second, now + 7000), true);
      const third = makeRefresh(grant, now + 9000);
      assert.equal(await store.rotateRefreshToken(second.digest, third, now + 9000), true);
      const rotated = (rotatedAt: number) => ({ status: 'rotated', grantId: grant.id, clientId: grant.clientId, rotatedAt });
      assert.deepEqual(await store.findRefreshToken(grant.id, first.digest, now + 9000), rotated(now + 7000));
      assert.deepEqual(await store.findRefreshToken(grant.id, second.digest, now + 9000), rotated(now + 9000));
      assert.equal(await store.rotateRefreshToken(first.digest, makeRefresh(grant, now + 10_000), now + 10_000), false);
      assert.deepEqual(await store.findRefreshToken(grant.id, first.digest, now + 10_000), rotated(now + 7000), 'a refused rotation leaves rotatedAt');
    });

    it('adds a sibling refresh token to a live grant, extending the grant as a rotation does', async () => {
      const { store, now, grant, code } = await openWithCode();
      const first = makeRefresh(grant, now);
      assert.equal(await store.consumeCode(code.digest, now, now + ACCESS_TOKEN_MS, first), true);
      const extended = first.expiresAt + GRANT_EXPIRY_SLACK_MS;

      const sibling = makeRefresh(grant, now + 1000);
      assert.equal(await store.addRefreshToken(sibling, now + 1000), true);
      assert.deepEqual(await store.findRefreshToken(grant.id, sibling.digest, now + 1000), { status: 'active', token: sibling, grant: { ...grant, expiresAt: extended } });
      assert.equal((await store.findRefreshToken(grant.id, first.digest, now + 1000)).status, 'active', 'a sibling rotates nothing');

      const short = makeRefresh(grant, now + 2000, MINUTE);
      assert.equal(await store.addRefreshToken(short, now + 2000), true);
      assert.equal((await store.findGrant(grant.id, now + 2000))?.expiresAt, extended, 'never shortened');
      const beyond = makeRefresh(grant, now + 2 * GRANT_EXPIRY_SLACK_MS);
      assert.equal(await store.addRefreshToken(beyond, now + 3000), true);
      assert.equal((await store.findGrant(grant.id, now + 3000))?.expiresAt, beyond.expiresAt + GRANT_EXPIRY_SLACK_MS);

      const bare = makeGrant(now);
      await store.createGrantWithCode(bare, makeCode(bare, now));
      const onBare = makeRefresh(bare, now);
      assert.equal(await store.addRefreshToken(onBare, now), true, 'a live grant that never had a refresh token takes one');
      assert.equal((await store.findRefreshToken(bare.id, onBare.digest, now)).status, 'active');
      await assert.rejects(store.addRefreshToken({ ...makeRefresh(grant, now), digest: sibling.digest }, now), 'a digest is never stored twice');
    });

    it('adds no sibling to a revoked, expired or unknown grant, and writes nothing', async () => {
      const { store, inspect } = await backend().open();
      opened.push(store);
      const now = Date.now();
      const revoked = makeGrant(now);
      await store.createGrantWithCode(revoked, makeCode(revoked, now));
      await store.revokeGrant(revoked.id);
      const afterRevocation = makeRefresh(revoked, now);
      assert.equal(await store.addRefreshToken(afterRevocation, now), false);
      assert.deepEqual(await store.findRefreshToken(revoked.id, afterRevocation.digest, now), { status: 'unknown' });
      await assertNoGrant(store, revoked, now);

      const expiring = makeGrant(now, { expiresAt: now + MINUTE });
      await store.createGrantWithCode(expiring, makeCode(expiring, now));
      const late = makeRefresh(expiring, now + MINUTE);
      assert.equal(await store.addRefreshToken(late, now + MINUTE), false, 'expired at its expiry');
      assert.deepEqual(await store.findRefreshToken(expiring.id, late.digest, now), { status: 'unknown' });
      assert.equal((await store.findGrant(expiring.id, now))?.expiresAt, now + MINUTE, 'not extended');

      assert.equal(await store.addRefreshToken(makeRefresh(makeGrant(now), now), now), false, 'unknown grant');
      if (inspect !== undefined) {
        assert.equal(await inspect.rows('refresh_tokens'), 0);
        assert.deepEqual(await inspect.grant(expiring.id), expiring);
      }
    });

    it('settles 10 parallel refreshes of one token within a grace: one rotation, nine siblings, all active', async () => {
      const store = await open();
      for (let round = 0; round < 5; round += 1) {
        const now = Date.now() + round;
        const grant = makeGrant(now);
        const code = makeCode(grant, now);
        await store.createGrantWithCode(grant, code);
        const token = makeRefresh(grant, now);
        assert.equal(await store.consumeCode(code.digest, now, now + ACCESS_TOKEN_MS, token), true);
        const at = now + 1000;
        await assertRaceSettled(store, grant, token, await refreshRace([store], token, at), at);
      }
    });

    it('never leaves a token of a grant revoked while siblings are added to it', async () => {
      const { store, inspect } = await backend().open();
      opened.push(store);
      const now = Date.now();
      const siblings = 8;
      for (let round = 0; round <= siblings; round += 1) {
        const grant = makeGrant(now);
        const code = makeCode(grant, now);
        await store.createGrantWithCode(grant, code);
        const token = makeRefresh(grant, now);
        assert.equal(await store.consumeCode(code.digest, now, now + ACCESS_TOKEN_MS, token), true);
        const added = Array.from({ length: siblings }, () => makeRefresh(grant, now));
        const add = (record: RefreshTokenRecord) => store.addRefreshToken(record, now);
        // The revocation at every position among the additions.
        await Promise.all([...added.slice(0, round).map(add), store.revokeGrant(grant.id), ...added.slice(round).map(add)]);
        for (const record of [token, ...added]) assert.deepEqual(await store.findRefreshToken(grant.id, record.digest, now), { status: 'unknown' });
        assert.equal(await store.addRefreshToken(makeRefresh(grant, now), now), false);
      }
      if (inspect !== undefined) assert.equal(await inspect.rows('refresh_tokens'), 0, 'no row left of a revoked grant');
    });

    it('revokes a grant with its codes and live refresh tokens', async () => {
      const { store, now, grant, code } = await openWithCode();
      const token = makeRefresh(grant, now);
      assert.equal(await store.consumeCode(code.digest, now, now + ACCESS_TOKEN_MS, token), true);
      const other = makeGrant(now);
      const otherCode = makeCode(other, now);
      const otherToken = makeRefresh(other, now);
      await store.createGrantWithCode(other, otherCode);
      assert.equal(await store.consumeCode(otherCode.digest, now, now + ACCESS_TOKEN_MS, otherToken), true);

      await store.revokeGrant(grant.id);
      await assertNoGrant(store, grant, now);
      assert.deepEqual(await store.findRefreshToken(token.grantId, token.digest, now), { status: 'unknown' });
      assert.deepEqual(await store.findCode(code.digest, now), { status: 'unknown' }, 'a used code goes with its grant');
      assert.equal(await store.consumeCode(code.digest, now, now + ACCESS_TOKEN_MS), false);
      assert.equal(await store.rotateRefreshToken(token.digest, makeRefresh(grant, now), now), false);
      assert.equal((await store.findRefreshToken(otherToken.grantId, otherToken.digest, now)).status, 'active', 'other grants untouched');
      assert.deepEqual(await store.findCode(otherCode.digest, now), { status: 'used', code: otherCode });
      await store.revokeGrant(grant.id);
      await store.revokeGrant('no-such-grant');
    });

    it('never reports a code of a revoked grant as active, even unused', async () => {
      const { store, now, grant, code } = await openWithCode();
      await store.revokeGrant(grant.id);
      assert.notEqual((await store.findCode(code.digest, now)).status, 'active');
      assert.equal(await store.consumeCode(code.digest, now, now + ACCESS_TOKEN_MS), false);
    });

    it('lists every key oldest first, adds keys in one transaction, and retires a key once', async () => {
      const store = await open();
      const now = Date.now();
      const first = makeKeys(now);
      await store.loadOrCreateKeys(first);
      const rotated = makeKeys(now + 1000);
      await store.addKeys(rotated);
      const older = { ...makeKeys(now - 1000)[0] as StoredKey, kid: 'zz-older' };
      await store.addKeys([older]);
      assert.deepEqual(await store.listKeys(), [older, ...byKid(first), ...byKid(rotated)], 'oldest first, then by kid');

      const [kept] = first;
      const duplicate = { ...(rotated[0] as StoredKey), privateJwk: '{}' };
      const unsaved = makeKeys(now + 2000);
      await assert.rejects(store.addKeys([...unsaved, duplicate]), 'a kid is never stored twice');
      assert.deepEqual(await store.listKeys(), [older, ...byKid(first), ...byKid(rotated)], 'none of a failed rotation is kept');

      const retiredKid = (kept as StoredKey).kid;
      assert.equal(await store.retireKey(retiredKid, now + 3000), true);
      assert.equal(await store.retireKey(retiredKid, now + 4000), false, 'already retired');
      assert.equal(await store.retireKey('no-such-kid', now + 3000), false);
      const listed = await store.listKeys();
      assert.deepEqual(
        listed.filter((key) => key.retiredAt !== undefined),
        [{ ...(kept as StoredKey), retiredAt: now + 3000 }],
      );
      assert.ok(listed.filter((key) => key.kid !== retiredKid).every((key) => !('retiredAt' in key)), 'only that key is retired');
      assert.deepEqual(await store.loadOrCreateKeys(makeKeys(now + 5000)), listed, 'loadOrCreateKeys returns retired keys too');
    });

    it('records each key event once: the first call is the baseline, later calls answer only what no call recorded', async () => {
      const store = await open();
      const now = Date.now();
      const started: KeyEvent[] = [
        { kid: 'k1', event: 'published' },
        { kid: 'k1', event: 'signing' },
      ];
      assert.deepEqual(await store.recordKeyEvents(started, now), [], 'the keys a server starts with are no change');
      assert.deepEqual(await store.recordKeyEvents(started, now + 1), [], 'recorded already');

      const rotation: KeyEvent[] = [...started, { kid: 'k2', event: 'published' }];
      const calls = await Promise.all(Array.from({ length: 6 }, () => store.recordKeyEvents(rotation, now + 2)));
      assert.deepEqual(calls.flat(), [{ kid: 'k2', event: 'published' }], 'one of the concurrent calls answers the new event, once');

      const later: KeyEvent[] = [...rotation, { kid: 'k2', event: 'signing' }, { kid: 'k1', event: 'unpublished' }];
      assert.deepEqual(byEvent(await store.recordKeyEvents(later, now + 3)), byEvent([{ kid: 'k2', event: 'signing' }, { kid: 'k1', event: 'unpublished' }]));
      assert.deepEqual(await store.recordKeyEvents([], now + 4), []);
    });

    it('finds a live grant by id; not once revoked or expired', async () => {
      const { store, now, grant } = await openWithCode();
      assert.deepEqual(await store.findGrant(grant.id, now), grant);
      assert.deepEqual(await store.findGrant(grant.id, grant.expiresAt - 1), grant);
      assert.equal(await store.findGrant(grant.id, grant.expiresAt), undefined, 'expired');
      assert.equal(await store.findGrant(randomId('grant'), now), undefined);
      await store.revokeGrant(grant.id);
      assert.equal(await store.findGrant(grant.id, now), undefined, 'revoked');
    });

    it("answers a presented access token's grant holding in one read: holder, subject, and the token's own revocation", async () => {
      const { store, now, grant } = await openWithCode();
      const jti = randomId('jti');
      const holding = { clientId: grant.clientId, subject: grant.subject, tokenRevoked: false };
      assert.deepEqual(await store.findGrantHolding(grant.id, jti, now), holding);
      assert.equal(await store.findGrantHolding(grant.id, jti, grant.expiresAt), undefined, 'expired');
      assert.equal(await store.findGrantHolding(randomId('grant'), jti, now), undefined, 'unknown grant');
      await store.revokeAccessToken(jti, now + 1000);
      assert.deepEqual(await store.findGrantHolding(grant.id, jti, now), { ...holding, tokenRevoked: true }, 'its jti revoked alone');
      assert.deepEqual(await store.findGrantHolding(grant.id, undefined, now), holding, 'no jti asked about: no revocation looked up');
      assert.deepEqual(await store.findGrantHolding(grant.id, jti, now + 1000), holding, 'that revocation has expired');
      assert.deepEqual(await store.findGrantHolding(grant.id, randomId('jti'), now), holding, 'another token of the grant stands');
      await store.revokeGrant(grant.id);
      assert.equal(await store.findGrantHolding(grant.id, jti, now), undefined, 'revoked grant');
    });

    it('keeps the grant of an exchanged code until grantUntil, the later of it and its refresh extension, never shortening it', async () => {
      const store = await open();
      const now = Date.now();
      const exchange = async (grantOverrides: Partial<Grant>, grantUntil: number, refreshLifetime?: number) => {
        const grant = makeGrant(now, grantOverrides);
        const code = makeCode(grant, now);
        await store.createGrantWithCode(grant, code);
        const refresh = refreshLifetime === undefined ? undefined : makeRefresh(grant, now, refreshLifetime);
        assert.equal(await store.consumeCode(code.digest, now, grantUntil, refresh), true);
        return { grant, code, refresh, expiresAt: async () => (await store.findGrant(grant.id, now))?.expiresAt };
      };

      const bare = await exchange({}, now + 10 * MINUTE);
      assert.equal(await bare.expiresAt(), now + 10 * MINUTE, 'without a refresh token the grant lives until grantUntil');
      assert.ok(await store.findGrant(bare.grant.id, now + 10 * MINUTE - 1));
      assert.equal(await store.findGrant(bare.grant.id, now + 10 * MINUTE), undefined);
      assert.equal(await store.consumeCode(bare.code.digest, now, now + 60 * MINUTE), false);
      assert.equal(await bare.expiresAt(), now + 10 * MINUTE, 'a refused exchange extends nothing');

      const longer = await exchange({ expiresAt: now + 30 * MINUTE }, now + 10 * MINUTE);
      assert.equal(await longer.expiresAt(), now + 30 * MINUTE, 'never shortened');

      const refreshed = await exchange({}, now + 10 * MINUTE, 60 * MINUTE);
      assert.equal(await refreshed.expiresAt(), now + 60 * MINUTE + GRANT_EXPIRY_SLACK_MS, 'a later refresh expiry wins');

      const later = now + 2 * GRANT_EXPIRY_SLACK_MS;
      const outlived = await exchange({}, later, MINUTE);
      assert.equal(await outlived.expiresAt(), later, 'a later grantUntil wins');
    });

    it('lists live grants by user and client, oldest first, with their last refresh', async () => {
      const store = await open();
      const now = Date.now();
      const stored = async (overrides: Partial<Grant>): Promise<{ grant: Grant; code: AuthorizationCodeRecord }> => {
        const grant = makeGrant(now, overrides);
        const code = makeCode(grant, now);
        await store.createGrantWithCode(grant, code);
        return { grant, code };
      };
      const bob = await stored({ subject: 'bob', clientId: 'webapp', createdAt: now - 1000 });
      const aliceWeb = await stored({ subject: 'alice', clientId: 'webapp', createdAt: now - 3000 });
      const aliceCli = await stored({ subject: 'alice', clientId: 'cli', createdAt: now - 2000 });
      await stored({ subject: 'alice', clientId: 'webapp', createdAt: now - 4000, expiresAt: now - 1 });

      const first = makeRefresh(aliceWeb.grant, now - 3000);
      assert.equal(await store.consumeCode(aliceWeb.code.digest, now - 3000, now + ACCESS_TOKEN_MS, first), true);
      const rotated = makeRefresh(aliceWeb.grant, now - 500);
      assert.equal(await store.rotateRefreshToken(first.digest, rotated, now - 500), true);
      const aliceWebGrant = await store.findGrant(aliceWeb.grant.id, now);

      const listed = async (filter: GrantFilter): Promise<string[]> => (await store.listGrants(filter, now)).map(({ grant }) => grant.id);
      assert.deepEqual(await listed({}), [aliceWeb.grant.id, aliceCli.grant.id, bob.grant.id], 'live only, oldest first');
      assert.deepEqual(await listed({ subject: 'alice' }), [aliceWeb.grant.id, aliceCli.grant.id]);
      assert.deepEqual(await listed({ clientId: 'webapp' }), [aliceWeb.grant.id, bob.grant.id]);
      assert.deepEqual(await listed({ subject: 'alice', clientId: 'cli' }), [aliceCli.grant.id]);
      assert.deepEqual(await listed({ subject: 'carol' }), []);
      assert.deepEqual(await store.listGrants({ clientId: 'webapp' }, now), [
        { grant: aliceWebGrant, lastRefreshAt: rotated.issuedAt },
        { grant: bob.grant },
      ]);
      const [never] = await store.listGrants({ subject: 'bob' }, now);
      assert.ok(never !== undefined && !('lastRefreshAt' in never), 'no lastRefreshAt without a refresh token');
    });

    it('revokes grants by user, client or both, in batches, with their codes and refresh tokens', async () => {
      const { store, inspect } = await backend().open();
      opened.push(store);
      const now = Date.now();
      const exchanged = async (overrides: Partial<Grant>): Promise<{ grant: Grant; code: AuthorizationCodeRecord; token: RefreshTokenRecord }> => {
        const grant = makeGrant(now, overrides);
        const code = makeCode(grant, now);
        const token = makeRefresh(grant, now);
        await store.createGrantWithCode(grant, code);
        assert.equal(await store.consumeCode(code.digest, now, now + ACCESS_TOKEN_MS, token), true);
        return { grant, code, token };
      };
      // More than one revocation batch (sql.ts REVOKE_BATCH).
      const bulk = await inBatches(2 * REVOKE_BATCH + 17, () => exchanged({ subject: 'bulk', clientId: 'crawler' }));
      const aliceWeb = await exchanged({ subject: 'alice', clientId: 'webapp' });
      const aliceCli = await exchanged({ subject: 'alice', clientId: 'cli' });
      const bobWeb = await exchanged({ subject: 'bob', clientId: 'webapp' });
      const bobCli = await exchanged({ subject: 'bob', clientId: 'cli' });

      assert.equal(await store.revokeGrants({ clientId: 'crawler' }), bulk.length);
      assert.deepEqual(await store.listGrants({ clientId: 'crawler' }, now), []);
      for (const { grant, code, token } of bulk) {
        assert.deepEqual(await store.findRefreshToken(grant.id, token.digest, now), { status: 'unknown' });
        assert.deepEqual(await store.findCode(code.digest, now), { status: 'unknown' });
        assert.equal(await store.findGrant(grant.id, now), undefined);
      }
      if (inspect !== undefined) {
        assert.equal(await inspect.rows('grants'), 4);
        assert.equal(await inspect.rows('refresh_tokens'), 4, 'the revoked grants took their refresh tokens with them');
        assert.equal(await inspect.rows('authorization_codes'), 4);
      }

      assert.equal(await store.revokeGrants({ subject: 'alice', clientId: 'cli' }), 1);
      assert.deepEqual(await store.findRefreshToken(aliceCli.grant.id, aliceCli.token.digest, now), { status: 'unknown' });
      assert.equal(await store.revokeGrants({ subject: 'alice' }), 1);
      assert.deepEqual(await store.findRefreshToken(aliceWeb.grant.id, aliceWeb.token.digest, now), { status: 'unknown' });
      assert.equal(await store.revokeGrants({ subject: 'alice' }), 0, 'nothing left to revoke');
      assert.equal((await store.findRefreshToken(bobWeb.grant.id, bobWeb.token.digest, now)).status, 'active', 'others untouched');
      assert.equal((await store.findRefreshToken(bobCli.grant.id, bobCli.token.digest, now)).status, 'active');
      assert.equal(await store.revokeGrants({ clientId: 'nobody' }), 0);
      assert.equal(await store.revokeGrants({}), 2, 'no filter: every grant');
      assert.deepEqual(await store.findRefreshToken(bobWeb.grant.id, bobWeb.token.digest, now), { status: 'unknown' });
      assert.deepEqual(await store.listGrants({}, now), []);
    });

    it('keeps a revoked access token revoked until it expires, then sweeps it', async () => {
      const store = await open();
      const now = Date.now();
      const jti = randomId('jti');
      const other = randomId('jti');
      await store.revokeAccessToken(jti, now + MINUTE);
      await store.revokeAccessToken(jti, now + MINUTE);
      await store.revokeAccessToken(other, now + 10 * MINUTE);
      assert.equal(await store.isAccessTokenRevoked(jti, now), true);
      assert.equal(await store.isAccessTokenRevoked(jti, now + MINUTE - 1), true);
      assert.equal(await store.isAccessTokenRevoked(jti, now + MINUTE), false, 'expired: no longer needed');
      assert.equal(await store.isAccessTokenRevoked(randomId('jti'), now), false);
      await store.sweep(now + 2 * MINUTE);
      assert.equal(await store.isAccessTokenRevoked(jti, now), false, 'swept');
      assert.equal(await store.isAccessTokenRevoked(other, now + 2 * MINUTE), true, 'a live one stays');
    });

    it('ends every session of a subject', async () => {
      const store = await open();
      const now = Date.now();
      const session = (subject: string) => ({ digest: digest(), subject, claims: {}, authTime: now, expiresAt: now + MINUTE });
      const alice = [session('alice'), session('alice'), session('alice')];
      const bob = session('bob');
      for (const record of [...alice, bob]) await store.createSession(record);
      assert.equal(await store.deleteSessionsOf('alice'), 3);
      for (const record of alice) assert.equal(await store.findSession(record.digest, now), undefined);
      assert.deepEqual(await store.findSession(bob.digest, now), bob);
      assert.equal(await store.deleteSessionsOf('alice'), 0);
      assert.equal(await store.deleteSessionsOf('carol'), 0);
    });

    it(`keeps at most ${MAX_SESSIONS_PER_SUBJECT} sessions of one subject: signing in again ends the one that expires first (an audit: sign-ins piled up rows)`, async () => {
      const { store, inspect } = await backend().open();
      opened.push(store);
      const now = Date.now();
      const session = (subject: string, index: number) => ({ digest: digest(), subject, claims: {}, authTime: now, expiresAt: now + MINUTE + index });
      const bob = session('bob', 0);
      await store.createSession(bob);
      const alice = Array.from({ length: MAX_SESSIONS_PER_SUBJECT + 5 }, (_, index) => session('alice', index));
      for (const record of alice) await store.createSession(record);
      for (const record of alice.slice(0, 5)) assert.equal(await store.findSession(record.digest, now), undefined, 'the five that expire first are ended');
      for (const record of alice.slice(5)) assert.deepEqual(await store.findSession(record.digest, now), record);
      assert.deepEqual(await store.findSession(bob.digest, now), bob, "another subject's session is untouched");
      if (inspect !== undefined) assert.equal(await inspect.rows('sessions'), MAX_SESSIONS_PER_SUBJECT + 1);
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
      await assertNoGrant(store, grant, now);

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
        assert.deepEqual(await store.findRefreshToken(refresh.grantId, refresh.digest, now + 8000), {
          status: 'active',
          token: refresh,
          grant: { ...grant, expiresAt: refresh.expiresAt + GRANT_EXPIRY_SLACK_MS },
        });
      } else {
        await assertNoGrant(store, grant, now);
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
      await assertNoGrant(store, grant, now);
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

    it('a new session replaces the one it names, in the same step; naming none that exists is no error', async () => {
      const store = await open();
      const now = Date.now();
      const old = { digest: digest(), subject: 'alice', claims: {}, authTime: now, expiresAt: now + MINUTE };
      const renewed = { ...old, digest: digest(), subject: 'bob' };
      await store.createSession(old);
      await store.createSession(renewed, old.digest);
      assert.equal(await store.findSession(old.digest, now), undefined);
      assert.deepEqual(await store.findSession(renewed.digest, now), renewed);
      const again = { ...renewed, digest: digest() };
      await store.createSession(again, digest());
      assert.deepEqual(await store.findSession(again.digest, now), again);
    });

    it('keeps a login request until it expires, and hands it out once', async () => {
      const store = await open();
      const now = Date.now();
      const request = makeLoginRequest(now);
      await store.saveLoginRequest(request);
      const device = makeLoginRequest(now, { purpose: { kind: 'device', userCode: 'WDJBMJHT' } });
      await store.saveLoginRequest(device);
      assert.deepEqual(await store.findLoginRequest(request.id, now), request);
      assert.deepEqual(await store.findLoginRequest(device.id, now), device);
      assert.equal(await store.findLoginRequest(request.id, request.expiresAt), undefined);
      assert.equal(await store.findLoginRequest(randomId('login'), now), undefined);
      await assert.rejects(store.saveLoginRequest({ ...device, browser: digest() }), 'an id is never given twice');

      const takes = await Promise.all(Array.from({ length: 20 }, () => store.takeLoginRequest(request.id, now)));
      assert.deepEqual(takes.filter((taken) => taken !== undefined), [request]);
      assert.equal(await store.findLoginRequest(request.id, now), undefined);
      assert.deepEqual(await store.findLoginRequest(device.id, now), device, 'others untouched');

      assert.equal(await store.takeLoginRequest(device.id, device.expiresAt), undefined, 'expired');
      assert.equal(await store.takeLoginRequest(device.id, now), undefined, 'taken even when expired');
    });

    it('keeps an upstream sign-in state until it expires, and hands it out once', async () => {
      const store = await open();
      const now = Date.now();
      const record = makeFederationState(now);
      await store.saveFederationState(record);
      assert.deepEqual(await store.findFederationState(record.state, now), record, 'found without being taken');
      assert.deepEqual(await store.findFederationState(record.state, now), record);
      assert.equal(await store.findFederationState(record.state, record.expiresAt), undefined, 'not once expired');
      const takes = await Promise.all(Array.from({ length: 20 }, () => store.takeFederationState(record.state, now)));
      assert.deepEqual(takes.filter((taken) => taken !== undefined), [record]);
      assert.equal(await store.findFederationState(record.state, now), undefined, 'gone once taken');
      assert.equal(await store.takeFederationState(randomId('state'), now), undefined);

      const stale = makeFederationState(now);
      await store.saveFederationState(stale);
      assert.equal(await store.takeFederationState(stale.state, stale.expiresAt), undefined);
      assert.equal(await store.takeFederationState(stale.state, now), undefined, 'taken even when expired');
    });

    it('keeps the latest claims of a subject until they expire', async () => {
      const store = await open();
      const now = Date.now();
      await store.saveSubjectClaims('corp:alice', { email: 'alice@corp.example' }, now + MINUTE);
      await store.saveSubjectClaims('corp:bob', {}, now + MINUTE);
      assert.deepEqual(await store.findSubjectClaims('corp:alice', now), { email: 'alice@corp.example' });
      assert.deepEqual(await store.findSubjectClaims('corp:bob', now), {});
      assert.equal(await store.findSubjectClaims('corp:alice', now + MINUTE), undefined);
      assert.equal(await store.findSubjectClaims('corp:carol', now), undefined);
      await store.saveSubjectClaims('corp:alice', { email: 'alice@new.example', name: 'Alice' }, now + 2 * MINUTE);
      assert.deepEqual(await store.findSubjectClaims('corp:alice', now + MINUTE), { email: 'alice@new.example', name: 'Alice' }, 'replaced');
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
      await store.forgiveAttempt('login-address:203.0.113.9', now + 1);
      assert.equal(await store.peekAttempts('login-address:203.0.113.9', now + 1), 19, 'one taken back');
      assert.equal(await store.countAttempt('login-address:203.0.113.9', now + 2, MINUTE), 20);
      await store.forgiveAttempt('login-user:bob', now + MINUTE + 1000);
      assert.equal(await store.peekAttempts('login-user:bob', now + 1000), 1, 'nothing once the window has ended');
      await store.countAttempt('once', now, MINUTE);
      await store.forgiveAttempt('once', now);
      await store.forgiveAttempt('once', now);
      assert.equal(await store.peekAttempts('once', now), 0, 'never below zero');
      assert.equal(await store.countAttempt('once', now, MINUTE), 1);
      await store.forgiveAttempt('never-counted', now);
      assert.equal(await store.peekAttempts('never-counted', now), 0);
      await store.clearAttempts('login-user:alice');
      assert.equal(await store.peekAttempts('login-user:alice', now + MINUTE), 0);
      assert.equal(await store.peekAttempts('login-user:bob', now + 1000), 1);
    });

    it('an attempt counted and then forgiven leaves no counter behind (a sign-in refused with 503 writes nothing, DESIGN.md §1)', async () => {
      const { store, inspect } = await backend().open();
      opened.push(store);
      const now = Date.now();
      const counts = await Promise.all(Array.from({ length: 5 }, (_, index) => store.countAttempt(`login:user-${index}:203.0.113.9`, now, MINUTE)));
      assert.deepEqual(counts, [1, 1, 1, 1, 1]);
      await Promise.all(Array.from({ length: 5 }, (_, index) => store.forgiveAttempt(`login:user-${index}:203.0.113.9`, now + 1)));
      for (let index = 0; index < 5; index++) assert.equal(await store.peekAttempts(`login:user-${index}:203.0.113.9`, now + 1), 0);
      if (inspect !== undefined) assert.equal(await inspect.rows('attempts'), 0, 'no row per forgiven name');
      // A counter above one keeps its row with one taken back.
      await store.countAttempt('login:kept', now, MINUTE);
      await store.countAttempt('login:kept', now, MINUTE);
      await store.forgiveAttempt('login:kept', now + 1);
      assert.equal(await store.peekAttempts('login:kept', now + 1), 1);
      if (inspect !== undefined) assert.equal(await inspect.rows('attempts'), 1);
    });

    it('records one-time credentials all or none, naming the first kind found used', async () => {
      const { store, inspect } = await backend().open();
      opened.push(store);
      const now = Date.now();
      const proof = usedOnce('dpop', now + MINUTE);
      assert.deepEqual(await store.markAllUsedOnce([proof], now), { ok: true });
      assert.deepEqual(await store.markAllUsedOnce([proof], now), { ok: false, used: 'dpop' });
      // A fresh assertion beside the used proof, before or after it: refused, and the assertion is left unrecorded.
      const assertion = usedOnce('client_assertion', now + MINUTE);
      assert.deepEqual(await store.markAllUsedOnce([assertion, proof], now), { ok: false, used: 'dpop' });
      assert.deepEqual(await store.markAllUsedOnce([proof, assertion], now), { ok: false, used: 'dpop' });
      if (inspect !== undefined) assert.equal(await inspect.rows('used_once'), 1, 'the refused batches wrote nothing');
      assert.deepEqual(await store.markAllUsedOnce([assertion, usedOnce('dpop', now + MINUTE)], now), { ok: true }, 'the assertion was still usable');
      // Both used: the first in the list is named.
      assert.deepEqual(await store.markAllUsedOnce([assertion, proof], now), { ok: false, used: 'client_assertion' });
      assert.deepEqual(await store.markAllUsedOnce([proof, assertion], now), { ok: false, used: 'dpop' });
      // The proof's id under the other kind is another credential.
      assert.deepEqual(await store.markAllUsedOnce([{ kind: 'client_assertion', id: proof.id, expiresAt: now + MINUTE }], now), { ok: true });
      if (inspect !== undefined) assert.equal(await inspect.rows('used_once'), 4);
    });

    it('takes over an expired one-time credential, in a batch as alone', async () => {
      const store = await open();
      const now = Date.now();
      const proof = usedOnce('dpop', now + 1000);
      assert.deepEqual(await store.markAllUsedOnce([proof], now), { ok: true });
      assert.deepEqual(await store.markAllUsedOnce([proof], now + 999), { ok: false, used: 'dpop' }, 'used until its expiry');
      const renewed: UsedOnceEntry = { kind: 'dpop', id: proof.id, expiresAt: now + MINUTE };
      const assertion = usedOnce('client_assertion', now + MINUTE);
      assert.deepEqual(await store.markAllUsedOnce([assertion, renewed], now + 1000), { ok: true }, 'expired at its expiry, so taken over');
      assert.deepEqual(await store.markAllUsedOnce([renewed], now + 2000), { ok: false, used: 'dpop' }, 'recorded again, until the new expiry');
      assert.deepEqual(await store.markAllUsedOnce([assertion], now + 2000), { ok: false, used: 'client_assertion' });
    });

    it('lets exactly one of 20 concurrent batches sharing a DPoP proof win; the others record nothing', async () => {
      await assertOneBatchWins([await open()], Date.now());
    });

    it('sweeps expired rows and keeps live ones', async () => {
      const { store, inspect } = await backend().open();
      opened.push(store);
      const now = Date.now();
      const past = now - 20 * MINUTE;

      const oldGrant = makeGrant(past, { expiresAt: now - 1 });
      const oldCode = makeCode(oldGrant, past, { expiresAt: now + MINUTE });
      await store.createGrantWithCode(oldGrant, oldCode);
      const oldUsedCode = makeCode(oldGrant, past, { expiresAt: past + MINUTE });
      await store.createGrantWithCode(makeGrant(past, { expiresAt: now + MINUTE }), { ...oldUsedCode, grantId: oldGrant.id });
      assert.equal(await store.consumeCode(oldUsedCode.digest, past, past + ACCESS_TOKEN_MS), true);

      const liveGrant = makeGrant(past, { expiresAt: now + MINUTE });
      const usedCode = makeCode(liveGrant, past, { expiresAt: past + MINUTE });
      await store.createGrantWithCode(liveGrant, usedCode);
      const expiredToken = makeRefresh(liveGrant, past, MINUTE);
      assert.equal(await store.consumeCode(usedCode.digest, past, past + ACCESS_TOKEN_MS, expiredToken), true);
      const liveToken = makeRefresh(liveGrant, now, MINUTE / 2);
      assert.equal(await store.rotateRefreshToken(expiredToken.digest, liveToken, past), true);
      const expiredCode = makeCode(liveGrant, past, { expiresAt: now - 1 });
      const liveCode = makeCode(liveGrant, now);
      const holder = makeGrant(now, { expiresAt: now + MINUTE });
      await store.createGrantWithCode(holder, { ...expiredCode, grantId: liveGrant.id });
      await store.createGrantWithCode(makeGrant(now, { expiresAt: now + MINUTE }), { ...liveCode, grantId: liveGrant.id });

      const longExpiredDevice = makeDevice(past, { expiresAt: now - 11 * MINUTE });
      const recentlyExpiredDevice = makeDevice(past, { expiresAt: now - MINUTE });
      const liveDevice = makeDevice(now);
      for (const record of [longExpiredDevice, recentlyExpiredDevice, liveDevice]) await store.createDeviceAuthorization(record);

      const expiredSession = { digest: digest(), subject: 'a', claims: {}, authTime: past, expiresAt: now - 1 };
      const liveSession = { digest: digest(), subject: 'a', claims: {}, authTime: now, expiresAt: now + MINUTE };
      await store.createSession(expiredSession);
      await store.createSession(liveSession);

      // More than one sweep batch of login requests.
      await inBatches(1234, () => store.saveLoginRequest(makeLoginRequest(past, { expiresAt: now - 1 })));
      const liveRequest = makeLoginRequest(now);
      await store.saveLoginRequest(liveRequest);
      await store.saveFederationState(makeFederationState(past, { expiresAt: now - 1 }));
      const liveState = makeFederationState(now);
      await store.saveFederationState(liveState);
      await store.saveSubjectClaims('corp:old', { name: 'Old' }, now - 1);
      await store.saveSubjectClaims('corp:live', { name: 'Live' }, now + MINUTE);
      await store.countAttempt('old', past, MINUTE);
      await store.countAttempt('live', now, MINUTE);

      await store.sweep(now);

      assert.deepEqual(await store.findCode(oldCode.digest, now), { status: 'unknown' }, "an expired grant's code goes with it");
      assert.deepEqual(await store.findCode(oldUsedCode.digest, now), { status: 'unknown' });
      assert.deepEqual(await store.findCode(usedCode.digest, now), { status: 'used', code: usedCode }, 'a used code stays with its live grant');
      assert.equal((await store.findCode(liveCode.digest, now)).status, 'active');
      assert.equal((await store.findRefreshToken(liveToken.grantId, liveToken.digest, now)).status, 'active');
      assert.equal(await store.findByDeviceCode(longExpiredDevice.deviceCodeDigest), undefined);
      assert.ok(await store.findByDeviceCode(recentlyExpiredDevice.deviceCodeDigest), 'kept a while for expired_token');
      assert.ok(await store.findByDeviceCode(liveDevice.deviceCodeDigest));
      assert.ok(await store.findSession(liveSession.digest, now));
      assert.deepEqual(await store.findLoginRequest(liveRequest.id, now), liveRequest);
      assert.deepEqual(await store.findSubjectClaims('corp:live', now), { name: 'Live' });
      assert.equal(await store.peekAttempts('live', now), 1);

      if (inspect !== undefined) {
        assert.equal(await inspect.grant(oldGrant.id), undefined);
        assert.equal((await inspect.grant(liveGrant.id))?.id, liveGrant.id);
        assert.equal(await inspect.rows('authorization_codes'), 2, 'the used code and the live one');
        assert.equal(await inspect.rows('refresh_tokens'), 1);
        assert.equal(await inspect.rows('grants'), 4, 'the live grant and three holders');
        assert.equal(await inspect.rows('device_authorizations'), 2);
        assert.equal(await inspect.rows('sessions'), 1);
        assert.equal(await inspect.rows('login_requests'), 1);
        assert.equal(await inspect.rows('federation_states'), 1);
        assert.equal(await inspect.rows('subject_claims'), 1);
        assert.equal(await inspect.rows('attempts'), 1);
      }
      assert.deepEqual(await store.takeFederationState(liveState.state, now), liveState);
      await store.sweep(now);
    });

    it('saves, finds, keeps (never shortening) and deletes a registered client', async () => {
      const store = await open();
      const now = Date.now();
      const publicClient = makeRegisteredClient(now);
      const confidential = makeRegisteredClient(now, {
        secretDigest: digest(),
        metadata: {
          redirect_uris: ['https://app.example.org/callback'],
          token_endpoint_auth_method: 'client_secret_basic',
          grant_types: ['authorization_code'],
          response_types: ['code'],
          application_type: 'web',
          client_name: 'Café «Ünïcode» \u{1F600}',
          client_uri: 'https://app.example.org/',
          logo_uri: 'https://app.example.org/logo.png',
          scope: 'openid mcp:tools',
        },
      });
      await store.saveRegisteredClient(publicClient);
      await store.saveRegisteredClient(confidential);
      const found = await store.findRegisteredClient(publicClient.clientId);
      assert.deepEqual(found, publicClient);
      assert.ok(found !== undefined && !('secretDigest' in found), 'no secret digest for a public client');
      assert.deepEqual(await store.findRegisteredClient(confidential.clientId), confidential);
      assert.equal(await store.findRegisteredClient(randomId('dyn')), undefined);
      await assert.rejects(store.saveRegisteredClient({ ...publicClient, metadata: confidential.metadata }), 'a client id is registered once');
      assert.deepEqual(await store.findRegisteredClient(publicClient.clientId), publicClient);

      await store.keepRegisteredClient(publicClient.clientId, publicClient.expiresAt + DAY);
      assert.equal((await store.findRegisteredClient(publicClient.clientId))?.expiresAt, publicClient.expiresAt + DAY);
      await store.keepRegisteredClient(publicClient.clientId, now);
      assert.deepEqual(await store.findRegisteredClient(publicClient.clientId), { ...publicClient, expiresAt: publicClient.expiresAt + DAY }, 'never shortened');
      await store.keepRegisteredClient(randomId('dyn'), now + DAY);
      const expired = makeRegisteredClient(now - 2 * DAY, { expiresAt: now - DAY });
      await store.saveRegisteredClient(expired);
      assert.deepEqual(await store.findRegisteredClient(expired.clientId), expired, 'found until the sweep removes it');

      assert.equal(await store.deleteRegisteredClient(publicClient.clientId), true);
      assert.equal(await store.findRegisteredClient(publicClient.clientId), undefined);
      assert.equal(await store.deleteRegisteredClient(publicClient.clientId), false);
      assert.equal(await store.deleteRegisteredClient(randomId('dyn')), false);
      assert.deepEqual(await store.findRegisteredClient(confidential.clientId), confidential, 'others untouched');
    });

    it('remembers one consent per person, client and redirect origin, replacing it when saved again', async () => {
      const store = await open();
      const now = Date.now();
      const consent = makeConsent('alice', 'dyn-a', now);
      await store.saveConsent(consent);
      const whole = makeConsent('alice', 'dyn-b', now, { resources: [], wholeAudience: true, scope: [] });
      await store.saveConsent(whole);
      const bob = makeConsent('bob', 'dyn-a', now, { scope: ['openid'] });
      await store.saveConsent(bob);
      assert.deepEqual(await store.findConsent('alice', 'dyn-a', CONSENT_ORIGIN), consent);
      assert.deepEqual(await store.findConsent('alice', 'dyn-b', CONSENT_ORIGIN), whole);
      assert.deepEqual(await store.findConsent('bob', 'dyn-a', CONSENT_ORIGIN), bob);
      assert.equal(await store.findConsent('carol', 'dyn-a', CONSENT_ORIGIN), undefined);
      assert.equal(await store.findConsent('alice', 'dyn-c', CONSENT_ORIGIN), undefined);

      const wider = makeConsent('alice', 'dyn-a', now + MINUTE, {
        scope: ['openid', 'mcp:tools', 'offline_access', 'profile'],
        resources: ['https://z.example.org', 'https://a.example.org'],
        wholeAudience: true,
      });
      await store.saveConsent(wider);
      assert.deepEqual(await store.findConsent('alice', 'dyn-a', CONSENT_ORIGIN), wider, 'replaced, order kept');
      await store.saveConsent(consent);
      assert.deepEqual(await store.findConsent('alice', 'dyn-a', CONSENT_ORIGIN), consent, 'wholeAudience back to false');
      assert.deepEqual(await store.findConsent('bob', 'dyn-a', CONSENT_ORIGIN), bob, 'others untouched');
      const writes = await Promise.all(Array.from({ length: 10 }, (_, i) => store.saveConsent(makeConsent('dave', 'dyn-a', now + i))));
      assert.equal(writes.length, 10);
      assert.ok((await store.findConsent('dave', 'dyn-a', CONSENT_ORIGIN)) !== undefined, 'parallel saves of one consent all succeed');

      // DESIGN.md §8: a consent counts for the redirect origin it was given for, and one origin's never replaces another's.
      const loopback = makeConsent('alice', 'dyn-a', now, { redirectOrigin: 'http://127.0.0.1', scope: ['openid'] });
      await store.saveConsent(loopback);
      assert.deepEqual(await store.findConsent('alice', 'dyn-a', 'http://127.0.0.1'), loopback);
      assert.deepEqual(await store.findConsent('alice', 'dyn-a', CONSENT_ORIGIN), consent, 'the other origin keeps its own');
      assert.equal(await store.findConsent('alice', 'dyn-a', 'https://evil.example'), undefined);
      assert.equal(await store.revokeGrants({ subject: 'alice', clientId: 'dyn-a' }), 0);
      assert.equal(await store.findConsent('alice', 'dyn-a', 'http://127.0.0.1'), undefined, 'forgotten with the others of the client');
      assert.equal(await store.findConsent('alice', 'dyn-a', CONSENT_ORIGIN), undefined);
    });

    it('forgets a client\'s consents with its registration and when its grants are revoked', async () => {
      const store = await open();
      const now = Date.now();
      const client = makeRegisteredClient(now);
      const other = makeRegisteredClient(now);
      for (const record of [client, other]) await store.saveRegisteredClient(record);
      const document = 'https://host.example/oauth/client.json';
      const saveAll = async () => {
        for (const subject of ['alice', 'bob']) {
          for (const clientId of [client.clientId, other.clientId, document]) await store.saveConsent(makeConsent(subject, clientId, now));
        }
      };
      const has = async (subject: string, clientId: string) => (await store.findConsent(subject, clientId, CONSENT_ORIGIN)) !== undefined;
      await saveAll();

      assert.equal(await store.deleteRegisteredClient(client.clientId), true);
      assert.equal(await has('alice', client.clientId), false);
      assert.equal(await has('bob', client.clientId), false);
      assert.equal(await has('alice', other.clientId), true, 'other clients keep theirs');
      assert.equal(await has('alice', document), true);

      await saveAll();
      assert.equal(await store.revokeGrants({ subject: 'alice', clientId: client.clientId }), 0);
      assert.equal(await has('alice', client.clientId), false, 'revoking a person\'s grants of a client forgets that consent');
      assert.equal(await has('bob', client.clientId), true);
      assert.equal(await store.revokeGrants({ clientId: document }), 0);
      assert.equal(await has('alice', document), false, 'also for a client without a registration');
      assert.equal(await has('bob', document), false);
      assert.equal(await store.revokeGrants({ subject: 'bob' }), 0);
      assert.equal(await has('bob', client.clientId), true, 'a filter naming no client forgets no consent');
      assert.equal(await store.deleteRegisteredClient(client.clientId), false, 'no registration left');
      assert.equal(await has('bob', client.clientId), false, 'its consents go all the same');
      assert.equal(await has('bob', other.clientId), true);
    });

    it('sweeps a registered client once it expired and no grant of it is left, with its consents', async () => {
      const { store, inspect } = await backend().open();
      opened.push(store);
      const now = Date.now();
      const past = now - 2 * DAY;
      const abandoned = makeRegisteredClient(past, { expiresAt: now - 1 });
      const withLiveGrant = makeRegisteredClient(past, { expiresAt: now - 1 });
      const withExpiredGrant = makeRegisteredClient(past, { expiresAt: now - 1 });
      const unexpired = makeRegisteredClient(past, { expiresAt: now + MINUTE });
      const clients = [abandoned, withLiveGrant, withExpiredGrant, unexpired];
      // More than two sweep batches of abandoned clients, each with a consent.
      const many = Array.from({ length: 2 * SWEEP_BATCH + 7 }, () => makeRegisteredClient(past, { expiresAt: now - 1 }));
      const everyClient = [...clients, ...many];
      await inBatches(everyClient.length, (index) => store.saveRegisteredClient(everyClient[index] as RegisteredClientRecord));
      await inBatches(everyClient.length, (index) => store.saveConsent(makeConsent('alice', (everyClient[index] as RegisteredClientRecord).clientId, past)));
      const document = 'https://host.example/oauth/client.json';
      await store.saveConsent(makeConsent('alice', document, past));

      const liveGrant = makeGrant(past, { clientId: withLiveGrant.clientId, expiresAt: now + MINUTE });
      await store.createGrantWithCode(liveGrant, makeCode(liveGrant, past));
      const expiredGrant = makeGrant(past, { clientId: withExpiredGrant.clientId, expiresAt: now - 1 });
      await store.createGrantWithCode(expiredGrant, makeCode(expiredGrant, past));

      await store.sweep(now);

      const kept = async (client: RegisteredClientRecord) =>
        (await store.findRegisteredClient(client.clientId)) !== undefined && (await store.findConsent('alice', client.clientId, CONSENT_ORIGIN)) !== undefined;
      const gone = async (client: RegisteredClientRecord) =>
        (await store.findRegisteredClient(client.clientId)) === undefined && (await store.findConsent('alice', client.clientId, CONSENT_ORIGIN)) === undefined;
      assert.ok(await gone(abandoned), 'expired, never had a grant');
      assert.ok(await gone(withExpiredGrant), 'its last grant went in the same sweep');
      assert.ok(await kept(withLiveGrant), 'expired but a grant of it lives');
      assert.ok(await kept(unexpired));
      for (const client of many.slice(0, 3)) assert.ok(await gone(client));
      assert.ok((await store.findConsent('alice', document, CONSENT_ORIGIN)) !== undefined, 'a consent of an unregistered client is not swept');
      if (inspect !== undefined) {
        assert.equal(await inspect.rows('registered_clients'), 2);
        assert.equal(await inspect.rows('consents'), 3);
      }

      await store.revokeGrant(liveGrant.id);
      await store.sweep(now);
      assert.ok(await gone(withLiveGrant), 'swept once its grant is gone');
      assert.ok(await kept(unexpired));
    });

    it('answers ping, describes itself, and closes', async () => {
      const { store } = await backend().open();
      await store.ping();
      assert.match(store.description, /^(memory|sqlite |postgres )/);
      assert.doesNotMatch(store.description, /password|secret/i);
      await store.close();
      await store.close();
    });
  });
}

storeSuite('memory', () => ({ open: async () => ({ store: new MemoryStore() }) }));

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
  /** A database file of schema `version`, with `rows` (statements in SQLite's form) in it. */
  const oldDatabase = async (version: number, rows: readonly { text: string; values: readonly unknown[] }[]): Promise<string> => {
    const file = nextFile();
    await mkdir(dirname(file), { recursive: true });
    const db = new Database(file);
    for (const statement of schemaAt(version, SQLITE)) db.exec(statement);
    for (const row of rows) db.prepare(row.text).run(...row.values);
    db.close();
    return file;
  };

  storeSuite('sqlite', () => ({
    open: async () => {
      const file = nextFile();
      return { store: await openStore({ kind: 'sqlite', path: file }), inspect: sqliteInspector(file) };
    },
  }));

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
    const code = makeCode(grant, now);
    const token = makeRefresh(grant, now);
    await first.createGrantWithCode(grant, code);
    assert.equal(await first.consumeCode(code.digest, now, now + ACCESS_TOKEN_MS, token), true);
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

  it('lets one of concurrent batches sharing a DPoP proof win across two instances on one file', async () => {
    const file = nextFile();
    const first = new SqliteStore(file);
    const second = new SqliteStore(file);
    try {
      for (let round = 0; round < 5; round += 1) await assertOneBatchWins([first, second], Date.now());
    } finally {
      await first.close();
      await second.close();
    }
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

  it('migrates a version 1 database: its grants stay, its refresh tokens (which name no grant) are dropped', async () => {
    const now = Date.now();
    const grant = makeGrant(now);
    const token = makeRefresh(grant, now);
    const file = await oldDatabase(1, versionOneRows(grant, token, () => '?'));
    await assertOldTokensDropped(new SqliteStore(file), sqliteInspector(file), { grant, token, now });
    const check = new Database(file, { readonly: true });
    assert.deepEqual((check.prepare('SELECT version FROM schema_migrations ORDER BY version').all() as { version: number }[]).map((row) => row.version), MIGRATIONS.map((migration) => migration.version));
    check.close();
  });

  it('migrates a version 2 database: subject claims and upstream sign-in state move to their own tables', async () => {
    const now = Date.now();
    const kept = transientRows(now);
    const file = await oldDatabase(2, kept.rows.map((values) => ({ text: 'INSERT INTO transient (kind, id, value, expires_at) VALUES (?, ?, ?, ?)', values })));
    await assertTransientKept(new SqliteStore(file), sqliteInspector(file), kept, now);
    const check = new Database(file, { readonly: true });
    assert.equal(check.prepare("SELECT name FROM sqlite_master WHERE name = 'transient'").get(), undefined, 'transient is gone');
    check.close();
  });

  it('migrates a version 3 database: keys, grants, codes, refresh tokens and sessions stay; keys can be retired', async () => {
    const kept = versionThreeRows(Date.now(), () => '?');
    const file = await oldDatabase(3, kept.rows);
    await assertVersionThreeKept(new SqliteStore(file), sqliteInspector(file), kept);
    const check = new Database(file, { readonly: true });
    assert.deepEqual((check.prepare('SELECT version FROM schema_migrations ORDER BY version').all() as { version: number }[]).map((row) => row.version), MIGRATIONS.map((migration) => migration.version));
    check.close();
  });

  it('migrates a version 4 database: grants, codes and tokens stay; a token rotated before reads as rotated long ago', async () => {
    const kept = versionFourRows(Date.now(), () => '?');
    const file = await oldDatabase(4, kept.rows);
    await assertVersionFourKept(new SqliteStore(file), sqliteInspector(file), kept);
    const check = new Database(file, { readonly: true });
    assert.deepEqual((check.prepare('SELECT version FROM schema_migrations ORDER BY version').all() as { version: number }[]).map((row) => row.version), MIGRATIONS.map((migration) => migration.version));
    check.close();
  });

  it('reports a busy database as StoreUnavailableError', async () => {
    const { StoreUnavailableError } = await import('../src/store/unavailable.js');
    const file = nextFile();
    const store = new SqliteStore(file);
    const blocker = new Database(file, { timeout: 0 });
    blocker.exec('BEGIN IMMEDIATE');
    try {
      const started = Date.now();
      await assert.rejects(store.saveSubjectClaims('s', {}, Date.now() + MINUTE), StoreUnavailableError);
      assert.ok(Date.now() - started >= 4000, 'waited for busy_timeout first');
    } finally {
      blocker.exec('ROLLBACK');
      blocker.close();
    }
    await store.saveSubjectClaims('s', {}, Date.now() + MINUTE);
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
    /** A schema of version `version` holding `rows` (statements in PostgreSQL's form). */
    const oldSchema = async (version: number, rows: readonly { text: string; values: readonly unknown[] }[]): Promise<string> => {
      const schema = `v${version}_${++schemas}`;
      await admin(async (client) => {
        await client.query(`CREATE SCHEMA ${schema}`);
        await client.query(`SET search_path TO ${schema}`);
        for (const statement of schemaAt(version, POSTGRES)) await client.query(statement);
        for (const row of rows) await client.query(row.text, [...row.values]);
      }, urlOf(database));
      return schema;
    };

    storeSuite('postgres', () => ({
      open: async () => {
        const schema = `suite_${++schemas}`;
        return { store: await openStore({ kind: 'postgres', url: urlOf(database), schema }), inspect: postgresInspector(urlOf(database), schema) };
      },
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

    it('migrates a version 1 schema: its grants stay, its refresh tokens (which name no grant) are dropped', async () => {
      const now = Date.now();
      const grant = makeGrant(now);
      const token = makeRefresh(grant, now);
      const schema = await oldSchema(1, versionOneRows(grant, token, (index) => `$${index}`));
      const store = await openStore({ kind: 'postgres', url: urlOf(database), schema });
      await assertOldTokensDropped(store, postgresInspector(urlOf(database), schema), { grant, token, now });
    });

    it('migrates a version 2 schema: subject claims and upstream sign-in state move to their own tables', async () => {
      const now = Date.now();
      const kept = transientRows(now);
      const schema = await oldSchema(2, kept.rows.map((values) => ({ text: 'INSERT INTO transient (kind, id, value, expires_at) VALUES ($1, $2, $3, $4)', values })));
      const store = await openStore({ kind: 'postgres', url: urlOf(database), schema });
      await assertTransientKept(store, postgresInspector(urlOf(database), schema), kept, now);
      const left = await admin(async (client) => (await client.query('SELECT 1 FROM information_schema.tables WHERE table_schema = $1 AND table_name = $2', [schema, 'transient'])).rowCount, urlOf(database));
      assert.equal(left, 0, 'transient is gone');
    });

    it('migrates a version 3 schema: keys, grants, codes, refresh tokens and sessions stay; keys can be retired', async () => {
      const kept = versionThreeRows(Date.now(), (index) => `$${index}`);
      const schema = await oldSchema(3, kept.rows);
      const store = await openStore({ kind: 'postgres', url: urlOf(database), schema });
      await assertVersionThreeKept(store, postgresInspector(urlOf(database), schema), kept);
      const versions = await admin(async (client) => (await client.query(`SELECT version FROM ${schema}.schema_migrations ORDER BY version`)).rows, urlOf(database));
      assert.deepEqual(versions.map((row: { version: number }) => row.version), MIGRATIONS.map((migration) => migration.version));
    });

    it('migrates a version 4 schema: grants, codes and tokens stay; a token rotated before reads as rotated long ago', async () => {
      const kept = versionFourRows(Date.now(), (index) => `$${index}`);
      const schema = await oldSchema(4, kept.rows);
      const store = await openStore({ kind: 'postgres', url: urlOf(database), schema });
      await assertVersionFourKept(store, postgresInspector(urlOf(database), schema), kept);
      const versions = await admin(async (client) => (await client.query(`SELECT version FROM ${schema}.schema_migrations ORDER BY version`)).rows, urlOf(database));
      assert.deepEqual(versions.map((row: { version: number }) => row.version), MIGRATIONS.map((migration) => migration.version));
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
          const exchanged = makeCode(grant, now);
          await first.createGrantWithCode(grant, exchanged);
          const token = makeRefresh(grant, now);
          assert.equal(await second.consumeCode(exchanged.digest, now, now + ACCESS_TOKEN_MS, token), true);
          const results = await Promise.all(
            Array.from({ length: 40 }, (_, index) => (index % 2 === 0 ? first : second).rotateRefreshToken(token.digest, makeRefresh(grant, now), now)),
          );
          assert.equal(results.filter(Boolean).length, 1);
          const code = makeCode(grant, now);
          await second.createGrantWithCode(makeGrant(now, { id: randomId('g') }), { ...code, grantId: grant.id });
          const consumed = await Promise.all(Array.from({ length: 20 }, (_, index) => (index % 2 === 0 ? first : second).consumeCode(code.digest, now, now + ACCESS_TOKEN_MS)));
          assert.equal(consumed.filter(Boolean).length, 1);
        }
      } finally {
        await first.close();
        await second.close();
      }
    });

    it('lets one of concurrent batches sharing a DPoP proof win across two instances sharing the database', async () => {
      const state = { kind: 'postgres' as const, url: urlOf(database), schema: 'used_once_race' };
      const [first, second] = await Promise.all([openStore(state), openStore(state)]);
      try {
        for (let round = 0; round < 5; round += 1) await assertOneBatchWins([first, second], Date.now());
      } finally {
        await first.close();
        await second.close();
      }
    });

    it('settles parallel refreshes within a grace across two instances: one rotation, the others siblings', async () => {
      const state = { kind: 'postgres' as const, url: urlOf(database), schema: 'grace' };
      const [first, second] = await Promise.all([openStore(state), openStore(state)]);
      try {
        for (let round = 0; round < 5; round += 1) {
          const now = Date.now() + round;
          const grant = makeGrant(now);
          const code = makeCode(grant, now);
          await first.createGrantWithCode(grant, code);
          const token = makeRefresh(grant, now);
          assert.equal(await second.consumeCode(code.digest, now, now + ACCESS_TOKEN_MS, token), true);
          const at = now + 1000;
          await assertRaceSettled(first, grant, token, await refreshRace([first, second], token, at), at);
        }
      } finally {
        await first.close();
        await second.close();
      }
    });

    it('never leaves a token of a grant one instance revokes while another adds siblings', async () => {
      const schema = 'revoke_race';
      const state = { kind: 'postgres' as const, url: urlOf(database), schema };
      const [first, second] = await Promise.all([openStore(state), openStore(state)]);
      try {
        const now = Date.now();
        for (let round = 0; round < 20; round += 1) {
          const grant = makeGrant(now);
          const code = makeCode(grant, now);
          await first.createGrantWithCode(grant, code);
          const token = makeRefresh(grant, now);
          assert.equal(await first.consumeCode(code.digest, now, now + ACCESS_TOKEN_MS, token), true);
          const added = Array.from({ length: 8 }, () => makeRefresh(grant, now));
          const add = (record: RefreshTokenRecord) => second.addRefreshToken(record, now);
          const at = round % (added.length + 1);
          await Promise.all([...added.slice(0, at).map(add), first.revokeGrant(grant.id), ...added.slice(at).map(add)]);
          assert.equal(await second.addRefreshToken(makeRefresh(grant, now), now), false);
        }
        const orphans = await admin(
          async (client) =>
            (await client.query(`SELECT count(*) AS n FROM ${schema}.refresh_tokens r WHERE NOT EXISTS (SELECT 1 FROM ${schema}.grants g WHERE g.id = r.grant_id)`)).rows,
          urlOf(database),
        );
        assert.deepEqual(orphans, [{ n: '0' }], 'no refresh token outlived its revoked grant');
        assert.equal(await postgresInspector(urlOf(database), schema).rows('refresh_tokens'), 0);
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
        assert.deepEqual(await store.findCode('none', Date.now()), { status: 'unknown' });
      } finally {
        await store.close();
      }
    });
  });
}

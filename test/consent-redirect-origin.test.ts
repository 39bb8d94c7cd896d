/**
 * A remembered consent is bound to where the code goes (DESIGN.md §8): (user, client, scope, resources, redirect
 * origin), a loopback host on any port being one origin. A client registered with a loopback and an https redirect
 * URI, consented for the loopback one, must not get a code silently at the other. The consent page shows a
 * registered client_uri only as what the client says. Over HTTP on every store, and across the schema migration.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import Database from 'better-sqlite3';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import pg from 'pg';
import type { Config } from '../src/config/types.js';
import { consentCovers, redirectOriginOf, widenConsent, type AskedAccess } from '../src/policy/consent.js';
import { POSTGRES, SQLITE } from '../src/store/dialect.js';
import { openStore } from '../src/store/open.js';
import { registeredClientParams } from '../src/store/rows.js';
import type { RegisteredClientRecord, Store } from '../src/store/types.js';
import { createPostgresDatabase, POSTGRES_SKIP_REASON, POSTGRES_URL, STORE_KINDS } from './helpers/databases.js';
import { appPerSuite, authorizeUrl, cookieJar, form, hiddenInput, PASSWORD, pkce, registerClient, testApp, type TestApp, testConfig } from './helpers/app.js';
import { schemaAt } from './helpers/store-inspect.js';

const MCP = 'https://mcp.example.org/mcp';
const LOOPBACK = 'http://127.0.0.1:5555/cb';
const ELSEWHERE = 'https://evil.example/cb';

function dynamicConfig(): Promise<Config> {
  return testConfig({
    dynamicClients: {
      audience: [MCP],
      metadataDocuments: false,
      registration: 'open',
      scopes: ['openid', 'mcp'],
      defaultScope: ['mcp'],
      refreshLifetimeMs: 3600_000,
      refreshReuseGraceMs: 0,
      allowPrivateAddresses: false,
    },
  });
}

const REGISTRATION = { redirect_uris: [LOOPBACK, ELSEWHERE], client_name: 'Claude', client_uri: 'https://claude.ai', grant_types: ['authorization_code', 'refresh_token'] };

async function register(app: FastifyInstance): Promise<string> {
  return (await registerClient(app, REGISTRATION)).clientId;
}

interface BrowserResult {
  /** Where the browser was sent outside Pinpoint (the client's redirect URI, with a code or an error). */
  readonly location: URL;
  readonly cookies: string;
  /** The consent pages shown on the way, in order. */
  readonly consentPages: readonly string[];
}

/** A browser: /authorize -> sign-in when needed -> consent when shown (allowed) -> the client's redirect URI. */
async function authorizeAsBrowser(app: FastifyInstance, clientId: string, redirectUri: string, options: { cookies?: string; prompt?: string } = {}): Promise<BrowserResult> {
  let cookies = options.cookies ?? '';
  const consentPages: string[] = [];
  let url = authorizeUrl([
    ['response_type', 'code'],
    ['client_id', clientId],
    ['redirect_uri', redirectUri],
    ['code_challenge', pkce().challenge],
    ['code_challenge_method', 'S256'],
    ['state', 'st-origin'],
    ...(options.prompt === undefined ? [] : [['prompt', options.prompt] as [string, string]]),
  ]);
  for (let hop = 0; hop < 10; hop++) {
    let response: LightMyRequestResponse = await app.inject({ url, headers: { cookie: cookies } });
    cookies = cookieJar(cookies, response);
    if (response.statusCode === 200) {
      const action = /<form method="post" action="([^"]+)"/.exec(response.body)?.[1];
      const fields: [string, string][] = [['csrf', hiddenInput(response.body, 'csrf')], ['login', hiddenInput(response.body, 'login')]];
      if (action === '/consent') consentPages.push(response.body);
      fields.push(...(action === '/login' ? [['username', 'alice'], ['password', PASSWORD]] as [string, string][] : [['decision', 'allow']] as [string, string][]));
      response = await app.inject({ method: 'POST', url: String(action), headers: { cookie: cookies, 'content-type': 'application/x-www-form-urlencoded' }, payload: form(fields) });
      cookies = cookieJar(cookies, response);
    }
    assert.equal(response.statusCode, 303, response.body);
    const next = String(response.headers.location);
    if (/^[a-z]+:/.test(next)) return { location: new URL(next), cookies, consentPages };
    url = next;
  }
  throw new Error('no redirect to the client after 10 hops');
}

/** /authorize with prompt=none: the redirect back, with a code or an error. */
async function silently(app: FastifyInstance, clientId: string, redirectUri: string, cookies: string): Promise<URL> {
  const result = await authorizeAsBrowser(app, clientId, redirectUri, { cookies, prompt: 'none' });
  assert.deepEqual(result.consentPages, []);
  return result.location;
}

const textOf = (page: string): string => page.replace(/<[^>]+>/g, '');

describe('the redirect origin of a consent (policy)', () => {
  test('scheme, host and port; a loopback host on any port is one origin', () => {
    assert.equal(redirectOriginOf('https://evil.example/cb'), 'https://evil.example');
    assert.equal(redirectOriginOf('https://evil.example:443/other?x=1'), 'https://evil.example', 'the default port is no port');
    assert.equal(redirectOriginOf('https://evil.example:8443/cb'), 'https://evil.example:8443');
    assert.equal(redirectOriginOf('https://EVIL.example/cb'), 'https://evil.example');
    assert.equal(redirectOriginOf('http://127.0.0.1:5555/cb'), redirectOriginOf('http://127.0.0.1:6000/callback'));
    assert.equal(redirectOriginOf('http://[::1]:5555/cb'), redirectOriginOf('http://[::1]/cb'));
    assert.equal(redirectOriginOf('http://localhost:5555/cb'), redirectOriginOf('http://localhost:1/cb'));
    assert.notEqual(redirectOriginOf('http://127.0.0.1:5555/cb'), redirectOriginOf('http://localhost:5555/cb'), 'another host is another origin');
    assert.notEqual(redirectOriginOf('https://127.0.0.1:5555/cb'), redirectOriginOf('https://127.0.0.1:6000/cb'), 'only loopback http is port-free (RFC 8252 §7.3)');
    assert.notEqual(redirectOriginOf('https://app.example/cb'), redirectOriginOf('http://app.example/cb'));
    assert.equal(redirectOriginOf('cursor://anysphere.cursor-mcp/oauth/callback'), 'cursor://anysphere.cursor-mcp');
    assert.notEqual(redirectOriginOf('com.example.app:/cb'), redirectOriginOf('com.other.app:/cb'));
  });

  test('a consent covers only its own origin; one without an origin (remembered before origins) covers none', () => {
    const asked = (redirectOrigin: string): AskedAccess => ({ scope: ['mcp'], resources: [], redirectOrigin, promptConsent: false, askedAt: 0 });
    const given = widenConsent(undefined, asked('http://127.0.0.1'), 1);
    assert.equal(given.redirectOrigin, 'http://127.0.0.1');
    assert.equal(consentCovers(given, asked('http://127.0.0.1')), true);
    assert.equal(consentCovers(given, asked('https://evil.example')), false);
    const { redirectOrigin: _dropped, ...legacy } = given;
    assert.equal(consentCovers(legacy, asked('http://127.0.0.1')), false);
    const wider = widenConsent(given, { ...asked('https://evil.example'), scope: ['openid'] }, 2);
    assert.deepEqual(wider.scope, ['openid'], 'another origin\'s consent is not merged into this one');
  });

  test('prompt=consent: a request made now counts no consent, even one of the same millisecond; on resume, one given since it was made counts', () => {
    const origin = 'http://127.0.0.1';
    const given = widenConsent(undefined, { scope: ['mcp'], resources: [], redirectOrigin: origin, promptConsent: false }, 1000);
    const prompted = { scope: ['mcp'], resources: [], redirectOrigin: origin, promptConsent: true };
    assert.equal(consentCovers(given, prompted), false, 'asked now: the remembered consent came before the request');
    assert.equal(consentCovers(given, { ...prompted, askedAt: 1000 }), true, 'resumed: given at the moment the request was made, or after');
    assert.equal(consentCovers(given, { ...prompted, askedAt: 1001 }), false, 'resumed: given before the request');
    assert.equal(consentCovers(given, { ...prompted, promptConsent: false }), true, 'without prompt=consent, remembered consent counts');
  });
});

for (const kind of STORE_KINDS) {
  describe(`consent is remembered per redirect origin on the ${kind.name} store`, { skip: kind.skip }, () => {
    let t: TestApp;
    let clientId: string;
    appPerSuite(kind, async () => ({ config: await dynamicConfig() }), async (opened) => {
      t = opened;
      clientId = await register(t.app);
    });

    test('consent for the loopback redirect URI: another redirect origin of the same client gets no code without a new consent', async () => {
      const first = await authorizeAsBrowser(t.app, clientId, LOOPBACK);
      assert.equal(first.consentPages.length, 1, 'a dynamic client is asked');
      assert.equal(`${first.location.origin}${first.location.pathname}`, LOOPBACK);
      assert.ok(first.location.searchParams.has('code'));

      const silent = await silently(t.app, clientId, ELSEWHERE, first.cookies);
      assert.equal(`${silent.origin}${silent.pathname}`, ELSEWHERE);
      assert.equal(silent.searchParams.get('error'), 'consent_required');
      assert.equal(silent.searchParams.get('code'), null, 'no code for the other origin');

      const asked = await authorizeAsBrowser(t.app, clientId, ELSEWHERE, { cookies: first.cookies });
      assert.equal(asked.consentPages.length, 1, 'the consent page, naming where the answer goes');
      assert.match(textOf(asked.consentPages[0] as string), /go back to evil\.example/);
      assert.ok(asked.location.searchParams.has('code'), 'allowed this time');

      // Both origins are now remembered, each on its own.
      assert.ok((await silently(t.app, clientId, ELSEWHERE, first.cookies)).searchParams.has('code'));
      assert.ok((await silently(t.app, clientId, LOOPBACK, first.cookies)).searchParams.has('code'));
    });

    test('the consent page shows the redirect URI\'s host, and a registered client_uri only as what the client says', async () => {
      const other = await register(t.app);
      const loopback = await authorizeAsBrowser(t.app, other, LOOPBACK);
      assert.match(textOf(loopback.consentPages[0] ?? ''), /go back to 127\.0\.0\.1:5555/);
      const elsewhere = await authorizeAsBrowser(t.app, other, ELSEWHERE, { cookies: loopback.cookies });
      const page = textOf(elsewhere.consentPages[0] ?? '');
      assert.match(page, /go back to evil\.example\./);
      assert.match(page, /It says it is from claude\.ai; this is not verified\./, 'self-asserted (DESIGN.md §8)');
      assert.doesNotMatch(page, /verified: /i, 'only a metadata document\'s URL host is verified');
    });

    test('consent for 127.0.0.1:5555 counts for 127.0.0.1:6000 (a loopback host on any port is one origin)', async () => {
      const other = await register(t.app);
      const first = await authorizeAsBrowser(t.app, other, LOOPBACK);
      assert.equal(first.consentPages.length, 1);
      const elsewhere = await silently(t.app, other, 'http://127.0.0.1:6000/cb', first.cookies);
      assert.equal(elsewhere.port, '6000');
      assert.ok(elsewhere.searchParams.has('code'), `remembered: ${elsewhere}`);
    });
  });
}

/** A registered client and a consent remembered before origins were kept (schema version 5), for `subject`. */
function versionFiveRows(placeholder: (index: number) => string): { client: RegisteredClientRecord; rows: { text: string; values: unknown[] }[] } {
  const now = Date.now();
  const client: RegisteredClientRecord = {
    clientId: `dyn_${'a'.repeat(32)}`,
    metadata: { redirect_uris: [LOOPBACK, ELSEWHERE], token_endpoint_auth_method: 'none', grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'], client_name: 'Claude', client_uri: 'https://claude.ai' },
    createdAt: now,
    expiresAt: now + 24 * 3600_000,
  };
  const insert = (table: string, columns: string, values: unknown[]) => ({ text: `INSERT INTO ${table} (${columns}) VALUES (${values.map((_, i) => placeholder(i + 1)).join(', ')})`, values });
  return {
    client,
    rows: [
      insert('registered_clients', 'client_id, secret_digest, metadata, created_at, expires_at', registeredClientParams(client)),
      // Everything the client may ask, the whole audience: before this change it covered every redirect URI.
      insert('consents', 'subject, client_id, scope, resources, whole_audience, granted_at', ['alice', client.clientId, JSON.stringify(['openid', 'mcp']), '[]', 1, now]),
    ],
  };
}

/** After the migration, the old consent counts for no origin: the person is asked again, at either redirect URI. */
async function assertOldConsentAskedAgain(store: Store, clientId: string): Promise<void> {
  const t = await testApp({ store, config: await dynamicConfig() });
  try {
    for (const redirectUri of [LOOPBACK, ELSEWHERE]) {
      const signIn = await authorizeAsBrowser(t.app, clientId, redirectUri);
      assert.equal(signIn.consentPages.length, 1, `asked again for ${redirectUri}`);
    }
  } finally {
    await t.app.close();
    await store.close();
  }
}

describe('a consent remembered before redirect origins were kept', () => {
  test('SQLite: after the migration it counts for no redirect origin', async () => {
    const folder = await mkdtemp(join(tmpdir(), 'pinpoint-consent-'));
    try {
      const file = join(folder, 'pinpoint.db');
      const db = new Database(file);
      for (const statement of schemaAt(5, SQLITE)) db.exec(statement);
      const { client, rows } = versionFiveRows(() => '?');
      for (const row of rows) db.prepare(row.text).run(...row.values);
      db.close();
      await assertOldConsentAskedAgain(await openStore({ kind: 'sqlite', path: file }), client.clientId);
    } finally {
      await rm(folder, { recursive: true, force: true });
    }
  });

  test('PostgreSQL: after the migration it counts for no redirect origin', { skip: POSTGRES_URL === undefined ? POSTGRES_SKIP_REASON : false }, async () => {
    const database = await createPostgresDatabase();
    try {
      const { client, rows } = versionFiveRows((index) => `$${index}`);
      const admin = new pg.Client({ connectionString: database.url });
      await admin.connect();
      try {
        for (const statement of schemaAt(5, POSTGRES)) await admin.query(statement);
        for (const row of rows) await admin.query(row.text, row.values);
      } finally {
        await admin.end();
      }
      await assertOldConsentAskedAgain(await openStore({ kind: 'postgres', url: database.url, schema: 'public' }), client.clientId);
    } finally {
      await database.drop();
    }
  });
});

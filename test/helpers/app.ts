/** Builds a Pinpoint app for tests (memory store unless told otherwise) and drives it like a browser/client. */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { after, before } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { buildApp } from '../../src/app.js';
import type { AppLimits, AppServices } from '../../src/context.js';
import type { ClientRecord, Config, DynamicClientsConfig, UserRecord } from '../../src/config/types.js';
import { hashPassword } from '../../src/crypto/password.js';
import { MemoryStore } from '../../src/store/memory.js';
import type { Store } from '../../src/store/types.js';
import type { StoreKind } from './databases.js';
import { loadSigningKeys } from './keys.js';

export const ISSUER = 'http://127.0.0.1:8080';
export const REDIRECT = 'http://127.0.0.1:9000/callback';
export const SECRET = 'webapp-secret';
export const AUDIENCE = ['https://api.example.org/', 'https://files.example.org', 'billing', 'https://docs.example.org/#v2', 'https://q.example.org/x?y=1'];
export const PASSWORD = 'correct horse';

let aliceHash: Promise<string> | undefined;

export function client(overrides: Partial<ClientRecord> & { clientId: string }): ClientRecord {
  return {
    kind: 'public',
    redirectUris: [REDIRECT],
    audience: AUDIENCE,
    scopes: ['openid', 'profile', 'email'],
    postLogoutRedirectUris: [],
    idTokenSigningAlg: 'RS256',
    refreshReuseGraceMs: 0,
    ...overrides,
  };
}

export async function testConfig(overrides: Partial<Config> = {}): Promise<Config> {
  // Hashes with older (cheaper) parameters keep verifying; a cheap one keeps the many test sign-ins fast.
  aliceHash ??= hashPassword(PASSWORD, { N: 2 ** 14, r: 8, p: 1 });
  const alice: UserRecord = { username: 'alice', passwordHash: await aliceHash, email: 'alice@example.org', name: 'Alice Example' };
  const clients = [
    client({ clientId: 'webapp', kind: 'confidential', secret: SECRET, refreshLifetimeMs: 720 * 3600_000, scopes: ['openid', 'profile', 'email', 'ssh'] }),
    client({ clientId: 'spa', refreshLifetimeMs: 3600_000 }),
    client({ clientId: 'norefresh', kind: 'confidential', secret: SECRET }),
    client({ clientId: 'service', kind: 'confidential', secret: SECRET, redirectUris: [], scopes: ['read', 'write', 'nfs'] }),
    client({ clientId: 'tv', kind: 'device', redirectUris: [], audience: ['https://api.example.org/'], refreshLifetimeMs: 3600_000 }),
  ];
  return {
    file: '/test/config.hcl',
    baseUrl: ISSUER,
    basePath: '',
    listen: { host: '127.0.0.1', port: 8080 },
    accessTokenLifetimeMs: 3600_000,
    logLevel: 'silent',
    tls: { mode: 'off' },
    state: { kind: 'memory' },
    users: new Map([['alice', alice]]),
    federations: new Map(),
    clients: new Map(clients.map((c) => [c.clientId, c])),
    trustedProxies: [],
    limits: { clientFailures: 300, addressFailures: 300, loginFailures: 10, loginFailuresAny: 100, userCodeFailures: 20, passwordHashes: 2, addressConnections: 1024 },
    resourceServers: new Map(),
    ...overrides,
  };
}

/** Client ID metadata documents on, registration off, documents fetched from this machine (a test HTTPS server on 127.0.0.1). */
export const LOOPBACK_DOCUMENT_CLIENTS: DynamicClientsConfig = {
  audience: ['https://mcp.example.org/mcp'],
  metadataDocuments: true,
  registration: 'off',
  scopes: ['openid', 'mcp'],
  defaultScope: ['mcp'],
  refreshReuseGraceMs: 0,
  allowPrivateAddresses: true,
};

export interface TestApp {
  readonly app: FastifyInstance;
  readonly ctx: AppServices;
  readonly store: Store;
}

export async function testApp(
  options: {
    config?: Config;
    store?: Store;
    now?: () => number;
    limits?: Partial<AppLimits>;
    logger?: import('pino').Logger;
    metrics?: import('../../src/http/metrics.js').Metrics;
    keys?: import('../../src/crypto/keys.js').KeyRing;
    /** How many workers this app is one of (DESIGN.md §11): its share of the failure limits. */
    workers?: number;
  } = {},
): Promise<TestApp> {
  const config = options.config ?? (await testConfig());
  const store = options.store ?? new MemoryStore();
  const keys = options.keys ?? (await loadSigningKeys(store));
  // Tests that send many sign-ins at once are about limits, not the hashing pool's 5 s wait: a busy CI machine may take longer.
  const limits = { passwordWaitMs: 120_000, ...options.limits };
  const { app, ctx } = await buildApp({ config, store, keys, now: options.now, limits, logger: options.logger, metrics: options.metrics, ...(options.workers !== undefined && { workers: options.workers }) });
  await app.ready();
  return { app, ctx, store };
}

/**
 * One app on a fresh store of `kind` for the enclosing describe: opened before its tests (`ready` gets it), then closed
 * and its database removed after them.
 */
export function appPerSuite(
  kind: StoreKind,
  options: () => Promise<Omit<Parameters<typeof testApp>[0] & object, 'store'>>,
  ready: (opened: TestApp) => void | Promise<void>,
): void {
  let opened: TestApp | undefined;
  let cleanup: () => Promise<void> = async () => undefined;
  before(async () => {
    const fresh = await kind.open();
    cleanup = fresh.cleanup;
    opened = await testApp({ ...(await options()), store: fresh.store });
    await ready(opened);
  });
  after(async () => {
    await opened?.app.close();
    await opened?.store.close();
    await cleanup();
  });
}

export function basic(id: string, secret: string): string {
  return `Basic ${Buffer.from(`${encodeURIComponent(id)}:${encodeURIComponent(secret)}`).toString('base64')}`;
}

export function pkce(): { verifier: string; challenge: string } {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

/** Form body from pairs, so repeats can be sent. */
export function form(pairs: readonly (readonly [string, string])[]): string {
  const body = new URLSearchParams();
  for (const [name, value] of pairs) body.append(name, value);
  return body.toString();
}

export function authorizeUrl(pairs: readonly (readonly [string, string])[], basePath = ''): string {
  return `${basePath}/authorize?${form(pairs)}`;
}

/** A valid authorization request of `webapp` (scope openid, PKCE S256), plus `extra` parameters. */
export function webappAuthorizeUrl(extra: readonly (readonly [string, string])[] = [], basePath = ''): string {
  return authorizeUrl(
    [['response_type', 'code'], ['client_id', 'webapp'], ['redirect_uri', REDIRECT], ['scope', 'openid'], ['code_challenge', pkce().challenge], ['code_challenge_method', 'S256'], ...extra],
    basePath,
  );
}

/** /authorize with prompt=none for `webapp` with these cookies: the redirect back, with a code when the session is live. */
export async function authorizeSilently(app: FastifyInstance, cookies: string): Promise<URL> {
  const response = await app.inject({ url: webappAuthorizeUrl([['prompt', 'none']]), headers: { cookie: cookies } });
  return new URL(String(response.headers.location));
}

/** The cookies a response sets, as a Cookie header value merged with the earlier ones. */
export function cookieJar(previous: string, response: LightMyRequestResponse): string {
  const jar = new Map<string, string>();
  for (const part of previous.split('; ').filter(Boolean)) {
    const eq = part.indexOf('=');
    jar.set(part.slice(0, eq), part.slice(eq + 1));
  }
  const set = response.headers['set-cookie'];
  for (const line of Array.isArray(set) ? set : set === undefined ? [] : [set]) {
    const [pair] = line.split(';');
    const eq = (pair as string).indexOf('=');
    jar.set((pair as string).slice(0, eq), (pair as string).slice(eq + 1));
  }
  return [...jar].map(([name, value]) => `${name}=${value}`).join('; ');
}

export function hiddenInput(html: string, name: string): string {
  const match = new RegExp(`name="${name}" value="([^"]*)"`).exec(html);
  if (match === null) throw new Error(`no hidden input ${name} in page`);
  return match[1] as string;
}

export interface AuthorizeOptions {
  readonly clientId?: string;
  readonly redirectUri?: string;
  readonly scope?: string;
  readonly resources?: readonly string[];
  readonly nonce?: string;
  readonly state?: string;
  readonly extra?: readonly (readonly [string, string])[];
  /** Who signs in (a local user with PASSWORD); alice by default. */
  readonly username?: string;
}

/** Runs /authorize -> sign-in form -> POST credentials and returns the code and the verifier. */
export async function signInForCode(app: FastifyInstance, options: AuthorizeOptions = {}): Promise<{ code: string; verifier: string; location: URL; cookies: string }> {
  const { verifier, challenge } = pkce();
  const pairs: (readonly [string, string])[] = [
    ['response_type', 'code'],
    ['client_id', options.clientId ?? 'webapp'],
    ['redirect_uri', options.redirectUri ?? REDIRECT],
    ['scope', options.scope ?? 'openid profile email'],
    ['state', options.state ?? 'st-1'],
    ['code_challenge', challenge],
    ['code_challenge_method', 'S256'],
    ...(options.nonce === undefined ? [] : [['nonce', options.nonce] as [string, string]]),
    ...(options.resources ?? []).map((resource) => ['resource', resource] as [string, string]),
    ...(options.extra ?? []),
  ];
  const start = await app.inject({ method: 'GET', url: authorizeUrl(pairs) });
  if (start.statusCode !== 303) throw new Error(`authorize answered ${start.statusCode}: ${start.body}`);
  let cookies = cookieJar('', start);
  const loginPage = await app.inject({ method: 'GET', url: start.headers.location as string, headers: { cookie: cookies } });
  cookies = cookieJar(cookies, loginPage);
  const submitted = await app.inject({
    method: 'POST',
    url: '/login',
    headers: { cookie: cookies, 'content-type': 'application/x-www-form-urlencoded' },
    payload: form([
      ['csrf', hiddenInput(loginPage.body, 'csrf')],
      ['login', hiddenInput(loginPage.body, 'login')],
      ['username', options.username ?? 'alice'],
      ['password', PASSWORD],
    ]),
  });
  if (submitted.statusCode !== 303) throw new Error(`login answered ${submitted.statusCode}: ${submitted.body}`);
  cookies = cookieJar(cookies, submitted);
  const resumed = await resumeAuthorization(app, submitted, cookies);
  cookies = resumed.cookies;
  const location = new URL(resumed.response.headers.location as string);
  const code = location.searchParams.get('code');
  if (code === null) throw new Error(`no code in ${location}`);
  return { code, verifier, location, cookies };
}

/** Follows sign-in's redirect to /authorize/resume, as a browser would, and returns its answer (the redirect to the client). */
export async function resumeAuthorization(
  app: FastifyInstance,
  signedIn: LightMyRequestResponse,
  cookies: string,
): Promise<{ response: LightMyRequestResponse; cookies: string }> {
  const target = signedIn.headers.location as string;
  if (!target.includes('/authorize/resume?')) throw new Error(`sign-in did not send the browser to /authorize/resume: ${target}`);
  const response = await app.inject({ method: 'GET', url: target, headers: { cookie: cookies } });
  if (response.statusCode !== 303) throw new Error(`resume answered ${response.statusCode}: ${response.body}`);
  return { response, cookies: cookieJar(cookies, response) };
}

/** POST /token; `auth` null sends no Authorization header (public clients). */
export async function postToken(
  app: FastifyInstance,
  pairs: readonly (readonly [string, string])[],
  auth: string | null = basic('webapp', SECRET),
): Promise<LightMyRequestResponse> {
  return app.inject({
    method: 'POST',
    url: '/token',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...(auth === null ? {} : { authorization: auth }) },
    payload: form(pairs),
  });
}

/** Code exchange for `webapp` with optional resources. */
export async function exchangeCode(
  app: FastifyInstance,
  grant: { code: string; verifier: string },
  resources: readonly string[] = [],
  auth: string | null = basic('webapp', SECRET),
): Promise<LightMyRequestResponse> {
  return postToken(
    app,
    [
      ['grant_type', 'authorization_code'],
      ['code', grant.code],
      ['redirect_uri', REDIRECT],
      ['code_verifier', grant.verifier],
      ...resources.map((resource) => ['resource', resource] as [string, string]),
    ],
    auth,
  );
}

export async function refresh(
  app: FastifyInstance,
  refreshToken: string,
  resources: readonly string[] = [],
  extra: readonly (readonly [string, string])[] = [],
  auth: string | null = basic('webapp', SECRET),
): Promise<LightMyRequestResponse> {
  return postToken(
    app,
    [['grant_type', 'refresh_token'], ['refresh_token', refreshToken], ...resources.map((r) => ['resource', r] as [string, string]), ...extra],
    auth,
  );
}

/** POST /register (RFC 7591) with `metadata` as JSON; asserts 201 and returns the client's id and secret (if given one). */
export async function registerClient(app: FastifyInstance, metadata: Record<string, unknown>): Promise<{ clientId: string; secret?: string }> {
  const response = await app.inject({ method: 'POST', url: '/register', headers: { 'content-type': 'application/json' }, payload: JSON.stringify(metadata) });
  assert.equal(response.statusCode, 201, response.body);
  const { client_id: clientId, client_secret: secret } = response.json() as { client_id: string; client_secret?: string };
  return { clientId, ...(secret !== undefined && { secret }) };
}

/** The payload of a JWT without verifying it (tests verify separately where it matters). */
export function claimsOf(jwt: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(jwt.split('.')[1] as string, 'base64url').toString('utf8')) as Record<string, unknown>;
}

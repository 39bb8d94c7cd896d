/**
 * Pinpoint as the benchmark runs it, from dist/ as `npm start` does: buildApp + openStore with the production logger (info, one access-log
 * line per request, to this process's stdout, which the runner points at a file) and the production sweep,
 * on loopback. Refresh tokens and codes are created on request through the Store API, as the grants would.
 * Settings come as JSON in BENCH_PINPOINT: { state: "sqlite" | "memory" | "postgres", path?: string, url?: string }
 * (path: the SQLite file; url: the PostgreSQL database, schema public, which several instances may share).
 */
import { randomUUID } from 'node:crypto';
import { relative } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import type { ClientRecord, Config, StateConfig } from '../src/config/types.js';
import type { AuthorizationCodeRecord, Grant, Store } from '../src/store/types.js';
import {
  API,
  AUDIENCE,
  BASIC_AUTH,
  CLIENT_ID,
  CLIENT_SECRET,
  EXCHANGE_AUDIENCE,
  EXCHANGE_CLIENT_ID,
  EXCHANGE_CLIENT_SECRET,
  freePort,
  mapInBatches,
  REDIRECT_URI,
  REFRESH_LIFETIME_MS,
  SCOPE,
  SEEDED_CODE_LIFETIME_MS,
  serveRpc,
  shuffled,
  subjectOf,
  UPSTREAM,
} from './common.js';
import { profilerCommands } from './inspector.js';
import { challengeOf, newVerifier } from './pkce.js';
import { buildApp, createLogger, createMetrics, deepFreeze, frozenMap, JWT_MODULE, KeyRing, newRefreshToken, newSecret, openStore } from './pinpoint-modules.js';
import { serverCommands } from './server-commands.js';

/** serve() sweeps this often (src/server.ts); the benchmark server does the same work. */
const SWEEP_INTERVAL_MS = 60_000;

const settings = JSON.parse(process.env.BENCH_PINPOINT ?? '{}') as { state?: 'sqlite' | 'memory' | 'postgres'; path?: string; url?: string };
// As the config's `state { path = ... }` or `state { url = ... }` block reads; none: memory.
const state: StateConfig =
  settings.state === 'sqlite' && settings.path !== undefined
    ? { kind: 'sqlite', path: settings.path }
    : settings.state === 'postgres' && settings.url !== undefined
      ? { kind: 'postgres', url: settings.url, schema: 'public' }
      : { kind: 'memory' };

const port = await freePort();
const client: ClientRecord = {
  clientId: CLIENT_ID,
  kind: 'confidential',
  secret: CLIENT_SECRET,
  redirectUris: [REDIRECT_URI],
  audience: [...AUDIENCE],
  refreshLifetimeMs: REFRESH_LIFETIME_MS,
  scopes: [SCOPE],
  postLogoutRedirectUris: [],
  idTokenSigningAlg: 'RS256',
  refreshReuseGraceMs: 0,
};
// DESIGN.md §12: the resource server at API calling others on a person's behalf, with the tokens for API it receives.
const exchangeClient: ClientRecord = {
  clientId: EXCHANGE_CLIENT_ID,
  kind: 'confidential',
  secret: EXCHANGE_CLIENT_SECRET,
  redirectUris: [],
  audience: [...EXCHANGE_AUDIENCE],
  scopes: [SCOPE],
  postLogoutRedirectUris: [],
  idTokenSigningAlg: 'RS256',
  refreshReuseGraceMs: 0,
  tokenExchange: { subjectAudience: [API] },
};
// Shaped and frozen as config/load.ts leaves a loaded configuration, with its defaults. Not read from a file by the
// loader: its HCL parser adds about 50 MB of resident memory, which would move the RSS figures off earlier runs'.
const config: Config = deepFreeze({
  file: '/bench/pinpoint.hcl',
  baseUrl: `http://127.0.0.1:${port}`,
  basePath: '',
  listen: { host: '127.0.0.1', port },
  accessTokenLifetimeMs: 3600_000,
  logLevel: 'info',
  tls: { mode: 'off' },
  state,
  users: frozenMap([]),
  // Never contacted: it makes the seeded grants' subjects (common.ts subjectOf) known.
  federations: frozenMap([[UPSTREAM, { name: UPSTREAM, issuer: 'https://idp.example.org', clientId: 'pinpoint', clientSecret: 'unused', scopes: ['openid'] }]]),
  clients: frozenMap([
    [client.clientId, client],
    [exchangeClient.clientId, exchangeClient],
  ]),
  trustedProxies: [],
  // DESIGN.md §4's defaults (config/schema.ts DEFAULT_LIMITS), written out: importing the schema loads zod (5 MB).
  limits: { clientFailures: 300, addressFailures: 300, loginFailures: 10, loginFailuresAny: 100, userCodeFailures: 20, passwordHashes: 2, addressConnections: 1024 },
  resourceServers: frozenMap([]),
});

const logger = createLogger(config.logLevel);
// BENCH_STORE_MODULE: a module exporting another SqliteStore, to measure a change before making it in src/.
const variant = process.env.BENCH_STORE_MODULE;
const store =
  variant !== undefined && config.state.kind === 'sqlite'
    ? new ((await import(variant)) as { SqliteStore: new (path: string) => Store }).SqliteStore(config.state.path)
    : await openStore(config.state, { warn: (message) => logger.warn(message) });
// As serve() (src/server.ts) runs: keys re-read from the store on a timer, metrics with the process collectors.
const keys = await KeyRing.open(store);
keys.start((error) => logger.warn({ err: { message: (error as Error).message } }, 'signing keys could not be re-read'));
const { app } = await buildApp({ config, store, keys, logger, metrics: createMetrics({ processMetrics: true }) });
const sweep = setInterval(() => {
  store.sweep(Date.now()).catch((error: unknown) => logger.warn({ err: { message: (error as Error).message } }, 'sweep failed'));
}, SWEEP_INTERVAL_MS);
sweep.unref();

function newGrant(now: number, index: number): Grant {
  return {
    id: randomUUID(),
    clientId: CLIENT_ID,
    subject: subjectOf(index),
    scope: [SCOPE],
    resources: [...AUDIENCE],
    claims: {},
    authTime: now,
    createdAt: now,
    expiresAt: now + REFRESH_LIFETIME_MS,
  };
}

const loopDelay = monitorEventLoopDelay({ resolution: 1 });
loopDelay.enable();

let seeded = 0;

/**
 * Store calls issued together, in order, then awaited: the SQLite store commits each such batch at once. On PostgreSQL
 * fewer: a call waits at most 2 s for one of the pool's connections before the store counts as unavailable.
 */
// PostgreSQL: twice the pool's 10 connections at most, so no call waits for a connection past the store's 2 s on a busy machine.
const SEED_BATCH = state.kind === 'postgres' ? 20 : 500;

/** `count` pool lines, each from `seedOne`, whose store calls are issued SEED_BATCH items at a time and awaited per batch. */
async function seedInBatches(count: number, seedOne: () => { calls: Promise<unknown>[]; line: string }): Promise<string[]> {
  const lines: string[] = [];
  for (let done = 0; done < count; done += SEED_BATCH) {
    const calls: Promise<unknown>[] = [];
    for (let i = done; i < Math.min(count, done + SEED_BATCH); i += 1) {
      const one = seedOne();
      calls.push(...one.calls);
      lines.push(one.line);
    }
    await Promise.all(calls);
  }
  return lines;
}

/** The code /authorize would have stored for `grant`, and its verifier. */
function newCode(grant: Grant, now: number): { record: AuthorizationCodeRecord; value: string; verifier: string } {
  const code = newSecret();
  const verifier = newVerifier();
  const record = {
    digest: code.digest,
    grantId: grant.id,
    clientId: CLIENT_ID,
    redirectUri: REDIRECT_URI,
    codeChallenge: challengeOf(verifier),
    expiresAt: now + SEEDED_CODE_LIFETIME_MS,
  };
  return { record, value: code.value, verifier };
}

/**
 * The state a code exchange leaves behind (grant, used code, refresh token), `count` times; one token per
 * line, shuffled: clients refresh in no particular order, not in the order their grants were made.
 */
async function seedRefreshTokens(count: number): Promise<string[]> {
  const lines = await seedInBatches(count, () => {
    const now = Date.now();
    const grant = newGrant(now, (seeded += 1));
    const code = newCode(grant, now);
    const refresh = newRefreshToken(grant.id, now, REFRESH_LIFETIME_MS);
    // In order: on PostgreSQL the two calls may otherwise run on two connections, the code's use first.
    const made = store
      .createGrantWithCode(grant, code.record)
      .then(() => store.consumeCode(code.record.digest, now, now + config.accessTokenLifetimeMs, refresh.record))
      .then((consumed) => {
        if (!consumed) throw new Error('a seeded code was not consumed: its refresh token would be refused');
      });
    return { calls: [made], line: refresh.value };
  });
  return shuffled(lines);
}

/** The state /authorize leaves behind (grant bound to both resources, code with an S256 challenge); "code verifier" per line. */
async function seedCodes(count: number): Promise<string[]> {
  return seedInBatches(count, () => {
    const now = Date.now();
    const grant = newGrant(now, (seeded += 1));
    const code = newCode(grant, now);
    return { calls: [store.createGrantWithCode(grant, code.record)], line: `${code.value} ${code.verifier}` };
  });
}

/** Access tokens for API as a client gets them, one refresh-token exchange each (so each names a live grant). */
async function seedAccessTokens(count: number): Promise<string[]> {
  // 16 exchanges in flight, through the app's own /token (inject: no socket needed to make the pool).
  return mapInBatches(await seedRefreshTokens(count), 16, async (refreshToken) => {
    const response = await app.inject({
      method: 'POST',
      url: '/token',
      headers: { authorization: BASIC_AUTH, 'content-type': 'application/x-www-form-urlencoded' },
      payload: `grant_type=refresh_token&refresh_token=${encodeURIComponent(refreshToken)}&resource=${encodeURIComponent(API)}`,
    });
    if (response.statusCode !== 200) throw new Error(`seeding an access token: ${response.statusCode} ${response.body}`);
    return (response.json() as { access_token: string }).access_token;
  });
}

serveRpc({
  ...profilerCommands(),
  ...serverCommands({ refresh: seedRefreshTokens, code: seedCodes, access: seedAccessTokens }),
  /** The module that signs this server's JWTs (bench/legacy-signing.ts may have put another in place) and, for that one, how many it signed. */
  async signing() {
    const url = import.meta.resolve(JWT_MODULE);
    const module = (await import(url)) as { legacySignatures?: () => number };
    return { module: relative(fileURLToPath(new URL('..', import.meta.url)), fileURLToPath(url)), signatures: module.legacySignatures?.() };
  },
  /** Event-loop delay since the last call (ms): what stalls every request in flight at once. */
  loopDelay() {
    const summary = { p50: loopDelay.percentile(50) / 1e6, p99: loopDelay.percentile(99) / 1e6, max: loopDelay.max / 1e6 };
    loopDelay.reset();
    return summary;
  },
  async stop() {
    clearInterval(sweep);
    keys.stop();
    await app.close();
    await store.close();
    logger.flush();
    setImmediate(() => process.exit(0));
    return true;
  },
});

await app.listen({ host: config.listen.host, port: config.listen.port });
process.send?.({ ready: true, port, issuer: config.baseUrl, state: store.description });

/**
 * The load driver: autocannon in its own process (pinned by the runner to the core the servers do not use).
 * It holds the pools of pre-created refresh tokens and codes, gives every request a fresh one, verifies
 * every response (status, JSON, token_type, `aud` of the access token, refresh token present) and keeps
 * the latencies of each series so percentiles cover all of a server's measured segments. It also makes the pools of
 * DPoP proofs (RFC 9449) itself, with jose, right before the run that spends them: a proof is used once and its iat
 * must be within 60 s of the server's clock.
 */
import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import autocannon, { type AutocannonRequest } from 'autocannon';
import { calculateJwkThumbprint, createLocalJWKSet, exportJWK, generateKeyPair, jwtVerify, SignJWT, type CryptoKey, type JSONWebKeySet, type JWK } from 'jose';
import { API, BASIC_AUTH, jwtPayload, mapInBatches, REDIRECT_URI, serveRpc } from './common.js';

export type BodySpec =
  | { readonly kind: 'static'; readonly text: string }
  | { readonly kind: 'refresh'; readonly pool: string }
  | { readonly kind: 'code'; readonly pool: string }
  /** token=<a line of the pool>, the lines taken in turn over and over (introspection spends nothing). */
  | { readonly kind: 'introspect'; readonly pool: string }
  /** RFC 8693 token exchange of a line of the pool (an access token, reused in turn like introspection's) for `resource`. */
  | { readonly kind: 'exchange'; readonly pool: string; readonly resource: string };

export interface Expectation {
  /** "token": an OAuth token response; "active": an introspection answer with active true; "plain": any JSON (the bare floor route). */
  readonly shape: 'token' | 'active' | 'plain';
  readonly aud?: string | readonly string[];
  readonly refreshToken?: boolean;
  /** The first access token of each run is verified against this server's /jwks (signature, typ at+jwt, iss). */
  readonly issuer?: string;
  /** The response's token_type (default Bearer); DPoP: the sampled tokens' cnf.jkt must be the proof key's (RFC 9449 §6.1). */
  readonly tokenType?: 'Bearer' | 'DPoP';
  /** The sampled tokens' act.sub (RFC 8693 §4.1): the client that exchanged them. */
  readonly actor?: string;
}

export interface RunSpec {
  readonly port: number;
  readonly path: string;
  readonly connections: number;
  readonly seconds: number;
  readonly body: BodySpec;
  readonly expect: Expectation;
  /** Latencies are kept under this name (measured segments); absent for warm-ups. */
  readonly series?: string;
  /** The Authorization header (default: the bench client's HTTP Basic). */
  readonly authorization?: string;
  /** A pool of DPoP proofs (made by `proofs`): each request carries the next one in its DPoP header, each used once. */
  readonly proofs?: string;
}

export interface RunResult {
  readonly responses: number;
  readonly seconds: number;
  readonly non2xx: number;
  readonly errors: number;
  readonly timeouts: number;
  /** Responses that were 200 but not what the case expects (wrong aud, no refresh token, not JSON...). */
  readonly invalid: number;
  readonly firstInvalid?: string;
  /** Requests sent with a spent pool (no fresh token left): the run is void. */
  readonly exhausted: number;
  /** Responses per 0.5 s, to show that the first seconds are not slower. */
  readonly perHalfSecond: readonly number[];
  /** CPU the driver used, as a share of one core. */
  readonly driverCpu: number;
}

const ENCODED_API = encodeURIComponent(API);
/** RFC 8693 §2.1: the grant and the subject token's type, URL-encoded once. */
const EXCHANGE_PREFIX =
  `grant_type=${encodeURIComponent('urn:ietf:params:oauth:grant-type:token-exchange')}` +
  `&subject_token_type=${encodeURIComponent('urn:ietf:params:oauth:token-type:access_token')}`;
const ENCODED_REDIRECT = encodeURIComponent(REDIRECT_URI);

const pools = new Map<string, { items: string[]; next: number }>();
/** One key per proof pool (a client keeps its DPoP key), and the RFC 7638 thumbprint its tokens are bound to. */
const proofKeys = new Map<string, { readonly privateKey: CryptoKey; readonly jwk: JWK; readonly jkt: string }>();
/** The most proofs one `proofs` call makes: a bound on the time it takes (about 10,000 ES256 signatures a second). */
const MAX_PROOFS = 200_000;
const keySets = new Map<string, ReturnType<typeof createLocalJWKSet>>();

/** Why the access token's signature or header does not verify, or undefined when it does. */
async function signatureProblem(issuer: string, body: string): Promise<string | undefined> {
  try {
    let keys = keySets.get(issuer);
    if (keys === undefined) {
      const response = await fetch(`${issuer}/jwks`);
      keys = createLocalJWKSet((await response.json()) as JSONWebKeySet);
      keySets.set(issuer, keys);
    }
    const token = (JSON.parse(body) as { access_token: string }).access_token;
    await jwtVerify(token, keys, { issuer, typ: 'at+jwt' });
    return undefined;
  } catch (error) {
    return `access token does not verify: ${(error as Error).message}`;
  }
}
const series = new Map<string, number[]>();

function take(poolName: string): string | undefined {
  const pool = pools.get(poolName);
  if (pool === undefined || pool.next >= pool.items.length) return undefined;
  const item = pool.items[pool.next] as string;
  pool.items[pool.next] = '';
  pool.next += 1;
  return item;
}

/** The pool's lines in turn, starting over at the end: for pools whose lines are not spent by use. */
function cycle(poolName: string): string | undefined {
  const pool = pools.get(poolName);
  if (pool === undefined || pool.items.length === 0) return undefined;
  const item = pool.items[pool.next % pool.items.length] as string;
  pool.next += 1;
  return item;
}

function sameAudience(actual: unknown, expected: string | readonly string[]): boolean {
  if (typeof expected === 'string') return actual === expected;
  return Array.isArray(actual) && actual.length === expected.length && expected.every((entry, i) => actual[i] === entry);
}

/** Why a 200 body is not what the case expects, or undefined when it is; `jkt`: the thumbprint of the run's proof key. */
function problemWith(body: string, expect: Expectation, jkt?: string): string | undefined {
  let parsed: Record<string, unknown>;
  try {
    parsed = JSON.parse(body) as Record<string, unknown>;
  } catch {
    return `not JSON: ${body.slice(0, 80)}`;
  }
  if (expect.shape === 'plain') return undefined;
  if (expect.shape === 'active') return parsed.active === true ? undefined : `active ${String(parsed.active)}`;
  const tokenType = expect.tokenType ?? 'Bearer';
  if (parsed.token_type !== tokenType) return `token_type ${String(parsed.token_type)}, expected ${tokenType}`;
  if (typeof parsed.access_token !== 'string') return 'no access_token';
  const claims = jwtPayload(parsed.access_token);
  if (expect.aud !== undefined && !sameAudience(claims.aud, expect.aud)) return `aud ${JSON.stringify(claims.aud)}, expected ${JSON.stringify(expect.aud)}`;
  if (tokenType === 'DPoP') {
    const bound = (claims.cnf as { jkt?: unknown } | undefined)?.jkt;
    if (bound !== jkt) return `cnf.jkt ${JSON.stringify(bound)}, expected the proof key's ${String(jkt)}`;
  }
  if (expect.actor !== undefined && (claims.act as { sub?: unknown } | undefined)?.sub !== expect.actor) {
    return `act ${JSON.stringify(claims.act)}, expected act.sub ${expect.actor}`;
  }
  if (expect.refreshToken !== undefined && (typeof parsed.refresh_token === 'string') !== expect.refreshToken) {
    return expect.refreshToken ? 'no refresh_token' : 'unexpected refresh_token';
  }
  return undefined;
}

/** The check every response gets: the body has the fields the case expects (problemWith parses and decodes). */
function quickProblem(body: string, expect: Expectation): string | undefined {
  if (expect.shape === 'plain') return body.startsWith('{') ? undefined : `not JSON: ${body.slice(0, 80)}`;
  if (expect.shape === 'active') return body.includes('"active":true') ? undefined : 'not active';
  if (!body.startsWith('{"access_token":"') && !body.includes('"access_token":"')) return 'no access_token';
  const tokenType = expect.tokenType ?? 'Bearer';
  if (!body.includes(`"token_type":"${tokenType}"`)) return `token_type is not ${tokenType}`;
  if (expect.refreshToken !== undefined && body.includes('"refresh_token":"') !== expect.refreshToken) {
    return expect.refreshToken ? 'no refresh_token' : 'unexpected refresh_token';
  }
  return undefined;
}

function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] as number;
}

async function run(spec: RunSpec): Promise<RunResult> {
  let exhausted = 0;
  let instance: ReturnType<typeof autocannon> | undefined;
  // No fresh token left: the run is void; it stops at once so a stream of refused requests does not trip the
  // server's failure limiter (429) for the cases after this one.
  const runDry = (): void => {
    exhausted += 1;
    if (exhausted === 1) setImmediate(() => instance?.stop());
  };
  let invalid = 0;
  let firstInvalid: string | undefined;
  let verification: Promise<string | undefined> | undefined;
  let checked = 0;
  const nextBody = (): string => {
    switch (spec.body.kind) {
      case 'static':
        return spec.body.text;
      case 'refresh': {
        const token = take(spec.body.pool);
        if (token === undefined) runDry();
        return `grant_type=refresh_token&refresh_token=${token ?? 'spent'}&resource=${ENCODED_API}`;
      }
      case 'code': {
        const [code, verifier] = (take(spec.body.pool) ?? '').split(' ');
        if (code === undefined || verifier === undefined) runDry();
        return `grant_type=authorization_code&code=${code ?? 'spent'}&redirect_uri=${ENCODED_REDIRECT}&code_verifier=${verifier ?? 'spent'}&resource=${ENCODED_API}`;
      }
      case 'introspect': {
        const token = cycle(spec.body.pool);
        if (token === undefined) runDry();
        return `token=${token ?? 'none'}&token_type_hint=access_token`;
      }
      case 'exchange': {
        const token = cycle(spec.body.pool);
        if (token === undefined) runDry();
        return `${EXCHANGE_PREFIX}&subject_token=${token ?? 'none'}&resource=${encodeURIComponent(spec.body.resource)}`;
      }
    }
  };
  const proofPool = spec.proofs;
  const nextProof = (): string => {
    const proof = proofPool === undefined ? undefined : take(proofPool);
    if (proof === undefined) runDry();
    return proof ?? 'spent';
  };
  const jkt = proofPool === undefined ? undefined : proofKeys.get(proofPool)?.jkt;
  // Built once when nothing varies; otherwise per request, with the next body and (DPoP) the next proof.
  const fixed = spec.body.kind === 'static' && proofPool === undefined;
  const request: AutocannonRequest = {
    method: 'POST',
    path: spec.path,
    headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: spec.authorization ?? BASIC_AUTH },
    ...(fixed
      ? { body: nextBody() }
      : {
          setupRequest: (built) => {
            built.body = nextBody();
            // autocannon gives setupRequest a fresh headers object each time.
            if (proofPool !== undefined) (built.headers as Record<string, string>).DPoP = nextProof();
            return built;
          },
        }),
    onResponse: (status, body) => {
      if (status !== 200) return;
      checked += 1;
      // Every response gets the cheap check; the first and every 64th are parsed and their token decoded.
      const problem = checked === 1 || checked % 64 === 0 ? problemWith(body, spec.expect, jkt) : quickProblem(body, spec.expect);
      if (problem !== undefined) {
        invalid += 1;
        firstInvalid ??= problem;
      } else if (verification === undefined && spec.expect.issuer !== undefined) {
        verification = signatureProblem(spec.expect.issuer, body);
      }
    },
  };

  const latencies = spec.series === undefined ? undefined : (series.get(spec.series) ?? []);
  if (spec.series !== undefined && latencies !== undefined) series.set(spec.series, latencies);
  const perHalfSecond: number[] = [];
  let responses = 0;
  const cpuBefore = process.cpuUsage();
  const started = performance.now();
  instance = autocannon({
    url: `http://127.0.0.1:${spec.port}`,
    connections: spec.connections,
    duration: spec.seconds,
    timeout: 10,
    requests: [request],
  });
  instance.on('response', (_client: unknown, _status: number, _bytes: number, responseTime: number) => {
    responses += 1;
    latencies?.push(responseTime);
    const slot = Math.floor((performance.now() - started) / 500);
    perHalfSecond[slot] = (perHalfSecond[slot] ?? 0) + 1;
  });
  const result = await instance;
  const signature = await verification;
  if (signature !== undefined) {
    invalid += 1;
    firstInvalid ??= signature;
  }
  const wall = (performance.now() - started) / 1000;
  const cpu = process.cpuUsage(cpuBefore);
  return {
    responses,
    seconds: result.duration,
    non2xx: result.non2xx,
    errors: result.errors,
    timeouts: result.timeouts,
    invalid,
    ...(firstInvalid === undefined ? {} : { firstInvalid }),
    exhausted,
    perHalfSecond: Array.from(perHalfSecond, (count) => count ?? 0),
    driverCpu: (cpu.user + cpu.system) / 1e6 / wall,
  };
}

serveRpc({
  async pool(request) {
    const name = request.name as string;
    const lines = (await readFile(request.file as string, 'utf8')).split('\n').filter((line) => line.length > 0);
    const pool = pools.get(name) ?? { items: [], next: 0 };
    // Spent entries are dropped so a long run does not keep every token it ever used.
    pool.items = [...pool.items.slice(pool.next), ...lines];
    pool.next = 0;
    pools.set(name, pool);
    return pool.items.length;
  },
  /**
   * Replaces the pool `name` with `count` fresh DPoP proofs for POST `htu` (RFC 9449 §4.2: typ dpop+jwt, ES256, the
   * public jwk in the header, iat now, a unique jti), all signed by the pool's one key; returns the key's thumbprint.
   */
  async proofs(request) {
    const name = request.name as string;
    const htu = request.htu as string;
    const count = Math.min(Math.max(0, Math.ceil(request.count as number)), MAX_PROOFS);
    let key = proofKeys.get(name);
    if (key === undefined) {
      const pair = await generateKeyPair('ES256');
      const jwk = await exportJWK(pair.publicKey);
      key = { privateKey: pair.privateKey, jwk, jkt: await calculateJwkThumbprint(jwk, 'sha256') };
      proofKeys.set(name, key);
    }
    const { privateKey, jwk } = key;
    const started = performance.now();
    const iat = Math.floor(Date.now() / 1000);
    const items = await mapInBatches(Array.from({ length: count }, (_, i) => i), 64, () =>
      new SignJWT({ htm: 'POST', htu, jti: randomUUID() }).setProtectedHeader({ typ: 'dpop+jwt', alg: 'ES256', jwk }).setIssuedAt(iat).sign(privateKey),
    );
    // Proofs left from the run before are dropped: they are older, and fresh ones are cheaper than a refused request.
    pools.set(name, { items, next: 0 });
    return { count: items.length, jkt: key.jkt, ms: performance.now() - started };
  },
  remaining(request) {
    const pool = pools.get(request.name as string);
    return pool === undefined ? 0 : pool.items.length - pool.next;
  },
  run: (request) => run(request.spec as RunSpec),
  stop() {
    setImmediate(() => process.exit(0));
    return true;
  },
  percentiles(request) {
    const values = Float64Array.from(series.get(request.series as string) ?? []).sort();
    return { count: values.length, p50: percentile(values, 50), p90: percentile(values, 90), p99: percentile(values, 99), max: values.at(-1) ?? Number.NaN };
  },
});
process.send?.({ ready: true });

/**
 * The sign-in storm (DESIGN.md §11 "Password hashing never stalls tokens"), run by bench/run.ts against a
 * `pinpoint serve` it started: token requests at concurrency 8 (half client_credentials, half refresh_token, each
 * refresh loop following its own rotation chain) while 8 browsers sign in through the password form as fast as the
 * server takes them. The token loops run alone first (a warm-up, then a quiet stretch measured for comparison), then
 * beside the browsers for the measured storm. Every loop is bounded in count and in time; loopback only.
 * Usage: node --import tsx bench/storm.ts '{"issuer":"http://127.0.0.1:PORT","warmup":2,"quiet":3,"storm":30}'
 * Prints one JSON line (StormMeasurement) on stdout.
 */
import { setMaxListeners } from 'node:events';
import { Pool } from 'undici';
import { signIn, SignInFailed, type Client } from './browser.js';
import { PASSWORD, USERNAME } from './cli-server.js';
import { API, BASIC_AUTH, CLIENT_ID, REDIRECT_URI, SCOPE } from './common.js';

export interface StormMeasurement {
  /** Token requests answered during the storm, and their latencies (ms) over every answer. */
  readonly tokenRequests: number;
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
  /** The same token loops before the browsers started (the quiet stretch). */
  readonly quietRequests: number;
  readonly quietSeconds: number;
  readonly quietP99: number;
  readonly tokenErrors: number;
  readonly firstTokenError?: string;
  /** Sign-ins that reached the client with a code, refused for want of a hashing slot (503), or failed otherwise. */
  readonly signIns: number;
  readonly signInsRefused: number;
  readonly signInErrors: number;
  readonly firstSignInError?: string;
  /** Median time of a successful sign-in, from /authorize to the code (ms). */
  readonly signInP50: number;
  readonly seconds: number;
}

const TOKEN_LOOPS = 8;
const BROWSERS = 8;
/** Bounds on every loop besides its time: far above what a loop reaches in its seconds here. */
const MAX_TOKEN_REQUESTS_PER_LOOP = 2_000_000;
const MAX_SIGN_INS_PER_BROWSER = 10_000;
const TOKEN_TIMEOUT_MS = 10_000;

const spec = JSON.parse(process.argv[2] ?? '{}') as { issuer: string; warmup: number; quiet: number; storm: number };
if (typeof spec.issuer !== 'string' || ![spec.warmup, spec.quiet, spec.storm].every((n) => typeof n === 'number' && n >= 0)) {
  throw new Error('usage: storm.ts \'{"issuer":"http://127.0.0.1:PORT","warmup":2,"quiet":3,"storm":30}\'');
}
const origin = new URL(spec.issuer).origin;
if (!['127.0.0.1', 'localhost', '[::1]'].includes(new URL(origin).hostname)) throw new Error(`the storm runs on loopback only, not ${origin}`);
const client: Client = { clientId: CLIENT_ID, redirectUri: REDIRECT_URI, scope: SCOPE };
const credentials = { username: USERNAME, password: PASSWORD };
// Token requests and browsers on connections of their own, as separate clients would be.
const tokens = new Pool(origin, { connections: TOKEN_LOOPS });
const browsers = new Pool(origin, { connections: BROWSERS });

/** Where a token loop's latencies go; undefined while warming up. */
let record: number[] | undefined;
let tokenErrors = 0;
let firstTokenError: string | undefined;

function tokenError(message: string): void {
  tokenErrors += 1;
  firstTokenError ??= message;
}

async function postToken(body: string): Promise<{ status: number; text: string }> {
  const response = await tokens.request({
    path: '/token',
    method: 'POST',
    headers: { authorization: BASIC_AUTH, 'content-type': 'application/x-www-form-urlencoded' },
    body,
    headersTimeout: TOKEN_TIMEOUT_MS,
    bodyTimeout: TOKEN_TIMEOUT_MS,
  });
  return { status: response.statusCode, text: await response.body.text() };
}

const CLIENT_CREDENTIALS = `grant_type=client_credentials&scope=${SCOPE}`;
const refreshBody = (token: string): string => `grant_type=refresh_token&refresh_token=${encodeURIComponent(token)}&resource=${encodeURIComponent(API)}`;

/**
 * Token requests until `until` (performance.now() ms): client_credentials, or refreshes along the chain that starts at
 * `refreshToken` (each answer's refresh token is the next one's). Returns the chain's last token; undefined once broken.
 */
async function tokenLoop(until: number, refreshToken: string | undefined): Promise<string | undefined> {
  let token = refreshToken;
  for (let sent = 0; sent < MAX_TOKEN_REQUESTS_PER_LOOP && performance.now() < until; sent += 1) {
    const body = token === undefined ? CLIENT_CREDENTIALS : refreshBody(token);
    const started = performance.now();
    let answer: { status: number; text: string };
    try {
      answer = await postToken(body);
    } catch (error) {
      tokenError(`token request failed: ${(error as Error).message}`);
      if (token !== undefined) return undefined; // the rotation may have happened: the chain cannot go on
      continue;
    }
    record?.push(performance.now() - started);
    if (answer.status !== 200 || !answer.text.includes('"access_token":"')) {
      tokenError(`token answered ${answer.status}: ${answer.text.slice(0, 120)}`);
      if (token !== undefined) return undefined;
      continue;
    }
    if (token !== undefined) {
      const next = (JSON.parse(answer.text) as { refresh_token?: unknown }).refresh_token;
      if (typeof next !== 'string') {
        tokenError('a refresh answered no refresh_token');
        return undefined;
      }
      token = next;
    }
  }
  return token;
}

/** The token loops for `seconds`: the first half refreshing along `chains` (one each), the rest client_credentials. */
async function tokenLoops(seconds: number, chains: (string | undefined)[]): Promise<(string | undefined)[]> {
  const until = performance.now() + seconds * 1000;
  const refreshing = chains.map((chain) => (chain === undefined ? Promise.resolve(undefined) : tokenLoop(until, chain)));
  const issuing = Array.from({ length: TOKEN_LOOPS - chains.length }, () => tokenLoop(until, undefined));
  const [next] = await Promise.all([Promise.all(refreshing), Promise.all(issuing)]);
  return next;
}

/** A refresh token from a real sign-in and code exchange: the start of one rotation chain. */
async function firstRefreshToken(): Promise<string> {
  const { code, verifier } = await signIn(browsers, origin, client, credentials);
  const answer = await postToken(
    `grant_type=authorization_code&code=${encodeURIComponent(code)}&redirect_uri=${encodeURIComponent(REDIRECT_URI)}&code_verifier=${verifier}`,
  );
  const refreshToken = answer.status === 200 ? (JSON.parse(answer.text) as { refresh_token?: unknown }).refresh_token : undefined;
  if (typeof refreshToken !== 'string') throw new Error(`code exchange answered ${answer.status}: ${answer.text.slice(0, 200)}`);
  return refreshToken;
}

let signIns = 0;
let signInsRefused = 0;
let signInErrors = 0;
let firstSignInError: string | undefined;
const signInTimes: number[] = [];

/** One browser after another signing in until `stop` aborts (the one in flight then is abandoned, not counted). */
async function browserLoop(stop: AbortSignal): Promise<void> {
  for (let done = 0; done < MAX_SIGN_INS_PER_BROWSER && !stop.aborted; done += 1) {
    const started = performance.now();
    try {
      await signIn(browsers, origin, client, credentials, stop);
      signIns += 1;
      signInTimes.push(performance.now() - started);
    } catch (error) {
      if (stop.aborted) break;
      if (error instanceof SignInFailed && error.status === 503) signInsRefused += 1;
      else {
        signInErrors += 1;
        firstSignInError ??= (error as Error).message;
      }
    }
  }
}

function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] as number;
}

// Half the token loops refresh, each along a chain of its own from one sign-in (made before anything is measured).
const chains: (string | undefined)[] = await Promise.all(Array.from({ length: TOKEN_LOOPS / 2 }, firstRefreshToken));
let live = await tokenLoops(spec.warmup, chains);
const quiet: number[] = [];
record = quiet;
const quietStarted = performance.now();
live = await tokenLoops(spec.quiet, live);
const quietSeconds = (performance.now() - quietStarted) / 1000;
const stormed: number[] = [];
record = stormed;
const started = performance.now();
// The browsers stop when the storm ends; the token requests then in flight are waited for (and counted).
const stop = AbortSignal.timeout(spec.storm * 1000);
setMaxListeners(BROWSERS * 4, stop); // each browser's request in flight listens to it
await Promise.all([tokenLoops(spec.storm, live), ...Array.from({ length: BROWSERS }, () => browserLoop(stop))]);
const seconds = (performance.now() - started) / 1000;
await Promise.all([tokens.close(), browsers.close()]);

const measurement: StormMeasurement = {
  tokenRequests: stormed.length,
  p50: percentile(stormed, 50),
  p99: percentile(stormed, 99),
  max: stormed.length === 0 ? Number.NaN : stormed.reduce((most, ms) => Math.max(most, ms), 0),
  quietRequests: quiet.length,
  quietSeconds,
  quietP99: percentile(quiet, 99),
  tokenErrors,
  ...(firstTokenError === undefined ? {} : { firstTokenError }),
  signIns,
  signInsRefused,
  signInErrors,
  ...(firstSignInError === undefined ? {} : { firstSignInError }),
  signInP50: percentile(signInTimes, 50),
  seconds,
};
process.stdout.write(`${JSON.stringify(measurement)}\n`);

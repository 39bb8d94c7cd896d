/**
 * Real `pinpoint serve` processes for durability tests: a config written to a temporary folder, a
 * free loopback port, readiness on /readyz, captured log lines, SIGTERM or SIGKILL; and the sign-in
 * and token requests a client and a browser make, over real HTTP with fetch.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { hashPassword } from '../../src/crypto/password.js';
import { PASSWORD, REDIRECT, SECRET, basic, form, hiddenInput, pkce } from './app.js';
import { cliArgs } from './cli-command.js';

export { PASSWORD, REDIRECT, SECRET };

const REPO = fileURLToPath(new URL('../..', import.meta.url));

/** The two requestable resource servers of `webapp`, plus a logical name that cannot be named. */
export const API = 'https://api.example.org/';
export const FILES = 'https://files.example.org';
export const AUDIENCE = [API, FILES, 'billing'] as const;

export type StateSpec = { readonly path: string } | { readonly url: string };

export interface Deployment {
  /** Temporary folder holding the config, the secret file and (for SQLite) the database. */
  readonly folder: string;
  readonly configFile: string;
  readonly port: number;
  readonly baseUrl: string;
}

let aliceHash: Promise<string> | undefined;

/** A loopback port nobody listens on right now. */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Writes config.hcl (and secrets/webapp, mode 0600) into a new temporary folder; a relative state path lives in it. */
export async function createDeployment(options: { state: StateSpec; logLevel?: string }): Promise<Deployment> {
  const folder = await mkdtemp(join(tmpdir(), 'pinpoint-durable-'));
  const port = await freePort();
  const baseUrl = `http://127.0.0.1:${port}`;
  await mkdir(join(folder, 'secrets'));
  const secretFile = join(folder, 'secrets', 'webapp');
  await writeFile(secretFile, `${SECRET}\n`, { mode: 0o600 });
  await chmod(secretFile, 0o600);
  // Hashes with older (cheaper) parameters keep verifying; a cheap one keeps the many test sign-ins fast.
  aliceHash ??= hashPassword(PASSWORD, { N: 2 ** 14, r: 8, p: 1 });
  const q = (text: string): string => JSON.stringify(text);
  const state = 'path' in options.state ? `path = ${q(options.state.path)}` : `url = ${q(options.state.url)}`;
  const text = `base_url = ${q(baseUrl)}
listen   = ${q(`127.0.0.1:${port}`)}
log_level = ${q(options.logLevel ?? 'info')}

state {
  ${state}
}

user "alice" {
  password_hash = ${q(await aliceHash)}
  email         = "alice@example.org"
  name          = "Alice Example"
}

client "webapp" {
  secret_file      = "secrets/webapp"
  redirect_uris    = [${q(REDIRECT)}]
  audience         = [${AUDIENCE.map(q).join(', ')}]
  refresh_lifetime = "720h"
}
`;
  const configFile = join(folder, 'config.hcl');
  await writeFile(configFile, text, { mode: 0o600 });
  return { folder, configFile, port, baseUrl };
}

export async function removeDeployment(deployment: Deployment | undefined): Promise<void> {
  if (deployment !== undefined) await rm(deployment.folder, { recursive: true, force: true });
}

export interface Exit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

/** Servers started by this process and not yet exited. */
const servers = new Set<PinpointProcess>();
// Last resort should a test file end without its `after` hook: never leave a server behind.
process.once('exit', () => {
  for (const server of servers) server.child.kill('SIGKILL');
});

/** One `pinpoint serve` child process and what it printed. */
export class PinpointProcess {
  readonly stdout: string[] = [];
  readonly stderr: string[] = [];
  readonly exited: Promise<Exit>;
  #exit: Exit | undefined;

  constructor(
    readonly deployment: Deployment,
    readonly child: ChildProcess,
  ) {
    servers.add(this);
    const closed = (stream: NodeJS.ReadableStream | null, lines: string[]): Promise<void> => {
      if (stream === null) return Promise.resolve();
      const reader = createInterface({ input: stream, crlfDelay: Infinity });
      reader.on('line', (line) => lines.push(line));
      return new Promise((resolve) => reader.once('close', resolve));
    };
    const outputs = Promise.all([closed(child.stdout, this.stdout), closed(child.stderr, this.stderr)]);
    const exit = new Promise<Exit>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    // Resolves once the process is gone and every line it wrote has been read.
    this.exited = Promise.all([exit, outputs]).then(([result]) => {
      servers.delete(this);
      this.#exit = result;
      return result;
    });
  }

  get baseUrl(): string {
    return this.deployment.baseUrl;
  }

  get hasExited(): boolean {
    return this.#exit !== undefined || this.child.exitCode !== null || this.child.signalCode !== null;
  }

  /** stdout lines that are pino JSON records. */
  get logs(): Record<string, unknown>[] {
    return this.stdout.flatMap((line) => {
      try {
        const record: unknown = JSON.parse(line);
        return typeof record === 'object' && record !== null ? [record as Record<string, unknown>] : [];
      } catch {
        return [];
      }
    });
  }

  /** Everything the process wrote, for "no secret in any log line" checks. */
  get output(): string {
    return [...this.stdout, ...this.stderr].join('\n');
  }

  /** Sends `signal` and waits for the exit; a process still running after `timeoutMs` gets SIGKILL. */
  async stop(signal: 'SIGTERM' | 'SIGKILL' = 'SIGTERM', timeoutMs = 10_000): Promise<Exit> {
    if (!this.hasExited) this.child.kill(signal);
    const timer = setTimeout(() => this.child.kill('SIGKILL'), timeoutMs);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }
}

/** Starts `pinpoint serve --config` (from dist/ only when it is built from the sources as they are: cli-command.ts) and waits for /readyz. */
export async function startPinpoint(deployment: Deployment, options: { readyTimeoutMs?: number; args?: readonly string[] } = {}): Promise<PinpointProcess> {
  const child = spawn(process.execPath, cliArgs('serve', '--config', deployment.configFile, ...(options.args ?? [])), {
    cwd: REPO,
    env: { ...process.env, PINPOINT_CONFIG: '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const server = new PinpointProcess(deployment, child);
  const deadline = Date.now() + (options.readyTimeoutMs ?? 30_000);
  while (Date.now() < deadline) {
    if (server.hasExited) {
      const exit = await server.exited;
      throw new Error(`pinpoint exited (${exit.code ?? exit.signal}) before it was ready:\n${server.output}`);
    }
    try {
      const response = await fetch(`${deployment.baseUrl}/readyz`, { signal: AbortSignal.timeout(1000) });
      await response.arrayBuffer();
      if (response.status === 200) return server;
    } catch {
      // Not listening yet.
    }
    await sleep(50);
  }
  await server.stop('SIGKILL');
  throw new Error(`pinpoint was not ready on ${deployment.baseUrl} within the time allowed:\n${server.output}`);
}

/** SIGKILLs every server this test process started that is still running (for `after` hooks, which must clean up even when a test failed). */
export async function killAll(): Promise<void> {
  await Promise.all([...servers].map((server) => server.stop('SIGKILL', 5000)));
}

/** The Set-Cookie values of a response merged into a Cookie header value. */
function mergeCookies(previous: string, response: Response): string {
  const jar = new Map<string, string>();
  for (const part of previous.split('; ').filter(Boolean)) {
    const eq = part.indexOf('=');
    jar.set(part.slice(0, eq), part.slice(eq + 1));
  }
  for (const line of response.headers.getSetCookie()) {
    const pair = line.split(';')[0] ?? '';
    const eq = pair.indexOf('=');
    if (eq > 0) jar.set(pair.slice(0, eq), pair.slice(eq + 1));
  }
  return [...jar].map(([name, value]) => `${name}=${value}`).join('; ');
}

export interface Tokens {
  readonly access_token: string;
  readonly refresh_token: string;
  readonly token_type: string;
  readonly expires_in: number;
  readonly scope: string;
  readonly id_token?: string;
}

/**
 * The browser-less authorization code flow for `webapp`: /authorize (with `resources`) -> sign-in
 * form (cookies kept by hand, redirects followed by hand) -> POST credentials -> code -> /token.
 */
export async function signInForTokens(baseUrl: string, options: { resources?: readonly string[]; scope?: string } = {}): Promise<Tokens> {
  const { verifier, challenge } = pkce();
  const state = randomBytes(8).toString('hex');
  const query = form([
    ['response_type', 'code'],
    ['client_id', 'webapp'],
    ['redirect_uri', REDIRECT],
    ['scope', options.scope ?? 'openid profile email'],
    ['state', state],
    ['code_challenge', challenge],
    ['code_challenge_method', 'S256'],
    ...(options.resources ?? []).map((resource) => ['resource', resource] as const),
  ]);
  let cookies = '';
  let url = new URL(`/authorize?${query}`, baseUrl);
  let page: string | undefined;
  for (let hop = 0; hop < 5 && page === undefined; hop += 1) {
    const response = await fetch(url, { redirect: 'manual', headers: { cookie: cookies }, signal: AbortSignal.timeout(10_000) });
    cookies = mergeCookies(cookies, response);
    const body = await response.text();
    if (response.status >= 300 && response.status < 400) url = new URL(response.headers.get('location') ?? '', url);
    else if (response.status === 200) page = body;
    else throw new Error(`${url.pathname} answered ${response.status}: ${body}`);
  }
  if (page === undefined) throw new Error('no sign-in page after 5 redirects');
  const submitted = await fetch(new URL('/login', baseUrl), {
    method: 'POST',
    redirect: 'manual',
    headers: { cookie: cookies, 'content-type': 'application/x-www-form-urlencoded' },
    body: form([
      ['csrf', hiddenInput(page, 'csrf')],
      ['login', hiddenInput(page, 'login')],
      ['username', 'alice'],
      ['password', PASSWORD],
    ]),
    signal: AbortSignal.timeout(10_000),
  });
  await submitted.arrayBuffer();
  if (submitted.status !== 302 && submitted.status !== 303) throw new Error(`login answered ${submitted.status}`);
  cookies = mergeCookies(cookies, submitted);
  // Sign-in sends the browser to /authorize/resume, which sends it on to the client.
  const resumed = await fetch(new URL(submitted.headers.get('location') ?? '', baseUrl), {
    redirect: 'manual',
    headers: { cookie: cookies },
    signal: AbortSignal.timeout(10_000),
  });
  await resumed.arrayBuffer();
  if (resumed.status !== 303) throw new Error(`resume answered ${resumed.status}`);
  const callback = new URL(resumed.headers.get('location') ?? '', baseUrl);
  const code = callback.searchParams.get('code');
  if (!callback.href.startsWith(REDIRECT) || code === null || callback.searchParams.get('state') !== state) {
    throw new Error(`login did not return to the client with a code: ${callback.origin}${callback.pathname}`);
  }
  const exchanged = await postToken(baseUrl, [
    ['grant_type', 'authorization_code'],
    ['code', code],
    ['redirect_uri', REDIRECT],
    ['code_verifier', verifier],
  ]);
  if (exchanged.status !== 200) throw new Error(`code exchange answered ${exchanged.status}: ${JSON.stringify(exchanged.body)}`);
  return exchanged.body as unknown as Tokens;
}

export interface TokenAnswer {
  readonly status: number;
  readonly headers: Headers;
  readonly text: string;
  /** The JSON body, or {} when the body was not JSON. */
  readonly body: Record<string, unknown>;
}

/** POST /token as `webapp` (client_secret_basic). */
export async function postToken(baseUrl: string, pairs: readonly (readonly [string, string])[], timeoutMs = 15_000): Promise<TokenAnswer> {
  const response = await fetch(new URL('/token', baseUrl), {
    method: 'POST',
    headers: { authorization: basic('webapp', SECRET), 'content-type': 'application/x-www-form-urlencoded' },
    body: form(pairs),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await response.text();
  let body: Record<string, unknown> = {};
  try {
    body = JSON.parse(text) as Record<string, unknown>;
  } catch {
    // Left empty: the caller asserts on status and text.
  }
  return { status: response.status, headers: response.headers, text, body };
}

/** grant_type=refresh_token, optionally naming resources. */
export function refreshAt(baseUrl: string, refreshToken: string, resources: readonly string[] = [], timeoutMs?: number): Promise<TokenAnswer> {
  return postToken(
    baseUrl,
    [['grant_type', 'refresh_token'], ['refresh_token', refreshToken], ...resources.map((resource) => ['resource', resource] as const)],
    timeoutMs,
  );
}

/** A PostgreSQL database created for one test from PINPOINT_TEST_POSTGRES_URL, dropped by `drop()`. */
export interface TestDatabase {
  readonly name: string;
  readonly url: string;
  drop(): Promise<void>;
}

async function asAdmin<T>(adminUrl: string, work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

export async function createTestDatabase(adminUrl: string, prefix = 'pinpoint_durable'): Promise<TestDatabase> {
  const name = `${prefix}_${randomBytes(6).toString('hex')}`;
  await asAdmin(adminUrl, (client) => client.query(`CREATE DATABASE ${name}`));
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    name,
    url: url.toString(),
    drop: () => asAdmin(adminUrl, (client) => client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).then(() => undefined),
  };
}

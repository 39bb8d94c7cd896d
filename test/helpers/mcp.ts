/**
 * What test/mcp.test.ts needs around the MCP SDK: a Pinpoint process with a `dynamic_clients` block and a chosen
 * environment, the example MCP server as a process, a loopback callback like the one an MCP host runs, an HTTPS
 * server on loopback with a certificate made for the test, and an OAuthClientProvider that signs in through a browser.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type { OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js';
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';
import { hashPassword } from '../../src/crypto/password.js';
import { PASSWORD } from './app.js';
import { PinpointProcess, type Deployment } from './process.js';
import { cliArgs } from './cli-command.js';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
export const EXAMPLE = join(REPO, 'examples', 'mcp-server', 'server.ts');

/** Starts a plain HTTP or HTTPS server on 127.0.0.1, a free port. */
async function listen<T extends Server>(server: T): Promise<{ server: T; port: number }> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  return { server, port: (server.address() as AddressInfo).port };
}

export async function closeServer(server: Server | undefined): Promise<void> {
  if (server === undefined || !server.listening) return;
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

/** An HTTPS server on 127.0.0.1 serving JSON documents by path (Cache-Control: no-store), recording each request. */
export class DocumentServer {
  readonly documents = new Map<string, unknown>();
  readonly requests: { path: string; accept: string | undefined }[] = [];
  readonly server: Server;
  origin = '';

  constructor(tls: { cert: Buffer; key: Buffer }) {
    this.server = createHttpsServer(tls, (request, response) => {
      const path = request.url ?? '';
      this.requests.push({ path, accept: request.headers.accept });
      const body = this.documents.get(path);
      if (body === undefined) response.writeHead(404).end();
      else response.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' }).end(JSON.stringify(body));
    });
  }

  async start(): Promise<this> {
    const { port } = await listen(this.server);
    this.origin = `https://127.0.0.1:${port}`;
    return this;
  }
}

/** The loopback redirect URI of an MCP host: records each arrival, answers a small page. */
export class LoopbackCallback {
  readonly arrivals: URL[] = [];
  #waiting: ((url: URL) => void)[] = [];
  private constructor(
    readonly server: Server,
    readonly url: string,
  ) {}

  static async start(): Promise<LoopbackCallback> {
    let self: LoopbackCallback | undefined;
    const http = createHttpServer((request: IncomingMessage, response: ServerResponse) => {
      const url = new URL(request.url ?? '/', self?.url);
      if (url.pathname !== '/callback') {
        response.writeHead(404).end();
        return;
      }
      response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end('<!doctype html><title>Signed in</title><p>You can close this window.</p>');
      self?.arrive(url);
    });
    const { port } = await listen(http);
    self = new LoopbackCallback(http, `http://127.0.0.1:${port}/callback`);
    return self;
  }

  private arrive(url: URL): void {
    this.arrivals.push(url);
    for (const resolve of this.#waiting.splice(0)) resolve(url);
  }

  /** The next arrival (or the latest one when it came after `since` arrivals), within `timeoutMs`. */
  async next(since: number, timeoutMs = 15_000): Promise<URL> {
    const already = this.arrivals[since];
    if (already !== undefined) return already;
    return new Promise<URL>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`nothing arrived at ${this.url} within ${timeoutMs} ms`)), timeoutMs);
      this.#waiting.push((url) => {
        clearTimeout(timer);
        resolve(url);
      });
    });
  }
}

/** The dynamic_clients block of DESIGN.md §3 for one MCP server, and a local user alice. */
export async function writeDynamicDeployment(options: { port: number; audience: readonly string[]; logLevel?: string }): Promise<Deployment> {
  const folder = await mkdtemp(join(tmpdir(), 'pinpoint-mcp-'));
  const baseUrl = `http://127.0.0.1:${options.port}`;
  const q = (text: string): string => JSON.stringify(text);
  const text = `base_url  = ${q(baseUrl)}
listen    = ${q(`127.0.0.1:${options.port}`)}
log_level = ${q(options.logLevel ?? 'info')}

user "alice" {
  password_hash = ${q(await hashPassword(PASSWORD, { N: 2 ** 14, r: 8, p: 1 }))}
  email         = "alice@example.org"
  name          = "Alice Example"
}

dynamic_clients {
  audience                = [${options.audience.map(q).join(', ')}]
  metadata_documents      = true
  registration            = "open"
  scopes                  = ["openid", "profile", "mcp"]
  default_scope           = "mcp"
  refresh_lifetime        = "720h"
  refresh_reuse_grace     = "10s"
  allow_private_addresses = true
}
`;
  const configFile = join(folder, 'config.hcl');
  await writeFile(configFile, text, { mode: 0o600 });
  return { folder, configFile, port: options.port, baseUrl };
}

/** `pinpoint serve` (as cli-command.ts starts it) with extra environment (NODE_EXTRA_CA_CERTS is read at process start), ready on /readyz. */
export async function startPinpointWith(deployment: Deployment, env: Record<string, string>, readyTimeoutMs = 30_000): Promise<PinpointProcess> {
  const child = spawn(process.execPath, cliArgs('serve', '--config', deployment.configFile), {
    cwd: REPO,
    env: { ...process.env, PINPOINT_CONFIG: '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const server = new PinpointProcess(deployment, child);
  const deadline = Date.now() + readyTimeoutMs;
  while (Date.now() < deadline) {
    if (server.hasExited) throw new Error(`pinpoint exited before it was ready:\n${server.output}`);
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
  throw new Error(`pinpoint was not ready on ${deployment.baseUrl} in time:\n${server.output}`);
}

/** examples/mcp-server/server.ts as a process, ready once it prints its "MCP server at" line. */
export class ExampleServer {
  readonly output: string[] = [];
  private constructor(readonly child: ChildProcess) {}

  static async start(env: Record<string, string>, readyTimeoutMs = 30_000): Promise<ExampleServer> {
    const child = spawn(process.execPath, ['--import', 'tsx', EXAMPLE], { cwd: REPO, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    const example = new ExampleServer(child);
    const ready = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the example printed no "MCP server at" line within ${readyTimeoutMs} ms:\n${example.output.join('\n')}`)), readyTimeoutMs);
      const done = (error?: Error): void => {
        clearTimeout(timer);
        if (error === undefined) resolve();
        else reject(error);
      };
      for (const stream of [child.stdout, child.stderr]) {
        if (stream === null) continue;
        createInterface({ input: stream, crlfDelay: Infinity }).on('line', (line) => {
          example.output.push(line);
          if (line.startsWith('MCP server at ')) done();
        });
      }
      child.once('exit', (code, signal) => done(new Error(`the example exited (${code ?? signal}):\n${example.output.join('\n')}`)));
    });
    try {
      await ready;
    } catch (error) {
      child.kill('SIGKILL');
      throw error;
    }
    return example;
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((resolve) => this.child.once('exit', resolve));
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  }
}

/**
 * What an MCP host keeps (in memory here) and how it sends the person to sign in: `signIn` drives a browser to the
 * authorization URL and returns once the browser reached the loopback callback.
 */
export class BrowserAuthProvider implements OAuthClientProvider {
  readonly authorizationUrls: URL[] = [];
  readonly savedTokens: OAuthTokens[] = [];
  #client: OAuthClientInformationMixed | undefined;
  #tokens: OAuthTokens | undefined;
  #verifier: string | undefined;
  #state: string | undefined;

  constructor(
    readonly callbackUrl: string,
    readonly clientName: string,
    readonly signIn: (url: URL) => Promise<void>,
    readonly clientMetadataUrl?: string,
  ) {}

  get redirectUrl(): string {
    return this.callbackUrl;
  }

  get clientMetadata(): OAuthClientMetadata {
    return {
      client_name: this.clientName,
      redirect_uris: [this.callbackUrl],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    };
  }

  state(): string {
    this.#state = randomBytes(12).toString('base64url');
    return this.#state;
  }

  get lastState(): string | undefined {
    return this.#state;
  }

  clientInformation(): OAuthClientInformationMixed | undefined {
    return this.#client;
  }

  saveClientInformation(information: OAuthClientInformationMixed): void {
    this.#client = information;
  }

  tokens(): OAuthTokens | undefined {
    return this.#tokens;
  }

  saveTokens(tokens: OAuthTokens): void {
    this.#tokens = tokens;
    this.savedTokens.push(tokens);
  }

  /** Replaces the access token with one whose signature is broken, so the next call gets 401 and the SDK refreshes. */
  spoilAccessToken(): void {
    if (this.#tokens === undefined) throw new Error('no tokens to spoil');
    const token = this.#tokens.access_token;
    const last = token.at(-2) === 'A' ? 'B' : 'A';
    this.#tokens = { ...this.#tokens, access_token: `${token.slice(0, -2)}${last}${token.slice(-1)}` };
  }

  async redirectToAuthorization(authorizationUrl: URL): Promise<void> {
    this.authorizationUrls.push(authorizationUrl);
    await this.signIn(authorizationUrl);
  }

  saveCodeVerifier(codeVerifier: string): void {
    this.#verifier = codeVerifier;
  }

  codeVerifier(): string {
    if (this.#verifier === undefined) throw new Error('no code verifier saved');
    return this.#verifier;
  }
}

/** One request the SDK made through the transport's fetch, with the form or JSON body it sent. */
export interface SeenRequest {
  readonly method: string;
  readonly url: URL;
  readonly form: URLSearchParams | undefined;
  readonly status: number;
}

/**
 * Holds refresh requests until `count` of them are waiting (or `timeoutMs` passed), then lets them go together: two
 * calls refused at once then refresh in parallel with the same refresh token, as they do when the network is slower.
 */
export class RefreshBarrier {
  #count = 0;
  #waiting: (() => void)[] = [];

  arm(count: number): void {
    this.#count = count;
  }

  async pass(timeoutMs = 5000): Promise<void> {
    if (this.#count <= 1) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(release, timeoutMs);
      const waiting = this.#waiting;
      waiting.push(() => {
        clearTimeout(timer);
        resolve();
      });
      function release(): void {
        for (const go of waiting.splice(0)) go();
      }
      if (waiting.length >= this.#count) {
        this.#count = 0;
        release();
      }
    });
  }
}

/** A fetch that records the requests (and their form bodies) the MCP SDK makes; refresh requests pass `barrier`. */
export function recordingFetch(seen: SeenRequest[], barrier?: RefreshBarrier): typeof fetch {
  return async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    const method = init?.method ?? (input instanceof Request ? input.method : 'GET');
    const body = init?.body;
    const form = body instanceof URLSearchParams ? new URLSearchParams(body) : undefined;
    if (form?.get('grant_type') === 'refresh_token') await barrier?.pass();
    const response = await fetch(input, init);
    seen.push({ method, url, form, status: response.status });
    return response;
  };
}

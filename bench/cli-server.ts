/**
 * `pinpoint serve` itself (dist/cli.js with the node flags `npm start` gives it) for the cases that need the whole
 * server rather than the benchmark's in-process one: its workers (DESIGN.md §11) and its password hashing. A deployment
 * is a folder holding the config as an operator writes it (HCL), the client's secret file and the SQLite state; the
 * server is ready when GET /readyz answers 200.
 */
import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { AUDIENCE, CLIENT_ID, CLIENT_SECRET, freePort, REDIRECT_URI, SCOPE } from './common.js';
import { nodeOnCores, processTree, type Cores, type ServerProcess } from './processes.js';

const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));

/** The local user the storm's browsers sign in as, and their password (hashed by the CLI at each run). */
export const USERNAME = 'alice';
export const PASSWORD = 'storm-password-5d81c2e7';

/** How long a server may take from spawn to its first 200 at /readyz. */
const READY_TIMEOUT_MS = 30_000;
/** How long a stopping server may take to drain before it and its workers are killed. */
const STOP_TIMEOUT_MS = 10_000;

export interface Deployment {
  readonly configFile: string;
  readonly port: number;
  readonly baseUrl: string;
}

/** `pinpoint hash-password` as an operator runs it: the password on stdin, the hash (scrypt, N = 2^17 by default) on stdout. */
export async function hashPasswordWithCli(password: string, nodeFlags: readonly string[]): Promise<string> {
  const child = spawn(process.execPath, [...nodeFlags, CLI, 'hash-password'], { stdio: ['pipe', 'pipe', 'pipe'] });
  const chunks: Buffer[] = [];
  const errors: Buffer[] = [];
  child.stdout.on('data', (chunk: Buffer) => chunks.push(chunk));
  child.stderr.on('data', (chunk: Buffer) => errors.push(chunk));
  child.stdin.end(`${password}\n`);
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', resolve);
  });
  const hash = Buffer.concat(chunks).toString('utf8').trim();
  if (code !== 0 || !hash.startsWith('scrypt$')) throw new Error(`pinpoint hash-password exited with ${code}: ${Buffer.concat(errors).toString('utf8').trim()}`);
  return hash;
}

/** Writes config.hcl, the client's secret file and the state's place into `folder`: the benchmark client, one local user. */
export async function writeDeployment(folder: string, passwordHash: string): Promise<Deployment> {
  await mkdir(folder, { recursive: true });
  const port = await freePort();
  const baseUrl = `http://127.0.0.1:${port}`;
  await writeFile(join(folder, 'client.secret'), `${CLIENT_SECRET}\n`, { mode: 0o600 });
  const q = (text: string): string => JSON.stringify(text);
  const text = `base_url  = ${q(baseUrl)}
listen    = ${q(`127.0.0.1:${port}`)}
log_level = "info"

state {
  path = "pinpoint.db"
}

user ${q(USERNAME)} {
  password_hash = ${q(passwordHash)}
}

client ${q(CLIENT_ID)} {
  secret_file      = "client.secret"
  redirect_uris    = [${q(REDIRECT_URI)}]
  audience         = [${AUDIENCE.map(q).join(', ')}]
  refresh_lifetime = "720h"
  scopes           = [${q(SCOPE)}]
}
`;
  const configFile = join(folder, 'pinpoint.hcl');
  await writeFile(configFile, text, { mode: 0o600 });
  return { configFile, port, baseUrl };
}

/** Every `pinpoint serve` started and not yet stopped: killed should the runner exit without stopping them. */
const running = new Set<CliServer>();
process.once('exit', () => {
  for (const server of running) server.kill();
});

/** One `pinpoint serve` process (and, with workers, its children). It answers no RPC: the cases use it over HTTP only. */
export class CliServer implements ServerProcess {
  readonly #exited: Promise<number | null>;
  #done = false;

  constructor(
    readonly pid: number,
    readonly issuer: string,
    readonly port: number,
    exited: Promise<number | null>,
  ) {
    this.#exited = exited.finally(() => {
      this.#done = true;
      running.delete(this);
    });
    running.add(this);
  }

  call<T>(cmd: string): Promise<T> {
    return Promise.reject(new Error(`pinpoint serve answers no benchmark command (${cmd})`));
  }

  /** SIGTERM (it drains its requests, DESIGN.md §11), then SIGKILL to it and its workers after STOP_TIMEOUT_MS. */
  async stop(): Promise<void> {
    if (this.#done) return;
    process.kill(this.pid, 'SIGTERM');
    const timer = setTimeout(() => this.kill(), STOP_TIMEOUT_MS);
    await this.#exited;
    clearTimeout(timer);
  }

  /** SIGKILL to the server and every process it started. */
  kill(): void {
    for (const pid of processTree(this.pid).reverse()) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // ended meanwhile
      }
    }
  }
}

/**
 * Starts `pinpoint serve --config FILE ...args` on `cores` and waits for /readyz. A server that exits first gives
 * `refused` with its exit code and the first line of what it printed on stderr (e.g. an option this build lacks).
 */
export async function startCliServer(options: {
  readonly deployment: Deployment;
  readonly args: readonly string[];
  readonly nodeFlags: readonly string[];
  readonly cores: Cores | undefined;
  readonly stdout: string;
  readonly stderr: string;
}): Promise<{ server: CliServer } | { refused: string }> {
  const { deployment } = options;
  const [command, argv] = nodeOnCores(options.cores, [...options.nodeFlags, CLI, 'serve', '--config', deployment.configFile, ...options.args]);
  const out = openSync(options.stdout, 'a');
  const err = openSync(options.stderr, 'a');
  const child = spawn(command, argv, { stdio: ['ignore', out, err] });
  closeSync(out);
  closeSync(err);
  child.once('error', () => undefined);
  // No pid: the spawn itself failed (its error event says why); never signal pid -1, which means every process.
  if (child.pid === undefined) throw new Error(`could not start ${command}`);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const hasExited = (): boolean => child.exitCode !== null || child.signalCode !== null;
  const server = new CliServer(child.pid, deployment.baseUrl, deployment.port, exited);
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (!hasExited() && Date.now() < deadline) {
    const ready = await fetch(`${deployment.baseUrl}/readyz`, { signal: AbortSignal.timeout(1000) }).then(
      async (response) => (await response.arrayBuffer(), response.status === 200),
      () => false,
    );
    if (ready) return { server };
    await sleep(100);
  }
  if (!hasExited()) {
    await server.stop();
    throw new Error(`pinpoint serve ${options.args.join(' ')} was not ready within ${READY_TIMEOUT_MS / 1000} s (see ${options.stderr})`);
  }
  const exitCode = await exited;
  const line = (await readFile(options.stderr, 'utf8').catch(() => '')).split('\n').find((text) => text.trim() !== '') ?? '';
  // Its first sentence: e.g. "pinpoint: Unknown option '--workers'" without node's advice on positional arguments.
  const said = line.trim().split(/(?<=\S)\. /)[0]?.slice(0, 160) ?? '';
  return { refused: `serve ${options.args.join(' ')} exited with ${exitCode}${said === '' ? '' : `: ${said}`}` };
}

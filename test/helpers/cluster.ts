/**
 * What the tests of `pinpoint serve` with workers (test/workers*.test.ts) share: requests on connections of their own,
 * waits that are bounded, the worker processes read from /proc, and the CLI run to its end.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { chmod, readFile, readdir, writeFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request as undiciRequest } from 'undici';
import { basic, form } from './app.js';
import { createDeployment, freePort, SECRET, startPinpoint, type Deployment, type PinpointProcess, type StateSpec } from './process.js';
import { cliArgs, WORKER_SCRIPT } from './cli-command.js';

/** The PostgreSQL the tests on PostgreSQL use; without it they skip, saying why. */
export const POSTGRES_URL = process.env['PINPOINT_TEST_POSTGRES_URL'];

export interface Answer {
  readonly status: number;
  readonly requestId: string;
  readonly body: string;
}

/**
 * One request on a connection of its own (no keep-alive), so the primary hands each to the next worker. It comes
 * through the trusted proxy (loopback) from `address`, by default one of its own, so that only the failures a test
 * means to count share an address (failure limits are per address, DESIGN.md §4).
 */
export function fresh(
  baseUrl: string,
  path: string,
  options: { method?: string; pairs?: readonly (readonly [string, string])[]; json?: unknown; auth?: string; address?: string } = {},
): Promise<Answer> {
  const body = options.json !== undefined ? JSON.stringify(options.json) : options.pairs === undefined ? undefined : form(options.pairs);
  const contentType = options.json !== undefined ? 'application/json' : 'application/x-www-form-urlencoded';
  return new Promise((resolve, reject) => {
    const outgoing = httpRequest(
      new URL(path, baseUrl),
      {
        method: options.method ?? (body === undefined ? 'GET' : 'POST'),
        agent: false,
        headers: {
          connection: 'close',
          'x-forwarded-for': options.address ?? `198.18.${randomInt(256)}.${randomInt(256)}`,
          ...(body !== undefined && { 'content-type': contentType, 'content-length': Buffer.byteLength(body) }),
          ...(options.auth !== undefined && { authorization: options.auth }),
        },
        timeout: 15_000,
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () =>
          resolve({ status: response.statusCode ?? 0, requestId: String(response.headers['x-request-id']), body: Buffer.concat(chunks).toString('utf8') }),
        );
        response.on('error', reject);
      },
    );
    outgoing.on('timeout', () => outgoing.destroy(new Error(`${path}: no answer`)));
    outgoing.on('error', reject);
    outgoing.end(body);
  });
}

export const clientCredentials = (baseUrl: string, clientId = 'webapp', secret = SECRET): Promise<Answer> =>
  fresh(baseUrl, '/token', { pairs: [['grant_type', 'client_credentials']], auth: basic(clientId, secret) });

/** Waits, a bounded number of times, until `condition` holds; returns its last truthy value. */
export async function eventually<T>(what: string, condition: () => T | undefined | false | Promise<T | undefined | false>, attempts = 300): Promise<T> {
  for (let attempt = 0; attempt < attempts; attempt += 1) {
    const value = await condition();
    if (value !== undefined && value !== false) return value;
    await sleep(100);
  }
  throw new Error(`gave up waiting: ${what}`);
}

/** SIGKILLs one of the two workers and waits until its replacement answers; the victim and the two workers serving then. */
export async function killOneAndAwaitReplacement(server: PinpointProcess): Promise<{ victim: number; replaced: number[] }> {
  const [victim, survivor] = (await twoWorkers(server)) as [number, number];
  process.kill(victim, 'SIGKILL');
  const replaced = await eventually('a replacement worker', async () => {
    const workers = await workersOf(server.child.pid as number);
    return workers.length === 2 && !workers.includes(victim) && workers.includes(survivor) ? workers : undefined;
  });
  const newcomer = replaced.find((pid) => pid !== survivor) as number;
  // The newcomer takes connections once it listens; until then the survivor answers every one.
  await eventually('the new worker answering', async () => {
    const answer = await fresh(server.baseUrl, '/healthz');
    return answer.status === 200 && (await pidOf(server, answer.requestId)) === newcomer;
  });
  return { victim, replaced };
}

/** The pid of the process whose access line carries `requestId` (lines are written within 200 ms). */
export function pidOf(server: PinpointProcess, requestId: string): Promise<number> {
  return eventually(`the access line of ${requestId}`, () => {
    const line = server.logs.find((record) => record.reqId === requestId && record.msg === 'request');
    return typeof line?.pid === 'number' ? line.pid : undefined;
  });
}

/** The processes whose parent is `pid`, read from /proc. */
export async function childrenOf(pid: number): Promise<number[]> {
  const children: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    // The command name (in parentheses) may hold spaces: the fields after its ')' are state, then ppid.
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (ppid === pid) children.push(Number(entry));
  }
  return children.sort((a, b) => a - b);
}

/** The arguments process `pid` was started with; none once it is gone. */
export async function commandLineOf(pid: number): Promise<string[]> {
  const text = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
  return text.split('\0').filter((argument) => argument !== '');
}

/**
 * The worker processes of the primary `pid`: its children that run worker.ts. Not every child is one: under tsx the
 * primary also has esbuild's transform service (started on its first module not in tsx's cache, kept until it exits),
 * and during a reload the short-lived config reader.
 */
export async function workersOf(pid: number): Promise<number[]> {
  const children = await childrenOf(pid);
  const commandLines = await Promise.all(children.map(commandLineOf));
  return children.filter((_, i) => commandLines[i]?.includes(WORKER_SCRIPT));
}

/** Both workers up and serving (the start line is printed once every worker serves). */
export async function twoWorkers(server: PinpointProcess): Promise<number[]> {
  await eventually('the start line', () => server.logs.some((record) => record.msg === 'pinpoint is serving'));
  return eventually('two worker processes', async () => {
    const workers = await workersOf(server.child.pid as number);
    return workers.length === 2 ? workers : undefined;
  }).catch(async (error: Error) => {
    // Say what was there instead, for a failure seen only now and then.
    const children = await childrenOf(server.child.pid as number);
    const commands = await Promise.all(children.map(async (pid) => `${pid} ${(await commandLineOf(pid)).join(' ') || 'gone'}`));
    throw new Error(`${error.message}; children of the primary: ${commands.join(', ') || 'none'}; primary ${server.hasExited ? 'exited' : 'running'}\n${server.output.slice(-4000)}`);
  });
}

/** Runs the CLI to the end. */
export function cli(args: readonly string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, cliArgs(...args), { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, PINPOINT_CONFIG: '' } });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  return new Promise((resolve) => child.once('close', (code) => resolve({ code, stdout, stderr })));
}

/** A confidential client for client_credentials, with its secret file. */
export async function addClient(deployment: Deployment, clientId: string, secret: string): Promise<string> {
  const file = join(deployment.folder, 'secrets', clientId);
  await writeFile(file, `${secret}\n`, { mode: 0o600 });
  await chmod(file, 0o600);
  return `\nclient "${clientId}" {\n  secret_file = "secrets/${clientId}"\n  audience    = ["https://api.example.org/"]\n}\n`;
}

export function metricValue(text: string, name: string, labels: string): number | undefined {
  const line = text.split('\n').find((candidate) => candidate.startsWith(`${name}{`) && candidate.includes(labels));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

/**
 * Sends `count` metadata requests (each its own connection, so both workers answer), then asserts that /metrics on
 * `metricsPort` sums them over the workers and has the process figures of workers 0 and 1 and of the primary.
 */
export async function requestsSummedAtMetrics(server: PinpointProcess, metricsPort: number, count: number): Promise<Answer[]> {
  const path = '/.well-known/oauth-authorization-server';
  const answers = await sequence(count, () => fresh(server.baseUrl, path));
  assert.ok(answers.every((answer) => answer.status === 200));
  const text = await eventually('the summed count', async () => {
    const scraped = await fresh(`http://127.0.0.1:${metricsPort}`, '/metrics');
    return metricValue(scraped.body, 'pinpoint_http_requests_total', `route="${path}"`) === count ? scraped.body : undefined;
  });
  for (const worker of ['0', '1', 'primary']) {
    assert.ok(metricValue(text, 'process_resident_memory_bytes', `worker="${worker}"`) !== undefined, `memory of worker ${worker}:\n${text}`);
  }
  return answers;
}

/** A client_credentials request for `clientId` with a wrong secret, from `address`: one failure of that client there. */
export const wrongSecret = (baseUrl: string, clientId: string, address: string): Promise<Answer> =>
  fresh(baseUrl, '/token', { pairs: [['grant_type', 'client_credentials']], auth: basic(clientId, 'wrong'), address });

/** Fails `clientId` from `address` until the server answers 429 (client_failures = 5, so 12 tries are plenty). */
export async function useUpClientFailures(server: PinpointProcess, clientId: string, address: string): Promise<void> {
  const statuses = (await sequence(12, () => wrongSecret(server.baseUrl, clientId, address))).map((answer) => answer.status);
  assert.ok(statuses.slice(-4).every((status) => status === 429), `the limit is reached: ${statuses.join(' ')}`);
}

/** Eight more tries of `clientId` from `address`: every one is 429, and both workers (pids `workers`) answered some. */
export async function stillLimitedEverywhere(server: PinpointProcess, clientId: string, address: string, workers: readonly number[]): Promise<void> {
  const answers = await sequence(8, () => wrongSecret(server.baseUrl, clientId, address));
  const pids = await Promise.all(answers.map((answer) => pidOf(server, answer.requestId)));
  const described = answers.map((answer, i) => `${answer.status}@${pids[i]}`).join(' ');
  assert.deepEqual([...new Set(pids)].sort((a, b) => a - b), [...workers].sort((a, b) => a - b), `both workers answered: ${described}`);
  assert.ok(answers.every((answer) => answer.status === 429), `every worker still refuses: ${described}`);
}

/** The kids of the signing keys one answer of /jwks publishes, and the pid of the worker that answered. */
export async function jwksAt(server: PinpointProcess): Promise<{ pid: number; kids: string[] }> {
  const answer = await fresh(server.baseUrl, '/jwks');
  assert.equal(answer.status, 200, answer.body);
  const kids = (JSON.parse(answer.body) as { keys: { kid: string }[] }).keys.map((key) => key.kid);
  return { pid: await pidOf(server, answer.requestId), kids };
}

/** `count` requests one after another. */
export async function sequence<T>(count: number, send: () => Promise<T>): Promise<T[]> {
  const results: T[] = [];
  for (let i = 0; i < count; i += 1) results.push(await send());
  return results;
}

/** Sends requests one after another until stopped; each result is a status, or the error of a refused connection. */
export function hammer(send: () => Promise<Answer>): { stop(): void; done: Promise<(number | string)[]> } {
  let running = true;
  const results: (number | string)[] = [];
  const done = (async () => {
    while (running) results.push(await send().then((answer) => answer.status, (error: Error) => error.message));
    return results;
  })();
  return { stop: () => (running = false), done };
}

/** Requests of `loops` loops over one keep-alive pool, until `until` settles; each loop sends at most `most`. */
export interface KeepAliveLoad {
  /** Every status, or the code of every request that got none. */
  readonly results: readonly (number | string)[];
  /** Answers that asked for their connection to be closed (the draining workers'). */
  readonly closing: number;
  /** Whether a loop stopped at `most` before `until` settled. */
  readonly cappedOut: boolean;
}

/**
 * client_credentials requests from 8 loops over 4 keep-alive connections (undici, as proxies and SDKs hold them),
 * until `until` settles; each loop sends at most 3,000, so the load stays bounded whatever happens (a reload under it
 * takes 10-20 s on a 2-core machine, about 10,000 requests in all).
 */
export async function keepAliveLoad(baseUrl: string, until: Promise<unknown>, shape = { loops: 8, connections: 4, most: 3_000 }): Promise<KeepAliveLoad> {
  const agent = new Agent({ connections: shape.connections, keepAliveTimeout: 30_000, pipelining: 1 });
  let running = true;
  const stop = (): void => {
    running = false;
  };
  until.then(stop, stop);
  const results: (number | string)[] = [];
  let closing = 0;
  let cappedOut = false;
  const body = form([['grant_type', 'client_credentials']]);
  const headers = { authorization: basic('webapp', SECRET), 'content-type': 'application/x-www-form-urlencoded' };
  try {
    await Promise.all(
      Array.from({ length: shape.loops }, async () => {
        let sent = 0;
        for (; running && sent < shape.most; sent += 1) {
          try {
            const answer = await undiciRequest(`${baseUrl}/token`, { method: 'POST', dispatcher: agent, body, headers });
            await answer.body.text();
            results.push(answer.statusCode);
            if (answer.headers.connection === 'close') closing += 1;
          } catch (error) {
            results.push((error as NodeJS.ErrnoException).code ?? (error as Error).message);
          }
        }
        if (sent === shape.most) cappedOut = true;
      }),
    );
  } finally {
    await agent.close();
  }
  return { results, closing, cappedOut };
}

/** A started server of 2 workers with a metrics listener and a pid file, and what a test needs of it. */
export interface MetricsServer {
  readonly deployment: Deployment;
  readonly server: PinpointProcess;
  readonly metricsPort: number;
  readonly pidFile: string;
  /** The config file as started: the deployment's, then `extra`, then the metrics block. */
  readonly configText: string;
}

/** A deployment on `state` whose config gets `extra` and a metrics block, served with `args` and a pid file, both workers up. */
export async function startWithMetrics(state: StateSpec, extra: string, args: readonly string[] = []): Promise<MetricsServer> {
  const deployment = await createDeployment({ state });
  const metricsPort = await freePort();
  const pidFile = join(deployment.folder, 'pinpoint.pid');
  const configText = `${await readFile(deployment.configFile, 'utf8')}${extra}metrics {\n  listen = "127.0.0.1:${metricsPort}"\n}\n`;
  await writeFile(deployment.configFile, configText);
  const server = await startPinpoint(deployment, { args: [...args, '--pid-file', pidFile] });
  await twoWorkers(server);
  return { deployment, server, metricsPort, pidFile, configText };
}

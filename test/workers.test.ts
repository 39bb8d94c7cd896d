/**
 * DESIGN.md §11 "Every core": a real `pinpoint serve` with 2 workers (node:cluster) over real sockets, on SQLite and
 * on PostgreSQL. Which worker answered is read from the access lines' `pid` (the answer's X-Request-Id names the
 * line); each request opens its own connection, so the primary hands them to the workers in turn.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { chmod, readFile, readdir, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { connect, createServer } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Agent, request as undiciRequest } from 'undici';
import { COLLECT_EVERY_MS } from '../src/http/metrics.js';
import { basic, form } from './helpers/app.js';
import {
  SECRET,
  createDeployment,
  createTestDatabase,
  freePort,
  killAll,
  removeDeployment,
  signInForTokens,
  startPinpoint,
  type Deployment,
  type PinpointProcess,
  type StateSpec,
  type TestDatabase,
} from './helpers/process.js';
import { cliArgs, WORKER_SCRIPT } from './helpers/cli-command.js';

/** The module the primary forks each worker from (the server runs from the sources here, as startPinpoint starts it). */
const POSTGRES_URL = process.env['PINPOINT_TEST_POSTGRES_URL'];

interface Answer {
  readonly status: number;
  readonly requestId: string;
  readonly body: string;
}

/**
 * One request on a connection of its own (no keep-alive), so the primary hands each to the next worker. It comes
 * through the trusted proxy (loopback) from `address`, by default one of its own, so that only the failures a test
 * means to count share an address (failure limits are per address, DESIGN.md §4).
 */
function fresh(
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

const clientCredentials = (baseUrl: string, clientId = 'webapp', secret = SECRET): Promise<Answer> =>
  fresh(baseUrl, '/token', { pairs: [['grant_type', 'client_credentials']], auth: basic(clientId, secret) });

/** Waits, a bounded number of times, until `condition` holds; returns its last truthy value. */
async function eventually<T>(what: string, condition: () => T | undefined | false | Promise<T | undefined | false>, attempts = 300): Promise<T> {
  for (let attempt = 0; attempt < attempts; attempt += 1) {
    const value = await condition();
    if (value !== undefined && value !== false) return value;
    await sleep(100);
  }
  throw new Error(`gave up waiting: ${what}`);
}

/** SIGKILLs one of the two workers and waits until its replacement answers; the victim and the two workers serving then. */
async function killOneAndAwaitReplacement(server: PinpointProcess): Promise<{ victim: number; replaced: number[] }> {
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
function pidOf(server: PinpointProcess, requestId: string): Promise<number> {
  return eventually(`the access line of ${requestId}`, () => {
    const line = server.logs.find((record) => record.reqId === requestId && record.msg === 'request');
    return typeof line?.pid === 'number' ? line.pid : undefined;
  });
}

/** The processes whose parent is `pid`, read from /proc. */
async function childrenOf(pid: number): Promise<number[]> {
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
async function commandLineOf(pid: number): Promise<string[]> {
  const text = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
  return text.split('\0').filter((argument) => argument !== '');
}

/**
 * The worker processes of the primary `pid`: its children that run worker.ts. Not every child is one: under tsx the
 * primary also has esbuild's transform service (started on its first module not in tsx's cache, kept until it exits),
 * and during a reload the short-lived config reader.
 */
async function workersOf(pid: number): Promise<number[]> {
  const children = await childrenOf(pid);
  const commandLines = await Promise.all(children.map(commandLineOf));
  return children.filter((_, i) => commandLines[i]?.includes(WORKER_SCRIPT));
}

/** Both workers up and serving (the start line is printed once every worker serves). */
async function twoWorkers(server: PinpointProcess): Promise<number[]> {
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
function cli(args: readonly string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, cliArgs(...args), { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, PINPOINT_CONFIG: '' } });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  return new Promise((resolve) => child.once('close', (code) => resolve({ code, stdout, stderr })));
}

/** A confidential client for client_credentials, with its secret file. */
async function addClient(deployment: Deployment, clientId: string, secret: string): Promise<string> {
  const file = join(deployment.folder, 'secrets', clientId);
  await writeFile(file, `${secret}\n`, { mode: 0o600 });
  await chmod(file, 0o600);
  return `\nclient "${clientId}" {\n  secret_file = "secrets/${clientId}"\n  audience    = ["https://api.example.org/"]\n}\n`;
}

function metricValue(text: string, name: string, labels: string): number | undefined {
  const line = text.split('\n').find((candidate) => candidate.startsWith(`${name}{`) && candidate.includes(labels));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

/**
 * Sends `count` metadata requests (each its own connection, so both workers answer), then asserts that /metrics on
 * `metricsPort` sums them over the workers and has the process figures of workers 0 and 1 and of the primary.
 */
async function requestsSummedAtMetrics(server: PinpointProcess, metricsPort: number, count: number): Promise<Answer[]> {
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
const wrongSecret = (baseUrl: string, clientId: string, address: string): Promise<Answer> =>
  fresh(baseUrl, '/token', { pairs: [['grant_type', 'client_credentials']], auth: basic(clientId, 'wrong'), address });

/** Fails `clientId` from `address` until the server answers 429 (client_failures = 5, so 12 tries are plenty). */
async function useUpClientFailures(server: PinpointProcess, clientId: string, address: string): Promise<void> {
  const statuses = (await sequence(12, () => wrongSecret(server.baseUrl, clientId, address))).map((answer) => answer.status);
  assert.ok(statuses.slice(-4).every((status) => status === 429), `the limit is reached: ${statuses.join(' ')}`);
}

/** Eight more tries of `clientId` from `address`: every one is 429, and both workers (pids `workers`) answered some. */
async function stillLimitedEverywhere(server: PinpointProcess, clientId: string, address: string, workers: readonly number[]): Promise<void> {
  const answers = await sequence(8, () => wrongSecret(server.baseUrl, clientId, address));
  const pids = await Promise.all(answers.map((answer) => pidOf(server, answer.requestId)));
  const described = answers.map((answer, i) => `${answer.status}@${pids[i]}`).join(' ');
  assert.deepEqual([...new Set(pids)].sort((a, b) => a - b), [...workers].sort((a, b) => a - b), `both workers answered: ${described}`);
  assert.ok(answers.every((answer) => answer.status === 429), `every worker still refuses: ${described}`);
}

/** The kids of the signing keys one answer of /jwks publishes, and the pid of the worker that answered. */
async function jwksAt(server: PinpointProcess): Promise<{ pid: number; kids: string[] }> {
  const answer = await fresh(server.baseUrl, '/jwks');
  assert.equal(answer.status, 200, answer.body);
  const kids = (JSON.parse(answer.body) as { keys: { kid: string }[] }).keys.map((key) => key.kid);
  return { pid: await pidOf(server, answer.requestId), kids };
}

/** Every test of one store: one server with 2 workers, changed and stopped along the way. */
function workersSuite(state: () => Promise<StateSpec>, how: 'config' | 'flag'): void {
  let deployment: Deployment | undefined;
  let server: PinpointProcess;
  let baseText: string;
  let metricsPort: number;
  let pidFile: string;

  before(async () => {
    deployment = await createDeployment({ state: await state() });
    metricsPort = await freePort();
    pidFile = join(deployment.folder, 'pinpoint.pid');
    baseText =
      (await readFile(deployment.configFile, 'utf8')) +
      `${how === 'config' ? 'workers = 2\n' : ''}trusted_proxies = ["127.0.0.1"]\nlimits {\n  client_failures = 5\n}\nmetrics {\n  listen = "127.0.0.1:${metricsPort}"\n}\n`;
    await writeFile(deployment.configFile, baseText);
    server = await startPinpoint(deployment, { args: [...(how === 'flag' ? ['--workers', '2'] : []), '--pid-file', pidFile] });
    await twoWorkers(server);
  });
  after(async () => {
    await killAll();
    await removeDeployment(deployment);
  });

  test('both workers serve: two processes under the primary answer in turn, and the start line is printed once', async () => {
    const primary = server.child.pid as number;
    const children = await twoWorkers(server);
    const answers = await sequence(6, () => fresh(server.baseUrl, '/healthz'));
    assert.deepEqual(answers.map((answer) => answer.status), [200, 200, 200, 200, 200, 200]);
    const pids = new Set(await Promise.all(answers.map((answer) => pidOf(server, answer.requestId))));
    assert.deepEqual([...pids].sort((a, b) => a - b), children, 'the answers came from the two children of the primary');
    assert.ok(!pids.has(primary), 'the primary serves nothing itself');
    const starts = server.logs.filter((record) => record.msg === 'pinpoint is serving');
    assert.equal(starts.length, 1, server.output);
    assert.equal(starts[0]?.workers, 2);
    assert.equal(starts[0]?.pid, primary);
    assert.equal(Number(await readFile(pidFile, 'utf8')), primary, 'the pid file names the primary');
  });

  test('a refresh race spread over both workers has exactly one winner', async () => {
    const tokens = await signInForTokens(server.baseUrl);
    const racers = await Promise.all(
      Array.from({ length: 20 }, () => fresh(server.baseUrl, '/token', { pairs: [['grant_type', 'refresh_token'], ['refresh_token', tokens.refresh_token]], auth: basic('webapp', SECRET) })),
    );
    const statuses = racers.map((answer) => answer.status);
    assert.equal(statuses.filter((status) => status === 200).length, 1, `statuses: ${statuses.join(' ')}`);
    assert.ok(racers.every((answer) => answer.status === 200 || JSON.parse(answer.body).error === 'invalid_grant'), statuses.join(' '));
    const pids = new Set(await Promise.all(racers.map((answer) => pidOf(server, answer.requestId))));
    assert.equal(pids.size, 2, 'both workers took part in the race');
  });

  test('a revocation at one worker is seen at once by the other', async () => {
    const tokens = await signInForTokens(server.baseUrl);
    const revoked = await fresh(server.baseUrl, '/revoke', { pairs: [['token', tokens.refresh_token]], auth: basic('webapp', SECRET) });
    assert.equal(revoked.status, 200, revoked.body);
    const refreshes = await sequence(2, () => fresh(server.baseUrl, '/token', { pairs: [['grant_type', 'refresh_token'], ['refresh_token', tokens.refresh_token]], auth: basic('webapp', SECRET) }));
    for (const refresh of refreshes) {
      assert.equal(refresh.status, 400, refresh.body);
      assert.equal(JSON.parse(refresh.body).error, 'invalid_grant');
    }
    const revokedAt = await pidOf(server, revoked.requestId);
    const refreshedAt = await Promise.all(refreshes.map((answer) => pidOf(server, answer.requestId)));
    assert.ok(refreshedAt.some((pid) => pid !== revokedAt), 'a refresh ran at the worker that did not revoke');
  });

  test('client_failures = 5 holds for the whole server: at most 5 + 2 failures reach the workers before 429', async () => {
    const answers = await sequence(16, () => fresh(server.baseUrl, '/token', { pairs: [['grant_type', 'client_credentials']], auth: basic('limit-probe', 'wrong'), address: '192.0.2.77' }));
    const statuses = answers.map((answer) => answer.status);
    const failures = answers.filter((answer) => answer.status === 401);
    assert.ok(failures.length >= 5 && failures.length <= 7, `401s before the limit: ${failures.length} (${statuses.join(' ')})`);
    assert.ok(statuses.slice(-6).every((status) => status === 429), statuses.join(' '));
    const pids = new Set(await Promise.all(failures.map((answer) => pidOf(server, answer.requestId))));
    assert.equal(pids.size, 2, 'both workers counted failures');
  });

  // Failures that take no I/O (a wrong secret) come back before the other worker's counts arrive: only the budget's
  // shares (budget-shares.ts) keep such a burst within the limit. Before them, 7 to 10 of these 40 got through.
  for (const round of [1, 2, 3]) {
    test(`client_failures = 5 under a parallel burst over both workers: at most 5 + 2 failures in all, the rest 429 (round ${round})`, async () => {
      const answers = await Promise.all(
        Array.from({ length: 40 }, () => fresh(server.baseUrl, '/token', { pairs: [['grant_type', 'client_credentials']], auth: basic('limit-probe', 'wrong'), address: `192.0.2.${77 + round}` })),
      );
      const statuses = answers.map((answer) => answer.status);
      const failures = answers.filter((answer) => answer.status === 401);
      assert.ok(failures.length >= 1 && failures.length <= 7, `401s: ${failures.length} (${statuses.join(' ')})`);
      assert.equal(failures.length + statuses.filter((status) => status === 429).length, 40, statuses.join(' '));
    });
  }

  test('/metrics on metrics.listen is the sum over the workers; process figures keep a worker label', async () => {
    const answers = await requestsSummedAtMetrics(server, metricsPort, 10);
    assert.equal(new Set(await Promise.all(answers.map((answer) => pidOf(server, answer.requestId)))).size, 2);
    assert.equal((await fresh(server.baseUrl, '/metrics')).status, 404, 'never on the main listener');
  });

  test('the summed counts never go down when a worker dies: what it counted is carried on (Prometheus reads a drop as a reset)', async () => {
    const metricsUrl = `http://127.0.0.1:${metricsPort}`;
    const route = 'route="/.well-known/oauth-authorization-server"';
    const before = metricValue((await fresh(metricsUrl, '/metrics')).body, 'pinpoint_http_requests_total', route);
    assert.ok(before !== undefined && before >= 10, `counted by both workers before: ${before}`);
    await killOneAndAwaitReplacement(server);
    const after = metricValue((await fresh(metricsUrl, '/metrics')).body, 'pinpoint_http_requests_total', route);
    assert.equal(after, before, 'the dead worker\'s requests are still in the sum');
    await sequence(4, () => fresh(server.baseUrl, '/.well-known/oauth-authorization-server'));
    await eventually('the sum grown by the new requests', async () => {
      const grown = metricValue((await fresh(metricsUrl, '/metrics')).body, 'pinpoint_http_requests_total', route);
      return grown === (before as number) + 4;
    });
  });

  const keyRotationLines = (): Record<string, unknown>[] => server.logs.filter((record) => record.audit === true && record.event === 'key_rotation');

  /** `pinpoint keys rotate` against the running server's store: the new kids. */
  const rotateKeys = async (): Promise<string[]> => {
    const rotated = await cli(['keys', 'rotate', '--config', deployment?.configFile as string]);
    assert.equal(rotated.code, 0, rotated.stderr);
    const kids = [...rotated.stdout.matchAll(/^(\S+) +(?:ES256|RS256) +new$/gm)].map((match) => match[1] as string);
    assert.equal(kids.length, 2, rotated.stdout);
    return kids;
  };

  /** Waits until both workers publish `kids` (each re-reads the keys every 10 s: 150 tries of about 100 ms cover it); their pids. */
  const bothPublishing = async (kids: readonly string[]): Promise<number[]> => {
    const publishing = new Set<number>();
    await eventually(
      'both workers publishing the new keys',
      async () => {
        const { pid, kids: published } = await jwksAt(server);
        if (kids.every((kid) => published.includes(kid))) publishing.add(pid);
        return publishing.size === 2;
      },
      150,
    );
    return [...publishing].sort((a, b) => a - b);
  };

  test('keys rotate: both workers publish the new keys, and exactly one key_rotation audit line is written (the housekeeper\'s)', async () => {
    const workers = await twoWorkers(server);
    const auditedBefore = keyRotationLines().length;
    const kids = await rotateKeys();
    assert.deepEqual(await bothPublishing(kids), workers);
    // A second worker's line would be written within 200 ms of its reload (the log's flush).
    await sleep(1000);
    const lines = keyRotationLines().slice(auditedBefore);
    assert.equal(lines.length, 1, `key_rotation lines: ${JSON.stringify(lines)}`);
    assert.ok(workers.includes(lines[0]?.pid as number), 'written by a worker');
    assert.deepEqual([...(lines[0]?.published as string[])].sort(), [...kids].sort());
  });

  test('a SIGKILLed worker is replaced and serving resumes', async () => {
    const { victim } = await killOneAndAwaitReplacement(server);
    const answers = await sequence(6, () => clientCredentials(server.baseUrl));
    assert.deepEqual(answers.map((answer) => answer.status), [200, 200, 200, 200, 200, 200]);
    assert.ok(server.logs.some((record) => record.msg === 'a worker stopped unexpectedly; starting another' && record.worker === victim), server.output);
  });

  test('a worker started in place of a SIGKILLed one takes the server-wide failure counts: 429 at every worker', async () => {
    const address = '192.0.2.91';
    await useUpClientFailures(server, 'handover-kill', address);
    const { replaced } = await killOneAndAwaitReplacement(server);
    await stillLimitedEverywhere(server, 'handover-kill', address, replaced);
  });

  test('SIGHUP with a valid changed config: the new client is served, every worker is replaced, no request is refused meanwhile', async () => {
    const before = await twoWorkers(server);
    await writeFile(deployment?.configFile as string, baseText + (await addClient(deployment as Deployment, 'second', 'second-secret')));
    assert.equal((await clientCredentials(server.baseUrl, 'second', 'second-secret')).status, 401, 'unknown before the reload');
    const loop = hammer(() => clientCredentials(server.baseUrl));
    try {
      const reloadsBefore = server.logs.filter((record) => String(record.msg).startsWith('configuration reloaded')).length;
      process.kill(server.child.pid as number, 'SIGHUP');
      // A reload starts and drains the workers one at a time: 7-8 s here, up to 25 s on a loaded 2-core machine; the CLI itself waits 120 s.
      await eventually('the reload', () => server.logs.filter((record) => String(record.msg).startsWith('configuration reloaded')).length > reloadsBefore, 1200);
    } finally {
      loop.stop();
    }
    const results = await loop.done;
    assert.ok(results.length >= 5, `requests during the swap: ${results.length}`);
    const refused = results.filter((result) => result !== 200);
    assert.deepEqual(refused, [], `every request during the swap was answered 200 (${results.length} sent)`);
    const after = await twoWorkers(server);
    assert.ok(after.every((pid) => !before.includes(pid)), `both workers replaced: ${before} -> ${after}`);
    const answers = await sequence(4, () => clientCredentials(server.baseUrl, 'second', 'second-secret'));
    assert.deepEqual(answers.map((answer) => answer.status), [200, 200, 200, 200]);
  });

  test('a reload replaces every worker: the new ones take the failure counts of the old (429 at every worker), and keys rotated as it starts give one key_rotation line', async () => {
    const address = '192.0.2.92';
    await useUpClientFailures(server, 'handover-reload', address);
    const before = await twoWorkers(server);
    const auditedBefore = keyRotationLines().length;
    const reloadsBefore = server.logs.filter((record) => String(record.msg).startsWith('configuration reloaded')).length;
    const kids = await rotateKeys();
    // Sent at once: the old housekeeper is most likely replaced before its next key reload (10 s after its last), so
    // the line comes from the new one's start, or from the old one if it reloads first: one line either way.
    process.kill(server.child.pid as number, 'SIGHUP');
    // A reload starts and drains the workers one at a time: 7-8 s here, up to 25 s on a loaded 2-core machine; the CLI itself waits 120 s.
    await eventually('the reload', () => server.logs.filter((record) => String(record.msg).startsWith('configuration reloaded')).length > reloadsBefore, 1200);
    const after = await twoWorkers(server);
    assert.ok(after.every((pid) => !before.includes(pid)), `both workers replaced: ${before} -> ${after}`);
    await stillLimitedEverywhere(server, 'handover-reload', address, after);
    assert.deepEqual(await bothPublishing(kids), after);
    // A second line would be written within 200 ms of its housekeeper's recording (the log's flush).
    await sleep(500);
    const lines = keyRotationLines().slice(auditedBefore);
    assert.equal(lines.length, 1, `key_rotation lines: ${JSON.stringify(lines)}`);
    assert.deepEqual([...(lines[0]?.published as string[])].sort(), [...kids].sort());
  });

  test('SIGHUP with an invalid config changes nothing and logs every problem', async () => {
    const before = await twoWorkers(server);
    const good = await readFile(deployment?.configFile as string, 'utf8');
    await writeFile(deployment?.configFile as string, `${good}\nfrobnicate = 1\naccess_token_lifetime = "soon"\n`);
    const refusalsBefore = server.logs.filter((record) => record.msg === 'reload refused').length;
    process.kill(server.child.pid as number, 'SIGHUP');
    const problems = await eventually('the logged problems', () => {
      const lines = server.logs.filter((record) => record.msg === 'reload refused').slice(refusalsBefore);
      return lines.length >= 2 ? lines.map((record) => String(record.problem)) : undefined;
    });
    assert.ok(problems.some((problem) => /frobnicate/.test(problem)), problems.join('\n'));
    assert.ok(problems.some((problem) => /soon/.test(problem)), problems.join('\n'));
    assert.deepEqual(await workersOf(server.child.pid as number), before, 'the same workers keep serving');
    const answers = await sequence(4, () => clientCredentials(server.baseUrl, 'second', 'second-secret'));
    assert.deepEqual(answers.map((answer) => answer.status), [200, 200, 200, 200], 'with the config they had');
    await writeFile(deployment?.configFile as string, good);
  });

  test('pinpoint reload: exit 0 when the config is taken, 1 with the problems when it is invalid or cannot start, 1 without a server', async () => {
    const configFile = deployment?.configFile as string;
    const good = await readFile(configFile, 'utf8');
    await writeFile(configFile, good + (await addClient(deployment as Deployment, 'third', 'third-secret')));
    const taken = await cli(['reload', '--config', configFile, '--pid-file', pidFile]);
    assert.equal(taken.code, 0, taken.stderr);
    assert.match(taken.stdout, /reloaded/);
    assert.equal((await clientCredentials(server.baseUrl, 'third', 'third-secret')).status, 200);

    const serving = await twoWorkers(server);
    await writeFile(configFile, `${good}\nfrobnicate = 1\n`);
    const invalid = await cli(['reload', '--config', configFile, '--pid-file', pidFile]);
    assert.equal(invalid.code, 1);
    assert.match(invalid.stderr, /frobnicate/);
    assert.deepEqual(await workersOf(server.child.pid as number), serving, 'an invalid file is not even sent');

    // Valid, but no worker can listen where it says: the server keeps its workers and says why.
    const squatter = createServer();
    const busyPort = await freePort();
    await new Promise<void>((resolve) => squatter.listen(busyPort, '127.0.0.1', resolve));
    try {
      await writeFile(configFile, good.replace(/^listen\s*=.*$/m, `listen = "127.0.0.1:${busyPort}"`));
      const unstartable = await cli(['reload', '--config', configFile, '--pid-file', pidFile]);
      assert.equal(unstartable.code, 1, unstartable.stdout);
      assert.match(unstartable.stderr, /EADDRINUSE/);
    } finally {
      squatter.close();
    }
    assert.deepEqual(await workersOf(server.child.pid as number), serving);
    assert.equal((await clientCredentials(server.baseUrl, 'third', 'third-secret')).status, 200, 'still the taken config');
    await writeFile(configFile, good);

    const nobody = await cli(['reload', '--config', configFile, '--pid-file', join(deployment?.folder as string, 'no-such.pid')]);
    assert.equal(nobody.code, 1);
    assert.match(nobody.stderr, /no server is running/);
  });

  test('SIGTERM: a request in flight is answered (even one whose headers end during the drain), every worker ends, the primary exits 0 and removes its pid file', async () => {
    const workers = await twoWorkers(server);
    const body = 'grant_type=client_credentials';
    const socket = connect(deployment?.port as number, '127.0.0.1');
    await new Promise((resolve) => socket.once('connect', resolve));
    let answer = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (answer += chunk));
    const closed = new Promise((resolve) => socket.once('close', resolve));
    const request =
      `POST /token HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: ${basic('webapp', SECRET)}\r\n` +
      `Content-Type: application/x-www-form-urlencoded\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
    // Half the headers before the signal: the connection is a worker's, its request not yet read when the drain starts.
    socket.write(request.slice(0, 40));
    await sleep(300);
    const draining = (): number => server.logs.filter((record) => record.msg === 'stopping: finishing in-flight requests').length;
    const drainingBefore = draining();
    server.child.kill('SIGTERM');
    await eventually('both workers draining', () => draining() >= drainingBefore + 2);
    // Let their app.close() begin (it is asynchronous) before the request's headers end.
    await sleep(300);
    socket.write(request.slice(40));
    await closed;
    assert.match(answer, /^HTTP\/1\.1 200 /, answer);
    const exit = await server.exited;
    assert.deepEqual(exit, { code: 0, signal: null }, server.output);
    assert.equal(existsSync(pidFile), false, 'the pid file is removed');
    for (const pid of workers) assert.throws(() => process.kill(pid, 0), 'no worker is left');
  });
}

/** `count` requests one after another. */
async function sequence<T>(count: number, send: () => Promise<T>): Promise<T[]> {
  const results: T[] = [];
  for (let i = 0; i < count; i += 1) results.push(await send());
  return results;
}

/** Sends requests one after another until stopped; each result is a status, or the error of a refused connection. */
function hammer(send: () => Promise<Answer>): { stop(): void; done: Promise<(number | string)[]> } {
  let running = true;
  const results: (number | string)[] = [];
  const done = (async () => {
    while (running) results.push(await send().then((answer) => answer.status, (error: Error) => error.message));
    return results;
  })();
  return { stop: () => (running = false), done };
}

describe('serve with 2 workers on SQLite (workers = 2 in the config)', () => {
  workersSuite(async () => ({ path: 'data/pinpoint.db' }), 'config');
});

describe('serve with 2 workers on PostgreSQL (serve --workers 2)', { skip: POSTGRES_URL === undefined ? 'PINPOINT_TEST_POSTGRES_URL is unset: no PostgreSQL to test against' : false }, () => {
  let database: TestDatabase | undefined;
  after(async () => database?.drop());
  workersSuite(async () => {
    database = await createTestDatabase(POSTGRES_URL as string, 'pinpoint_workers');
    return { url: database.url };
  }, 'flag');
});

// Every registration counts against its address (DESIGN.md §9), admitted like the password check at sign-in: the
// address budget's shares hold over real workers, not only the client budget's at /token.
describe('registrations over 2 workers with address_failures = 5', () => {
  let deployment: Deployment | undefined;
  let server: PinpointProcess;
  before(async () => {
    deployment = await createDeployment({ state: { path: 'data/pinpoint.db' } });
    const extra = 'workers = 2\ntrusted_proxies = ["127.0.0.1"]\nlimits {\n  address_failures = 5\n}\ndynamic_clients {\n  audience     = ["https://mcp.example.org/mcp"]\n  registration = "open"\n}\n';
    await writeFile(deployment.configFile, `${await readFile(deployment.configFile, 'utf8')}${extra}`);
    server = await startPinpoint(deployment);
    await twoWorkers(server);
  });
  after(async () => {
    await killAll();
    await removeDeployment(deployment);
  });

  for (const round of [1, 2]) {
    test(`40 registrations at once from one address: at most 5 + 2 registered in all, the rest 429 (round ${round})`, async () => {
      const json = { redirect_uris: ['http://127.0.0.1:33418/callback'], client_name: 'burst', token_endpoint_auth_method: 'none' };
      const answers = await Promise.all(Array.from({ length: 40 }, () => fresh(server.baseUrl, '/register', { json, address: `192.0.2.${90 + round}` })));
      const statuses = answers.map((answer) => answer.status);
      const registered = statuses.filter((status) => status === 201).length;
      assert.ok(registered >= 1 && registered <= 7, `registered: ${registered} (${statuses.join(' ')})`);
      assert.equal(registered + statuses.filter((status) => status === 429).length, 40, statuses.join(' '));
    });
  }
});

describe('metrics added by a reload', () => {
  let deployment: Deployment | undefined;
  after(async () => {
    await killAll();
    await removeDeployment(deployment);
  });

  test('a metrics block added by SIGHUP opens /metrics, which sums the new workers and has the process figures of each process', async () => {
    deployment = await createDeployment({ state: { path: 'data/pinpoint.db' } });
    const baseText = `${await readFile(deployment.configFile, 'utf8')}workers = 2\ntrusted_proxies = ["127.0.0.1"]\n`;
    await writeFile(deployment.configFile, baseText);
    const server = await startPinpoint(deployment);
    await twoWorkers(server);
    const metricsPort = await freePort();
    await assert.rejects(fresh(`http://127.0.0.1:${metricsPort}`, '/metrics'), /ECONNREFUSED/, 'no metrics listener without a metrics block');

    await writeFile(deployment.configFile, `${baseText}metrics {\n  listen = "127.0.0.1:${metricsPort}"\n}\n`);
    process.kill(server.child.pid as number, 'SIGHUP');
    await eventually('the reload', () => server.logs.some((record) => String(record.msg).startsWith('configuration reloaded')), 1200);
    await requestsSummedAtMetrics(server, metricsPort, 6);
  });
});

/** Requests of `loops` loops over one keep-alive pool, until `until` settles; each loop sends at most `most`. */
interface KeepAliveLoad {
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
async function keepAliveLoad(baseUrl: string, until: Promise<unknown>, shape = { loops: 8, connections: 4, most: 3_000 }): Promise<KeepAliveLoad> {
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

/**
 * What a draining worker does with its connections and its counts (an outside audit): a reload under keep-alive load
 * reset 3-5 of 14,000 requests (the old worker closed idle keep-alive connections as clients sent on them), and
 * /metrics counted a worker that answered late twice, and lost what a drained or killed worker counted since the last
 * scrape. A server of 2 workers, with a metrics listener and a pid file.
 */
function drainingSuite(state: () => Promise<StateSpec>, metricsTests: boolean): void {
  let deployment: Deployment | undefined;
  let server: PinpointProcess;
  let metricsPort: number;
  let pidFile: string;

  before(async () => {
    deployment = await createDeployment({ state: await state() });
    metricsPort = await freePort();
    pidFile = join(deployment.folder, 'pinpoint.pid');
    const extra = `workers = 2\nmetrics {\n  listen = "127.0.0.1:${metricsPort}"\n}\n`;
    await writeFile(deployment.configFile, `${await readFile(deployment.configFile, 'utf8')}${extra}`);
    server = await startPinpoint(deployment, { args: ['--pid-file', pidFile] });
    await twoWorkers(server);
  });
  after(async () => {
    await killAll();
    await removeDeployment(deployment);
  });

  const reload = async (): Promise<void> => {
    const reloaded = await cli(['reload', '--config', deployment?.configFile as string, '--pid-file', pidFile]);
    assert.equal(reloaded.code, 0, reloaded.stderr);
  };

  /** The client_credentials tokens /metrics says were issued. */
  const tokensIssued = async (): Promise<number> =>
    metricValue((await fresh(`http://127.0.0.1:${metricsPort}`, '/metrics')).body, 'pinpoint_tokens_issued_total', 'grant_type="client_credentials"') ?? 0;

  test('a reload under keep-alive load from 8 loops: every request is answered 200, none is reset; the old workers answer on their connections asking to close them', async () => {
    const before = await twoWorkers(server);
    const reloading = reload();
    const [load] = await Promise.all([keepAliveLoad(server.baseUrl, reloading), reloading]);
    const failed = load.results.filter((result) => result !== 200);
    assert.deepEqual(failed, [], `${failed.length} of ${load.results.length} requests got no 200`);
    assert.equal(load.cappedOut, false, `the load lasted the whole reload (${load.results.length} requests)`);
    const drained = server.logs.filter((record) => record.msg === 'stopped' && before.includes(record.pid as number));
    assert.equal(drained.length, 2, 'both old workers drained under the load');
    assert.ok(load.closing > 0, `answers with Connection: close: ${load.closing}`);
  });

  if (!metricsTests) return;

  test('/metrics: a worker that answers the primary late (SIGSTOP 3 s) counts with its last figures meanwhile, and once when it answers again', async () => {
    const base = await tokensIssued();
    const answers = await sequence(10, () => clientCredentials(server.baseUrl));
    assert.ok(answers.every((answer) => answer.status === 200));
    assert.equal(await tokensIssued(), base + 10);
    const victim = await pidOf(server, (answers[0] as Answer).requestId);
    process.kill(victim, 'SIGSTOP');
    try {
      // The primary waits 2 s for a worker's figures.
      assert.equal(await tokensIssued(), base + 10, 'while the worker is stopped');
      await sleep(1000);
    } finally {
      process.kill(victim, 'SIGCONT');
    }
    assert.equal(await tokensIssued(), base + 10, 'once it answers again');
    assert.equal(await tokensIssued(), base + 10, 'and after');
  });

  test('/metrics: a reload keeps what the old workers counted since the last scrape (each sends its last figures as it drains)', async () => {
    const base = await tokensIssued();
    const answers = await sequence(5, () => clientCredentials(server.baseUrl));
    assert.ok(answers.every((answer) => answer.status === 200));
    await reload();
    assert.equal(await tokensIssued(), base + 5);
  });

  test(`/metrics: a SIGKILLed worker takes with it at most what it counted in the last ${COLLECT_EVERY_MS / 1000} s (the primary collects every worker's figures that often)`, async () => {
    const base = await tokensIssued();
    const answers = await sequence(10, () => clientCredentials(server.baseUrl));
    assert.ok(answers.every((answer) => answer.status === 200));
    const victim = await pidOf(server, (answers[0] as Answer).requestId);
    // Nothing scrapes meanwhile: only the primary's own collection, at least once in this time, takes the counts.
    await sleep(COLLECT_EVERY_MS + 2_000);
    process.kill(victim, 'SIGKILL');
    await eventually('the replacement worker', async () => {
      const workers = await workersOf(server.child.pid as number);
      return workers.length === 2 && !workers.includes(victim);
    });
    assert.equal(await tokensIssued(), base + 10);
  });
}

describe('draining workers on SQLite: keep-alive connections and /metrics', () => {
  drainingSuite(async () => ({ path: 'data/pinpoint.db' }), true);
});

describe('draining workers on PostgreSQL: keep-alive connections', { skip: POSTGRES_URL === undefined ? 'PINPOINT_TEST_POSTGRES_URL is unset: no PostgreSQL to test against' : false }, () => {
  let database: TestDatabase | undefined;
  after(async () => database?.drop());
  drainingSuite(async () => {
    database = await createTestDatabase(POSTGRES_URL as string, 'pinpoint_drain');
    return { url: database.url };
  }, false);
});

describe('workers and the state they need', () => {
  let deployment: Deployment | undefined;
  after(async () => removeDeployment(deployment));

  test('workers = 2 without a state block is a config error; so is serve --workers 2 on memory state; --workers 0 is a usage error', async () => {
    deployment = await createDeployment({ state: { path: 'data/pinpoint.db' } });
    const text = await readFile(deployment.configFile, 'utf8');
    const memory = text.replace(/state \{[^}]*\}/, '');
    await writeFile(deployment.configFile, `${memory}workers = 2\n`);
    const checked = await cli(['check', '--config', deployment.configFile]);
    assert.equal(checked.code, 1, checked.stdout);
    assert.match(checked.stdout, /workers = 2 needs a state block/);

    await writeFile(deployment.configFile, memory);
    const served = await cli(['serve', '--config', deployment.configFile, '--workers', '2']);
    assert.equal(served.code, 1, served.stdout);
    assert.match(served.stderr, /--workers 2 needs a state block/);

    const usage = await cli(['serve', '--config', deployment.configFile, '--workers', '0']);
    assert.equal(usage.code, 2);
    assert.match(usage.stderr, /--workers is "0"/);
  });

  test('check prints the workers setting', async () => {
    const folder = deployment?.folder as string;
    const configFile = join(folder, 'auto.hcl');
    await writeFile(configFile, (await readFile(join(folder, 'config.hcl'), 'utf8')).replace(/^/, `workers = "auto"\nstate {\n  path = "data/auto.db"\n}\n`));
    const checked = await cli(['check', '--config', configFile, '--json']);
    assert.equal(checked.code, 0, checked.stdout);
    assert.equal(JSON.parse(checked.stdout).workers, 'auto');
    const text = await cli(['check', '--config', configFile]);
    assert.match(text.stdout, /^workers +auto: \d+ workers? beside the supervising primary here/m);
    await writeFile(configFile, `${(await readFile(configFile, 'utf8')).replace('workers = "auto"', 'workers = 0')}`);
    const zero = await cli(['check', '--config', configFile]);
    assert.equal(zero.code, 1);
    assert.match(zero.stdout, /workers is 0; use a whole number from 1 to 64, or "auto"/);
  });
});

/** The 'stopped unexpectedly' line the primary wrote for worker `pid`, once it is there. */
const deathLine = (server: PinpointProcess, pid: number): Promise<Record<string, unknown>> =>
  eventually(`the primary's line for the death of ${pid}`, () => server.logs.find((record) => record.msg === 'a worker stopped unexpectedly; starting another' && record.worker === pid));

/** Polls every 5 ms (at most 4000 times) until `condition` holds, for a moment that passes quickly (a worker starting). */
async function soon<T>(what: string, condition: () => T | undefined | false | Promise<T | undefined | false>): Promise<T> {
  for (let attempt = 0; attempt < 4000; attempt += 1) {
    const value = await condition();
    if (value !== undefined && value !== false) return value;
    await sleep(5);
  }
  throw new Error(`gave up waiting: ${what}`);
}

/**
 * The primary's supervision when workers die or the server stops in the middle of a reload (an outside audit's
 * findings): each test has a server of its own (SQLite, `workers = 2` in its config, a pid file) and a client
 * "second" only the new config has, so which config a worker serves shows in its answer (200 or 401).
 */
describe('reloads while workers die or the server stops', () => {
  const deployments: Deployment[] = [];
  const commands = new Set<ReturnType<typeof spawn>>();
  after(async () => {
    for (const command of commands) command.kill('SIGKILL');
    await killAll();
    for (const deployment of deployments) await removeDeployment(deployment);
  });

  /** A server with 2 workers; `withSecond` is its config plus client "second" (and `workers = N` when given). */
  async function twoWorkerServer(): Promise<{ deployment: Deployment; server: PinpointProcess; pidFile: string; primary: number; before: number[]; withSecond: (workers?: number) => Promise<string> }> {
    const deployment = await createDeployment({ state: { path: 'data/pinpoint.db' } });
    deployments.push(deployment);
    const pidFile = join(deployment.folder, 'pinpoint.pid');
    const baseText = `${await readFile(deployment.configFile, 'utf8')}trusted_proxies = ["127.0.0.1"]\n`;
    await writeFile(deployment.configFile, `${baseText}workers = 2\n`);
    const server = await startPinpoint(deployment, { args: ['--pid-file', pidFile] });
    const before = await twoWorkers(server);
    await eventually('the pid file', () => existsSync(pidFile));
    const second = await addClient(deployment, 'second', 'second-secret');
    const withSecond = async (workers = 2): Promise<string> => {
      const file = join(deployment.folder, `second-${workers}.hcl`);
      await writeFile(file, `${baseText}workers = ${workers}\n${second}`);
      return file;
    };
    return { deployment, server, pidFile, primary: server.child.pid as number, before, withSecond };
  }

  /** `pinpoint reload` started and not awaited: its exit and output once it ends. */
  function reloadInBackground(configFile: string, pidFile: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
    const child = spawn(process.execPath, cliArgs('reload', '--config', configFile, '--pid-file', pidFile), { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, PINPOINT_CONFIG: '' } });
    commands.add(child);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    return new Promise((resolve) =>
      child.once('close', (code) => {
        commands.delete(child);
        resolve({ code, stdout, stderr });
      }),
    );
  }

  /** Eight requests of client "second": the statuses, and the pids of the workers that answered them. */
  async function secondClientAt(server: PinpointProcess): Promise<{ statuses: number[]; pids: number[] }> {
    const answers = await sequence(8, () => clientCredentials(server.baseUrl, 'second', 'second-secret'));
    const pids = await Promise.all(answers.map((answer) => pidOf(server, answer.requestId)));
    return { statuses: answers.map((answer) => answer.status), pids: [...new Set(pids)].sort((a, b) => a - b) };
  }

  test('a worker that dies while its replacement starts leaves no orphan: after the reload two workers, both new, both serving the new config', async () => {
    const { server, pidFile, primary, before, withSecond } = await twoWorkerServer();
    const reloading = reloadInBackground(await withSecond(), pidFile);
    // The first new worker is the one for slot 0: the old workers die while it starts (each is restarted at once).
    await soon('the first new worker', async () => (await workersOf(primary)).some((pid) => !before.includes(pid)));
    for (const pid of before) process.kill(pid, 'SIGKILL');
    const reloaded = await reloading;
    assert.equal(reloaded.code, 0, reloaded.stderr);
    const after = await workersOf(primary);
    assert.equal(after.length, 2, `the workers after the reload: ${after.join(' ')}\n${server.output.slice(-3000)}`);
    assert.ok(after.every((pid) => !before.includes(pid)));
    const second = await secondClientAt(server);
    assert.deepEqual(second.statuses, [200, 200, 200, 200, 200, 200, 200, 200], 'every worker serves the new config');
    assert.deepEqual(second.pids, after, 'both workers answered');
  });

  test('a reload whose second new worker dies as it starts is rolled back: exit 1, every worker serves the old config, and SIGHUP re-reads the old file', async () => {
    const { server, pidFile, primary, before, withSecond } = await twoWorkerServer();
    const reloading = reloadInBackground(await withSecond(), pidFile);
    const first = await soon('the new worker of slot 0', async () => (await workersOf(primary)).find((pid) => !before.includes(pid)));
    const secondNew = await soon('the new worker of slot 1', async () => (await workersOf(primary)).find((pid) => !before.includes(pid) && pid !== first));
    process.kill(secondNew, 'SIGKILL');
    const reloaded = await reloading;
    assert.equal(reloaded.code, 1, reloaded.stdout);
    assert.match(reloaded.stderr, /did not take/);
    const after = await workersOf(primary);
    assert.equal(after.length, 2, `the workers after the reload: ${after.join(' ')}`);
    const old = await secondClientAt(server);
    assert.deepEqual(old.statuses, [401, 401, 401, 401, 401, 401, 401, 401], 'every worker serves the old config');
    assert.deepEqual(old.pids, after, 'both workers answered');

    // The file the server follows is still its own, which has no client "second".
    const reloadsBefore = server.logs.filter((record) => String(record.msg).startsWith('configuration reloaded')).length;
    process.kill(primary, 'SIGHUP');
    await eventually('the reload', () => server.logs.filter((record) => String(record.msg).startsWith('configuration reloaded')).length > reloadsBefore, 1200);
    const reread = await secondClientAt(server);
    assert.deepEqual(reread.statuses, [401, 401, 401, 401, 401, 401, 401, 401], 'SIGHUP re-read the file the server was started with');
  });

  test('lowering workers by reload while a restart waits out its backoff leaves no extra worker once the restart was due', async () => {
    const { server, pidFile, primary, before, withSecond } = await twoWorkerServer();
    // Kill the worker of slot 1 as soon as it is back, until its next restart waits 10 s (the backoff doubles from 100 ms).
    let target = before[1] as number;
    let pending: Record<string, unknown> | undefined;
    for (let kill = 0; kill < 12 && pending === undefined; kill += 1) {
      const known = await workersOf(primary);
      process.kill(target, 'SIGKILL');
      const line = await deathLine(server, target);
      if (line.slot === 1 && Number(line.restartInMs) >= 10_000) {
        pending = line;
        break;
      }
      const newcomer = await eventually('the restarted worker', async () => (await workersOf(primary)).find((pid) => !known.includes(pid)), 200);
      // Forked in slot order, the higher pid is slot 1's; should it have been slot 0's, slot 1 is the other one.
      target = line.slot === 1 ? newcomer : (known.find((pid) => pid !== target) as number);
    }
    assert.ok(pending !== undefined, server.output.slice(-3000));
    const reloaded = await reloadInBackground(await withSecond(1), pidFile);
    assert.equal(reloaded.code, 0, reloaded.stderr);
    assert.match(reloaded.stdout, /1 worker\(s\) serve it/);
    // Past the moment the pending restart was due (the log's time is the primary's clock, this machine's).
    await sleep(Math.max(0, Number(pending.time) + Number(pending.restartInMs) + 2000 - Date.now()));
    const workers = await workersOf(primary);
    assert.equal(workers.length, 1, `workers once the dropped slot's restart was due: ${workers.join(' ')}`);
    const second = await secondClientAt(server);
    assert.deepEqual(second.statuses, [200, 200, 200, 200, 200, 200, 200, 200]);
    assert.deepEqual(second.pids, workers);
  });

  test('a worker that stops on its own is logged with its exit code and signal (not "[redacted]")', async () => {
    const { server, before } = await twoWorkerServer();
    const [stopped, killed] = before as [number, number];
    process.kill(stopped, 'SIGTERM');
    const stoppedLine = await deathLine(server, stopped);
    assert.equal(stoppedLine.exit_code, 0, JSON.stringify(stoppedLine));
    assert.equal(stoppedLine.signal, null, JSON.stringify(stoppedLine));
    process.kill(killed, 'SIGKILL');
    const killedLine = await deathLine(server, killed);
    assert.equal(killedLine.exit_code, null, JSON.stringify(killedLine));
    assert.equal(killedLine.signal, 'SIGKILL', JSON.stringify(killedLine));
    assert.ok(!JSON.stringify([stoppedLine, killedLine]).includes('[redacted]'));
  });

  test('SIGTERM while `pinpoint reload` runs: the reload says it was not taken, the primary exits 0 and leaves no pid or reload-result file', async () => {
    const { server, pidFile, primary, withSecond } = await twoWorkerServer();
    const reloading = reloadInBackground(await withSecond(), pidFile);
    // The primary reads the new config in a child of its own: stop the server while it does.
    await soon('the config reader', async () => {
      const children = await childrenOf(primary);
      const commandLines = await Promise.all(children.map(commandLineOf));
      return commandLines.some((args) => args.some((arg) => arg.includes('load-child')));
    });
    const termAt = server.logs.length;
    server.child.kill('SIGTERM');
    const reloaded = await reloading;
    assert.equal(reloaded.code, 1, reloaded.stdout);
    assert.doesNotMatch(reloaded.stdout, /reloaded/);
    assert.match(reloaded.stderr, /stopp/);
    assert.deepEqual(await server.exited, { code: 0, signal: null }, server.output);
    assert.ok(!server.logs.slice(termAt).some((record) => String(record.msg).startsWith('configuration reloaded')), server.output.slice(-3000));
    assert.equal(existsSync(pidFile), false, 'the pid file is removed');
    assert.equal(existsSync(`${pidFile}.reload-result`), false, 'no reload-result file is left');
  });
});

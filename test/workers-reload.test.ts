/** DESIGN.md §11: reloads (SIGHUP, `pinpoint reload`) that add metrics, and reloads while workers die or the server stops. */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  createDeployment,
  freePort,
  killAll,
  removeDeployment,
  startPinpoint,
  type Deployment,
  type PinpointProcess,
} from './helpers/process.js';
import { cliArgs } from './helpers/cli-command.js';
import {
  fresh,
  clientCredentials,
  eventually,
  pidOf,
  childrenOf,
  commandLineOf,
  workersOf,
  twoWorkers,
  addClient,
  requestsSummedAtMetrics,
  sequence,
} from './helpers/cluster.js';

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

/** DESIGN.md §11: what a draining worker does with its keep-alive connections and its counts, on SQLite and PostgreSQL. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { COLLECT_EVERY_MS } from '../src/http/metrics.js';
import {
  createTestDatabase,
  killAll,
  removeDeployment,
  type Deployment,
  type PinpointProcess,
  type StateSpec,
  type TestDatabase,
} from './helpers/process.js';
import {
  POSTGRES_URL,
  type Answer,
  fresh,
  clientCredentials,
  eventually,
  pidOf,
  workersOf,
  twoWorkers,
  startWithMetrics,
  cli,
  metricValue,
  sequence,
  keepAliveLoad,
} from './helpers/cluster.js';

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
    ({ deployment, server, metricsPort, pidFile } = await startWithMetrics(await state(), 'workers = 2\n'));
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

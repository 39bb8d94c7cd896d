/**
 * `npm run bench` — Pinpoint side by side with oidc-provider (and a bare Fastify floor) on loopback.
 * Every server runs in its own process pinned to core 0, the autocannon driver in its own process pinned
 * to core 1. Within a case the servers' measured segments are interleaved (A B C C B A ...) so the
 * machine's drift hits them alike; the ratios, not the absolute figures, are the result.
 *
 *   npm run bench                     full run (about 10 minutes), writes bench/RESULTS.md
 *   npm run bench -- --smoke          every case for 1 s, small scale seed, no thresholds (CI)
 *   npm run bench -- --profile CASE   Pinpoint (SQLite) under CASE at c=16 with the V8 profiler, then the hottest functions
 *                                     (--target oidc-provider|pinpoint-memory to profile another; --perf adds Linux perf,
 *                                     native code, kernel and every thread included)
 *   npm run bench -- --keep           keep the temp folder (databases, access logs, pools, profiles)
 *   npm run bench -- --only A,B       only these cases (names as in the table, or `scale`); no RESULTS.md
 *   npm run bench -- --connections 16 only this concurrency (default 1,16); no RESULTS.md
 *   npm run bench -- --variant FILE   also run "pinpoint variant": SQLite through the SqliteStore FILE exports, interleaved
 *                                     with the others, to measure a store change before making it in src/; no RESULTS.md
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm, stat, unlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { API, AUDIENCE, SCOPE, startNodeFlags, tasksetAvailable, type PoolKind } from './common.js';
import type { BodySpec, Expectation, RunResult, RunSpec } from './driver.js';
import { cpuSeconds, DRIVER_CORE, Peer, pinSelf, residentMemory, runScript, SERVER_CORE } from './processes.js';
import { summariseProfile } from './profile.js';
import { CASES, evaluateTargets, printReport, writeResults, type CaseName, type Row, type ScaleResult } from './report.js';

const here = dirname(fileURLToPath(import.meta.url));
const { values: options } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    keep: { type: 'boolean', default: false },
    profile: { type: 'string' },
    target: { type: 'string', default: 'pinpoint-sqlite' },
    only: { type: 'string' },
    connections: { type: 'string' },
    perf: { type: 'boolean', default: false },
    variant: { type: 'string' },
  },
  strict: true,
});
const smoke = options.smoke === true;
const only = options.only?.split(',');
const selected = (name: string): boolean => only === undefined || only.includes(name);
const concurrencies = (options.connections ?? '1,16').split(',').map(Number);
const partial = only !== undefined || options.connections !== undefined || options.variant !== undefined;

/** Seconds: warm-up per server and case, one measured segment, and the segment order per case. */
const timing = smoke
  ? { warmup: 0, segment: 1, order: <T>(servers: readonly T[]): T[] => [...servers] }
  : {
      warmup: 2,
      segment: 2.5,
      // A B C C B A A B C C B A: 4 segments of 2.5 s = 10 s measured per server.
      order: <T>(servers: readonly T[]): T[] => {
        const back = [...servers].reverse();
        return [...servers, ...back, ...servers, ...back];
      },
    };
const SCALE = smoke ? { small: 10_000, large: 20_000 } : { small: 10_000, large: 1_000_000 };

type ServerName = 'pinpoint-sqlite' | 'pinpoint-memory' | 'pinpoint-variant' | 'oidc-provider' | 'floor' | 'scale-small' | 'scale-large';
interface Ready {
  readonly ready: true;
  readonly port: number;
  readonly issuer: string;
  readonly state: string;
}
interface Server {
  readonly name: ServerName;
  readonly peer: Peer<Ready>;
  readonly port: number;
  readonly issuer: string;
}

/** One server under one case: what to send and what must come back. */
interface Participant {
  readonly label: string;
  readonly server: Server;
  readonly path: string;
  readonly body: BodySpec;
  readonly expect: Expectation;
  readonly pool?: { readonly kind: PoolKind; readonly name: string; readonly preseeded: boolean };
}

const pinned = tasksetAvailable();
const core = (wanted: number): number | undefined => (pinned ? wanted : undefined);
const temp = await mkdtemp(join(tmpdir(), 'pinpoint-bench-'));
const started = Date.now();
const log = (line: string): void => void process.stdout.write(`${line}\n`);

if (!pinned) log('warning: taskset not found (util-linux): servers and driver are NOT pinned; figures reward whoever uses background threads');
else pinSelf(DRIVER_CORE);
log(`bench: ${smoke ? 'smoke (1 s per case, no thresholds)' : 'full run'}; temp folder ${temp}`);
if (smoke) log(`bench: smoke mode seeds ${SCALE.large.toLocaleString('en')} grants for the "large" scale case instead of 1,000,000`);

const driver = new Peer<{ ready: true }>('driver', { script: join(here, 'driver.ts'), core: core(DRIVER_CORE) });
const servers: Server[] = [];

const shippedNodeFlags = await startNodeFlags();

async function startServer(name: ServerName, script: string, env: Record<string, string> = {}, nodeOptions: string[] = []): Promise<Server> {
  const peer = new Peer<Ready>(name, {
    script: join(here, script),
    env,
    core: core(SERVER_CORE),
    stdout: join(temp, `${name}.log`),
    stderr: join(temp, `${name}.err`),
    // Every server gets the node flags Pinpoint ships with: the ratios compare code, not runtime settings.
    nodeOptions: [...shippedNodeFlags, ...nodeOptions],
  });
  let ready: Ready;
  try {
    ready = await peer.ready;
  } catch (error) {
    const stderr = await readFile(join(temp, `${name}.err`), 'utf8').catch(() => '');
    throw new Error(`${name} did not start: ${(error as Error).message}\n${stderr.slice(-4000)}`);
  }
  const server = { name, peer, port: ready.port, issuer: ready.issuer };
  servers.push(server);
  return server;
}

const pinpointEnv = (state: 'sqlite' | 'memory', path?: string): Record<string, string> => ({
  BENCH_PINPOINT: JSON.stringify({ state, ...(path === undefined ? {} : { path }) }),
});

/** Highest rate seen per server and concurrency (client_credentials runs first: it bounds the other cases). */
const bestRate = new Map<string, number>();
const caseRate = new Map<string, number>();
let poolFiles = 0;

/**
 * Makes sure the driver holds fresh tokens for `seconds` of this participant at its fastest, making
 * `spare` times what is missing: a pool that ran dry would void the case, and its refused requests
 * would trip the server's failure limiter (429) for the cases after it.
 */
async function ensurePool(participant: Participant, connections: number, seconds: number, group: string, spare = 1): Promise<void> {
  const pool = participant.pool;
  // Pre-seeded pools were sized from the measured refresh rate; running dry shows up as errors.
  if (pool === undefined || pool.preseeded) return;
  // The case's own rate once measured (its warm-up); before that, the server's best at this concurrency
  // (client_credentials runs first and is the fastest case). Cold (smoke mode), first rates say little.
  const measured = caseRate.get(`${group}|${participant.label}`);
  const bound = bestRate.get(`${participant.server.name}|c${connections}`) ?? bestRate.get(`${participant.server.name}|c16`) ?? 15_000;
  const estimate = smoke ? Math.max(measured ?? 0, bound, 15_000) : (measured ?? bound);
  // Tokens made and never used stay in the server's state, so the margin is modest; segments top up.
  const need = Math.ceil(estimate * seconds * (measured === undefined ? 1.5 : 1.3)) + 4 * connections + 200;
  const remaining = await driver.call<number>('remaining', { name: pool.name });
  if (remaining >= need) return;
  const file = join(temp, `pool-${(poolFiles += 1)}.txt`);
  await participant.server.peer.call('seed', { kind: pool.kind, count: spare * need - remaining, file });
  await driver.call('pool', { name: pool.name, file });
  await unlink(file);
}

interface Tally {
  responses: number;
  seconds: number;
  errors: number;
  firstError?: string;
  segmentRates: number[];
  serverCpu: number;
  driverCpu: number;
  firstSecond: number[];
}

async function runOnce(participant: Participant, connections: number, seconds: number, group: string, series?: string): Promise<RunResult & { serverCpu: number }> {
  await ensurePool(participant, connections, seconds, group, 2);
  const spec: RunSpec = {
    port: participant.server.port,
    path: participant.path,
    connections,
    seconds,
    body: participant.body,
    expect: participant.expect,
    ...(series === undefined ? {} : { series }),
  };
  const cpuBefore = cpuSeconds(participant.server.peer.pid);
  const wallBefore = performance.now();
  const result = await driver.call<RunResult>('run', { spec });
  const serverCpu = (cpuSeconds(participant.server.peer.pid) - cpuBefore) / ((performance.now() - wallBefore) / 1000);
  const rate = result.responses / result.seconds;
  const key = `${participant.server.name}|c${connections}`;
  bestRate.set(key, Math.max(bestRate.get(key) ?? 0, rate));
  caseRate.set(`${group}|${participant.label}`, Math.max(caseRate.get(`${group}|${participant.label}`) ?? 0, rate));
  return { ...result, serverCpu };
}

const errorCount = (result: RunResult): number => result.non2xx + result.errors + result.timeouts + result.invalid + result.exhausted;

function describeErrors(result: RunResult): string {
  const parts = [
    result.non2xx > 0 ? `${result.non2xx} non-2xx` : '',
    result.errors > 0 ? `${result.errors} socket errors` : '',
    result.timeouts > 0 ? `${result.timeouts} timeouts` : '',
    result.invalid > 0 ? `${result.invalid} invalid bodies (first: ${result.firstInvalid ?? '?'})` : '',
    result.exhausted > 0 ? `${result.exhausted} requests without a fresh token` : '',
  ];
  return parts.filter(Boolean).join(', ');
}

/** Warms every participant, then runs the interleaved measured segments; one row per participant. */
async function runCase(
  caseName: CaseName | 'scale',
  connections: number,
  participants: readonly Participant[],
  afterWarmup?: () => Promise<unknown>,
): Promise<Row[]> {
  const group = `${caseName}|c${connections}`;
  const tallies = new Map<string, Tally>(
    participants.map((p) => [p.label, { responses: 0, seconds: 0, errors: 0, segmentRates: [], serverCpu: 0, driverCpu: 0, firstSecond: [] }]),
  );
  const note = (participant: Participant, result: RunResult): Tally => {
    const tally = tallies.get(participant.label) as Tally;
    const errors = errorCount(result);
    if (errors > 0) {
      tally.errors += errors;
      tally.firstError ??= describeErrors(result);
    }
    return tally;
  };
  process.stdout.write(`  ${caseName} c=${connections}: `);
  if (timing.warmup > 0) {
    for (const participant of participants) note(participant, await runOnce(participant, connections, timing.warmup, group));
  }
  // Every token the measured segments need is made now, sized from the warm-up's rate, so no seeding falls
  // between them; a short second warm-up lets each server absorb what seeding wrote (its checkpoint).
  const pooled = participants.filter((participant) => participant.pool !== undefined);
  const measuredSeconds = timing.segment * timing.order([0]).length;
  const settleSeconds = timing.warmup > 0 ? 1 : 0;
  for (const participant of pooled) await ensurePool(participant, connections, measuredSeconds + settleSeconds, group);
  if (settleSeconds > 0) for (const participant of pooled) note(participant, await runOnce(participant, connections, settleSeconds, group));
  await afterWarmup?.();
  for (const participant of timing.order(participants)) {
    const result = await runOnce(participant, connections, timing.segment, group, `${group}|${participant.label}`);
    const tally = note(participant, result);
    tally.responses += result.responses;
    tally.seconds += result.seconds;
    tally.segmentRates.push(result.responses / result.seconds);
    tally.serverCpu += result.serverCpu * result.seconds;
    tally.driverCpu = Math.max(tally.driverCpu, result.driverCpu);
    // The first second of each segment against the segment's own rate: below 1 means still warming.
    const [first = 0, second = 0] = result.perHalfSecond;
    if (result.seconds >= 2) tally.firstSecond.push((first + second) / (result.responses / result.seconds));
    process.stdout.write('.');
  }
  process.stdout.write('\n');
  const rows: Row[] = [];
  for (const participant of participants) {
    const tally = tallies.get(participant.label) as Tally;
    const latency = await driver.call<{ p50: number; p90: number; p99: number; max: number }>('percentiles', { series: `${group}|${participant.label}` });
    rows.push({
      caseName,
      connections,
      server: participant.label,
      rate: tally.responses / tally.seconds,
      segmentRates: tally.segmentRates,
      p50: latency.p50,
      p99: latency.p99,
      max: latency.max,
      errors: tally.errors,
      ...(tally.firstError === undefined ? {} : { firstError: tally.firstError }),
      serverCpu: tally.serverCpu / tally.seconds,
      driverCpu: tally.driverCpu,
      firstSecond: tally.firstSecond.length === 0 ? Number.NaN : tally.firstSecond.reduce((sum, x) => sum + x, 0) / tally.firstSecond.length,
      rss: residentMemory(participant.server.peer.pid).rss,
    });
  }
  return rows;
}

const ccBody: BodySpec = { kind: 'static', text: `grant_type=client_credentials&scope=${SCOPE}` };

function participantsFor(caseName: CaseName, list: readonly { label: string; server: Server }[]): Participant[] {
  return list.map(({ label, server }) => {
    const oidc = server.name === 'oidc-provider';
    switch (caseName) {
      case 'client_credentials':
        // Pinpoint: the client's whole audience (DESIGN.md §5); oidc-provider: its default resource.
        return { label, server, path: '/token', body: ccBody, expect: { shape: 'token', aud: oidc ? API : AUDIENCE, refreshToken: false, issuer: server.issuer } };
      case 'refresh_token+resource': {
        const name = `${server.name}:refresh`;
        return { label, server, path: '/token', body: { kind: 'refresh', pool: name }, expect: { shape: 'token', aud: API, refreshToken: true, issuer: server.issuer }, pool: { kind: 'refresh', name, preseeded: false } };
      }
      case 'authorization_code+resource': {
        const name = `${server.name}:code`;
        return { label, server, path: '/token', body: { kind: 'code', pool: name }, expect: { shape: 'token', aud: API, refreshToken: true, issuer: server.issuer }, pool: { kind: 'code', name, preseeded: false } };
      }
    }
  });
}

async function stopAll(list: readonly Server[]): Promise<void> {
  await Promise.all(list.map((server) => server.peer.stop()));
  for (const server of list) servers.splice(servers.indexOf(server), 1);
}

/** One server under one case at c=16, with the V8 profiler (and perf) on for the measured segments only (no seeding, no warm-up). */
async function profileRun(caseName: CaseName): Promise<void> {
  const target = options.target as ServerName;
  const nodeOptions = options.perf ? ['--perf-basic-prof-only-functions'] : [];
  const server =
    target === 'oidc-provider'
      ? await startServer('oidc-provider', 'oidc-server.ts', {}, nodeOptions)
      : target === 'pinpoint-memory'
        ? await startServer('pinpoint-memory', 'pinpoint-server.ts', pinpointEnv('memory'), nodeOptions)
        : await startServer('pinpoint-sqlite', 'pinpoint-server.ts', pinpointEnv('sqlite', join(temp, 'pinpoint.db')), nodeOptions);
  const [participant] = participantsFor(caseName, [{ label: server.name, server }]);
  if (participant === undefined) return;
  // Every token the run needs is created before the profiler starts.
  await ensurePool(participant, 16, timing.warmup + timing.segment * timing.order([0]).length, `${caseName}|c16`);
  const file = join(temp, `${server.name}-${caseName}.cpuprofile`);
  const perfData = join(temp, 'perf.data');
  let perf: ChildProcess | undefined;
  const rows = await runCase(caseName, 16, [participant], async () => {
    if (options.perf) perf = spawn('perf', ['record', '-F', '999', '-g', '-p', String(server.peer.pid), '-o', perfData], { stdio: 'ignore' });
    if (server.name !== 'oidc-provider') await server.peer.call('loopDelay');
    await server.peer.call('profileStart');
  });
  await server.peer.call('profileStop', { file });
  if (server.name !== 'oidc-provider') {
    const delay = await server.peer.call<{ p50: number; p99: number; max: number }>('loopDelay');
    log(`event-loop delay while measured: p50 ${delay.p50.toFixed(1)} ms, p99 ${delay.p99.toFixed(1)} ms, max ${delay.max.toFixed(1)} ms`);
  }
  if (perf !== undefined) {
    const exited = new Promise((resolve) => perf?.once('exit', resolve));
    perf.kill('SIGINT');
    await exited;
  }
  printReport(rows, [], undefined, pinned, log);
  for (const line of await summariseProfile(temp)) log(line);
  if (perf !== undefined) {
    const report = spawnSync('perf', ['report', '-i', perfData, '--no-children', '--sort', 'dso,sym', '--stdio', '-g', 'none'], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
    log('perf, self time by symbol (whole process, every thread):');
    for (const line of report.stdout.split('\n').filter((l) => l.trim() !== '' && !l.startsWith('#')).slice(0, 40)) log(`  ${line.trim()}`);
  }
}

async function main(): Promise<number> {
  await driver.ready;
  if (options.profile !== undefined) {
    if (!(CASES as readonly string[]).includes(options.profile)) throw new Error(`--profile takes one of ${CASES.join(', ')}`);
    await profileRun(options.profile as CaseName);
    return 0;
  }

  log('starting servers (each in its own process, pinned to core 0; driver on core 1)');
  const [sqlite, memory, oidc, floor] = await Promise.all([
    startServer('pinpoint-sqlite', 'pinpoint-server.ts', pinpointEnv('sqlite', join(temp, 'pinpoint.db'))),
    startServer('pinpoint-memory', 'pinpoint-server.ts', pinpointEnv('memory')),
    startServer('oidc-provider', 'oidc-server.ts'),
    startServer('floor', 'floor-server.ts'),
  ]);
  const peers = [
    { label: 'pinpoint sqlite', server: sqlite },
    { label: 'oidc-provider', server: oidc },
    { label: 'pinpoint memory', server: memory },
  ];
  if (options.variant !== undefined) {
    const env = { ...pinpointEnv('sqlite', join(temp, 'variant.db')), BENCH_STORE_MODULE: options.variant };
    peers.push({ label: 'pinpoint variant', server: await startServer('pinpoint-variant', 'pinpoint-server.ts', env) });
  }
  const floorParticipants: Participant[] = [
    { label: 'fastify+jose', server: floor, path: '/jose', body: ccBody, expect: { shape: 'token', aud: AUDIENCE, refreshToken: false, issuer: floor.issuer } },
    { label: 'fastify bare', server: floor, path: '/bare', body: ccBody, expect: { shape: 'plain' } },
  ];

  const rows: Row[] = [];
  for (const caseName of CASES.filter(selected)) {
    for (const connections of concurrencies) {
      const list = participantsFor(caseName, peers);
      if (caseName === 'client_credentials') list.push(...floorParticipants);
      rows.push(...(await runCase(caseName, connections, list)));
    }
  }
  const logSize = await stat(join(temp, 'pinpoint-sqlite.log')).then((s) => s.size, () => 0);
  log(`  pinpoint sqlite access log: ${(logSize / 1e6).toFixed(1)} MB written at level info`);
  await stopAll([...servers]);
  if (!selected('scale')) {
    log('');
    return printReport(rows, [], undefined, pinned, log) > 0 ? 1 : 0;
  }

  // Scale: refresh with few and with many live grants, each SQLite file seeded in bulk by a separate process.
  const measured = timing.segment * timing.order([0]).length;
  const refreshRate = rows.find((row) => row.caseName === 'refresh_token+resource' && row.connections === 16 && row.server === 'pinpoint sqlite')?.rate ?? 10_000;
  const tokens = Math.ceil(Math.max(refreshRate, 2000) * (timing.warmup + measured) * 1.6) + 5000;
  const scale: ScaleResult = { small: SCALE.small, large: SCALE.large, seedSeconds: {}, rssAfterSeed: {}, rssAfterRun: {}, peakRss: {} };
  const scaleServers: { label: string; server: Server }[] = [];
  for (const [which, grants] of [['small', SCALE.small], ['large', SCALE.large]] as const) {
    const path = join(temp, `scale-${which}.db`);
    const out = join(temp, `scale-${which}.tokens`);
    log(`  seeding ${grants.toLocaleString('en')} live grants in bulk (${path})`);
    const seeded = JSON.parse(await runScript({ script: join(here, 'seed-sqlite.ts'), args: [path, String(grants), String(tokens), out], core: core(SERVER_CORE) })) as { seconds: number };
    scale.seedSeconds[which] = seeded.seconds;
    const server = await startServer(which === 'small' ? 'scale-small' : 'scale-large', 'pinpoint-server.ts', pinpointEnv('sqlite', path));
    scale.rssAfterSeed[which] = residentMemory(server.peer.pid).rss;
    await driver.call('pool', { name: `${server.name}:refresh`, file: out });
    scaleServers.push({ label: `${grants.toLocaleString('en')} grants`, server });
  }
  const scaleParticipants = participantsFor('refresh_token+resource', scaleServers).map((p) => ({
    ...p,
    pool: { ...(p.pool as NonNullable<Participant['pool']>), preseeded: true },
  }));
  const scaleRows = await runCase('scale', 16, scaleParticipants);
  for (const [which, entry] of [['small', scaleServers[0]], ['large', scaleServers[1]]] as const) {
    if (entry === undefined) continue;
    const server = entry.server;
    const memoryNow = residentMemory(server.peer.pid);
    scale.rssAfterRun[which] = memoryNow.rss;
    scale.peakRss[which] = memoryNow.peak;
  }
  await stopAll(scaleServers.map((entry) => entry.server));

  let signing: string | undefined;
  if (!smoke) {
    log('  signing micro-benchmark (bench/sign.ts, pinned to core 0)');
    signing = await runScript({ script: join(here, 'sign.ts'), env: { SIGN_SECONDS: '2' }, core: core(SERVER_CORE) });
  }

  log('');
  const refused = printReport(rows, scaleRows, scale, pinned, log);
  const targets = smoke ? undefined : evaluateTargets(rows, scaleRows, scale);
  if (targets !== undefined) {
    log('');
    log('targets (same run; Pinpoint on SQLite against oidc-provider in memory):');
    for (const target of targets) log(`  ${target.met ? 'met    ' : 'NOT MET'}  ${target.name}: ${target.detail}`);
  }
  log(`\nbench: ${((Date.now() - started) / 1000).toFixed(0)} s`);
  if (!smoke && !partial) {
    await writeResults(join(here, 'RESULTS.md'), { rows, scaleRows, scale, targets: targets ?? [], signing, pinned, seconds: (Date.now() - started) / 1000, nodeFlags: shippedNodeFlags });
    log('bench: wrote bench/RESULTS.md');
  }
  return refused > 0 ? 1 : 0;
}

let exitCode = 1;
try {
  exitCode = await main();
} catch (error) {
  process.stderr.write(`bench: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
} finally {
  await Promise.all(servers.map((server) => server.peer.stop()));
  await driver.stop();
  if (options.keep) log(`bench: kept ${temp}`);
  else await rm(temp, { recursive: true, force: true });
}
process.exit(exitCode);

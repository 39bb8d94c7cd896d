/**
 * `npm run bench` — Pinpoint side by side with oidc-provider (and a bare Fastify floor) on loopback.
 * Every server runs in its own process pinned to core 0 (but the second PostgreSQL instance, see below), the
 * autocannon driver in its own process pinned to core 1. Within a case the servers' measured segments are
 * interleaved (A B C C B A ...) so the machine's drift hits them alike; the ratios, not the absolute figures, are the result.
 *
 *   npm run bench                     full run (about 15 minutes), adds its section at the top of bench/RESULTS.md
 *   npm run bench -- --smoke          every case for 1 s, small scale seed, no thresholds (CI)
 *   npm run bench -- --profile CASE   Pinpoint (SQLite) under CASE at c=16 with the V8 profiler, then the hottest functions
 *                                     (--target oidc-provider|floor|pinpoint-memory|pinpoint-postgres|pinpoint-same-signing|v0.2.0 to profile another; --perf adds Linux perf,
 *                                     native code, kernel and every thread included; --against TARGET then profiles a second
 *                                     server the same way and prints both side by side, in µs per request; each run also
 *                                     prints every thread's CPU per request from /proc, kernel time apart; --no-v8 leaves the
 *                                     V8 profiler off and prints only those figures (and perf's): the profiler slows servers
 *                                     unevenly, so only --no-v8 figures compare two servers' CPU per request)
 *   npm run bench -- --instructions CASE  the --target server (default Pinpoint on SQLite) under CASE at c=16 inside valgrind's
 *                                     callgrind: instructions per request over the measured segments, per thread, and the
 *                                     main thread's heaviest functions; --against TARGET counts a second server the same way
 *                                     (--target baseline: the build --baseline DIR names), then where the two differ, by
 *                                     function. Counted, not timed: the machine's other load does not move the counts, though
 *                                     one build's main-thread count still moves about ±2.5 % between runs (when V8 optimises,
 *                                     when GC runs) and its background threads' more; kernel time is not in them.
 *                                     BENCH_CALLGRIND_EXTRA passes more callgrind options, e.g. "--separate-callers6=*JsonStringify*"
 *                                     to see with --keep and callgrind_annotate --inclusive=yes who calls a function (its
 *                                     JIT callers are addresses; the dumps' -perf.map beside them names them)
 *   npm run bench -- --keep           keep the temp folder (databases, access logs, pools, profiles)
 *   npm run bench -- --only A,B       only these cases (names as in the table, `scale`, `postgres`, `v0.2.0`, `workers`, `storm` or
 *                                     `write-lock`: how long a refresh holds SQLite's write lock, bench/write-lock.ts); no RESULTS.md
 *   npm run bench -- --connections 16 only this concurrency (default 1,16); no RESULTS.md
 *   npm run bench -- --baseline DIR   A/B: Pinpoint (SQLite) as built now against the build in DIR (another checkout's dist/),
 *                                     interleaved, and no other server; no RESULTS.md
 *   npm run bench -- --rounds N       N rounds of A B C C B A per case (default 2); with other than 2, no RESULTS.md
 *   npm run bench -- --variant FILE   also run "pinpoint variant": SQLite through the SqliteStore FILE exports, interleaved
 *                                     with the others, to measure a store change before making it in src/; no RESULTS.md
 *
 * The introspection case asks each server about access tokens it issued (a pool of them, introspected in turn over and
 * over, as resource servers do): see INTROSPECTION in report.ts for what each side introspects.
 *
 * Two cases measure a request against Pinpoint's client_credentials on the same server process, interleaved, and
 * print a cost (client_credentials req/s over theirs):
 * - "token_exchange" (DESIGN.md §12, RFC 8693): a configured confidential client with a token_exchange block exchanges
 *   200 person access tokens addressed to it (made beforehand by refresh-token exchanges of the bench client, reused
 *   in turn) for a token naming one resource of its own audience. oidc-provider has no token exchange: no ratio to it.
 * - "client_credentials+dpop" (DESIGN.md §13, RFC 9449): client_credentials with a DPoP proof per request, the proofs
 *   made by the driver with jose right before each segment (each is used once; the server takes an iat within 60 s),
 *   beside plain client_credentials, on Pinpoint and on oidc-provider (DPoP on by default in v9), so the ratio with
 *   proofs can be held to the ratio without.
 *
 * Two lines compare Pinpoint with itself. "jose cost": client_credentials at c=16 also runs a second Pinpoint whose
 * dist/crypto/jwt.js is replaced by bench/legacy-jwt.ts (the previous node:crypto signing) through a resolution hook
 * loaded into that process only (bench/legacy-signing.ts). "scale postgres": refresh on one PostgreSQL database with
 * one instance (core 0) and with two (cores 0 and 1), the driver's 16 connections split 8/8 (bench/postgres.ts).
 *
 * Three more parts measure the issue "Every core, steady latency" (DESIGN.md §11):
 * - "baseline ... v0.2.0": refresh and code exchange at c=16, this build against the release v0.2.0 (634e1de), built
 *   beside this checkout in .bench-cache/ (bench/release.ts) and run by its own benchmark server, interleaved. "same
 *   signing" is this build with v0.2.0's node:crypto signing (the "jose cost" substitution), so the ratio compares
 *   everything but the signature; "own signing" is this build as it is. Skipped in smoke mode (it would build).
 * - "scale workers 2": client_credentials at c=16 on `pinpoint serve --workers 2` against `--workers 1` (the real CLI,
 *   SQLite), the servers free to use every core and the driver too; "not available" when this build refuses the flag.
 * - "storm": `pinpoint serve` (every core) with a real scrypt password hash; token requests at concurrency 8 while 8
 *   browsers sign in through the password form (bench/storm.ts); the token p99 and the server's peak resident memory,
 *   summed over its processes (sampled from /proc).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtemp, readdir, readFile, rename, rm, stat, unlink } from 'node:fs/promises';
import { cpus, loadavg, tmpdir } from 'node:os';
import { basename, dirname, isAbsolute, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { API, AUDIENCE, DOWNSTREAM, EXCHANGE_BASIC_AUTH, EXCHANGE_CLIENT_ID, SCOPE, startNodeFlags, tasksetAvailable, type PoolKind } from './common.js';
import type { BodySpec, Expectation, RunResult, RunSpec } from './driver.js';
import { createBenchDatabase, describeServer, serverAddress, type BenchDatabase } from './postgres.js';
import { hashPasswordWithCli, PASSWORD, startCliServer, writeDeployment, type CliServer } from './cli-server.js';
import {
  ALL_CORES,
  cpuOfNamed,
  cpuOfTree,
  DRIVER_CORE,
  machineTicks,
  Peer,
  pinProcess,
  pinSelf,
  processTree,
  residentMemory,
  runScript,
  SERVER_CORE,
  threadCpu,
  threadCpuUsed,
  treeResidentMemory,
  type Cores,
  type ServerProcess,
  type ThreadCpu,
} from './processes.js';
import { prepareRelease, RELEASE, type PreparedRelease } from './release.js';
import type { StormMeasurement } from './storm.js';
import { comparisonLines, countedInstructions, functionCosts, instructionLines, readPerfMap, type CountedRun } from './instructions.js';
import { compareProfiles, summariseProfile, threadCpuLines, type ProfiledRun } from './profile.js';
import {
  baselineLines,
  CASES,
  COST_CASES,
  COST_LABELS,
  evaluateTargets,
  issueTargets,
  LEGACY_SIGNING,
  printReport,
  ratioLines,
  RELEASE_LABELS,
  releaseLines,
  stormLines,
  workersLine,
  writeResults,
  type CaseName,
  type CostCaseName,
  type PostgresResult,
  type ReleaseResult,
  type Row,
  type ScaleResult,
  type StormOutcome,
  type StormResult,
  type WorkersResult,
} from './report.js';

const here = dirname(fileURLToPath(import.meta.url));
const { values: options } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    keep: { type: 'boolean', default: false },
    profile: { type: 'string' },
    instructions: { type: 'string' },
    target: { type: 'string', default: 'pinpoint-sqlite' },
    against: { type: 'string' },
    only: { type: 'string' },
    connections: { type: 'string' },
    perf: { type: 'boolean', default: false },
    'no-v8': { type: 'boolean', default: false },
    variant: { type: 'string' },
    baseline: { type: 'string' },
    rounds: { type: 'string', default: '2' },
  },
  strict: true,
});
/** The V8 profiler is on under --profile unless --no-v8 (it slows servers unevenly: see the option above). */
const v8Profiler = !options['no-v8'];
const smoke = options.smoke === true;
const only = options.only?.split(',');
const selected = (name: string): boolean => only === undefined || only.includes(name);
const concurrencies = (options.connections ?? '1,16').split(',').map(Number);
const rounds = Number(options.rounds);
if (!Number.isInteger(rounds) || rounds < 1) throw new Error(`--rounds takes a whole number of at least 1, not "${options.rounds}"`);
// RESULTS.md holds full runs only: every case, both concurrencies, the default rounds, no extra server.
const partial = only !== undefined || options.connections !== undefined || options.variant !== undefined || options.baseline !== undefined || rounds !== 2;

/** --instructions: seconds of warm-up under valgrind (about 2,000 requests at its pace) before counting starts. */
const INSTRUCTIONS_WARMUP_SECONDS = 40;
/** --instructions: the rate to size a server's first pool of tokens by, under valgrind (its warm-up then measures it). */
const INSTRUCTIONS_EXPECTED_RATE = 400;

/** Seconds: warm-up per server and case, one measured segment, and the segment order per case. */
const timing = smoke
  ? { warmup: 0, segment: 1, order: <T>(servers: readonly T[]): T[] => [...servers] }
  : options.instructions !== undefined
    ? // Under valgrind a server answers about 50 times slower: a longer warm-up lets V8 optimise what it runs most.
      { warmup: INSTRUCTIONS_WARMUP_SECONDS, segment: 10, order: <T>(servers: readonly T[]): T[] => [...servers, ...servers] }
    : {
      warmup: 2,
      segment: 2.5,
      // A B C C B A A B C C B A (--rounds 2, the default): 4 segments of 2.5 s = 10 s measured per server.
      order: <T>(servers: readonly T[]): T[] => {
        const back = [...servers].reverse();
        return Array.from({ length: rounds }, () => [...servers, ...back]).flat();
      },
    };
const SCALE = smoke ? { small: 10_000, large: 20_000 } : { small: 10_000, large: 1_000_000 };
/** Access tokens per server for the introspection case: introspected in turn, over and over (none is spent). */
const ACCESS_POOL = smoke ? 200 : 2000;
/** DPoP proofs per second of a run at the least (ensureProofs): the driver makes about 10,000 a second. */
const MIN_PROOF_RATE = 4000;
/** Subject tokens per server for token_exchange: one person's token is exchanged for each downstream call, so a modest pool reused in turn. */
const EXCHANGE_SUBJECTS = 200;
/** Refresh on PostgreSQL: total connections, split evenly over the instances. */
const POSTGRES_CONNECTIONS = 16;

type ServerName =
  | 'pinpoint-sqlite'
  | 'pinpoint-memory'
  | 'pinpoint-variant'
  | 'pinpoint-baseline'
  | 'pinpoint-legacy-signing'
  | 'oidc-provider'
  | 'floor'
  | 'scale-small'
  | 'scale-large'
  | 'postgres-a'
  | 'postgres-b'
  | 'release-current'
  | 'release-same-signing'
  | 'release-v0.2.0'
  | 'workers-1'
  | 'workers-2';
interface Ready {
  readonly ready: true;
  readonly port: number;
  readonly issuer: string;
  readonly state: string;
}
interface Server {
  readonly name: ServerName;
  /** A benchmark server (RPC), or `pinpoint serve` itself (bench/cli-server.ts). */
  readonly peer: ServerProcess;
  readonly port: number;
  readonly issuer: string;
}

/** One server under one case: what to send and what must come back. */
interface Leg {
  readonly server: Server;
  readonly path: string;
  readonly body: BodySpec;
  readonly expect: Expectation;
  /** The Authorization header (default: the bench client's HTTP Basic). */
  readonly authorization?: string;
  /**
   * expectedRate: the most req/s this leg should reach, for sizing its pool before the case has measured it; count:
   * how many lines a reusable pool (kind access) holds (default ACCESS_POOL).
   */
  readonly pool?: { readonly kind: PoolKind; readonly name: string; readonly preseeded: boolean; readonly expectedRate?: number; readonly count?: number };
  /** A DPoP proof per request (RFC 9449) from the driver's pool `name`, made for POST `htu` right before each run. */
  readonly proofs?: { readonly name: string; readonly htu: string };
}

/** One row of the table: one server, or several loaded at once with the connections split evenly over them. */
interface Participant {
  readonly label: string;
  readonly legs: readonly Leg[];
  /** A database whose processes' CPU is measured too. */
  readonly database?: BenchDatabase;
}

const single = (label: string, leg: Leg): Participant => ({ label, legs: [leg] });

const pinned = tasksetAvailable();
const core = (wanted: Cores): Cores | undefined => (pinned ? wanted : undefined);
const temp = await mkdtemp(join(tmpdir(), 'pinpoint-bench-'));
const started = Date.now();
/** The machine is shared: how busy it was when the run began goes into RESULTS.md beside how busy it was at the end. */
const loadAtStart = loadavg();
const log = (line: string): void => void process.stdout.write(`${line}\n`);

if (!pinned) log('warning: taskset not found (util-linux): servers and driver are NOT pinned; figures reward whoever uses background threads');
else pinSelf(DRIVER_CORE);
log(`bench: ${smoke ? 'smoke (1 s per case, no thresholds)' : 'full run'}; temp folder ${temp}`);
if (smoke) log(`bench: smoke mode seeds ${SCALE.large.toLocaleString('en')} grants for the "large" scale case instead of 1,000,000`);

const driver = new Peer<{ ready: true }>('driver', { script: join(here, 'driver.ts'), core: core(DRIVER_CORE) });
const servers: Server[] = [];

const shippedNodeFlags = await startNodeFlags();

/**
 * `script`: a file of bench/ or an absolute path; nodeOptions: more node flags; imports: modules loaded with --import
 * after tsx; onCore: where to pin (default SERVER_CORE).
 */
async function startServer(
  name: ServerName,
  script: string,
  env: Record<string, string> = {},
  extra: { nodeOptions?: readonly string[]; imports?: readonly string[]; onCore?: number; wrapper?: readonly string[] } = {},
): Promise<Server> {
  const peer = new Peer<Ready>(name, {
    script: isAbsolute(script) ? script : join(here, script),
    env,
    core: core(extra.onCore ?? SERVER_CORE),
    stdout: join(temp, `${name}.log`),
    stderr: join(temp, `${name}.err`),
    // Every server gets the node flags Pinpoint ships with: the ratios compare code, not runtime settings.
    nodeOptions: [...shippedNodeFlags, ...(extra.nodeOptions ?? [])],
    imports: extra.imports ?? [],
    ...(extra.wrapper === undefined ? {} : { wrapper: extra.wrapper }),
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
const postgresEnv = (url: string): Record<string, string> => ({ BENCH_PINPOINT: JSON.stringify({ state: 'postgres', url }) });

/** Highest rate seen per server and concurrency (client_credentials runs first: it bounds the other cases). */
const bestRate = new Map<string, number>();
const caseRate = new Map<string, number>();
let poolFiles = 0;

/** Connections of each of `legs` legs: `connections` split as evenly as it divides. */
const shares = (connections: number, legs: number): number[] =>
  Array.from({ length: legs }, (_, i) => Math.floor(connections / legs) + (i < connections % legs ? 1 : 0));

/**
 * Makes sure the driver holds fresh tokens for `seconds` of this leg at its fastest, making
 * `spare` times what is missing: a pool that ran dry would void the case, and its refused requests
 * would trip the server's failure limiter (429) for the cases after it. `key` names the leg within its case.
 */
async function ensurePool(leg: Leg, key: string, connections: number, seconds: number, group: string, spare = 1): Promise<void> {
  const pool = leg.pool;
  // Pre-seeded pools were sized from the measured refresh rate; running dry shows up as errors.
  if (pool === undefined || pool.preseeded) return;
  if (pool.kind === 'access') return seedOnce(leg.server, pool.name, pool.count ?? ACCESS_POOL);
  // The case's own rate once measured (its warm-up); before that, the leg's expected rate or the server's best at
  // this concurrency (client_credentials runs first and is the fastest case). Cold (smoke mode), first rates say little.
  const measured = caseRate.get(`${group}|${key}`);
  const bound = pool.expectedRate ?? bestRate.get(`${leg.server.name}|c${connections}`) ?? bestRate.get(`${leg.server.name}|c16`) ?? 15_000;
  const estimate = smoke ? Math.max(measured ?? 0, pool.expectedRate ?? Math.max(bound, 15_000)) : (measured ?? bound);
  // Tokens made and never used stay in the server's state, so the margin is modest; segments top up.
  const need = Math.ceil(estimate * seconds * (measured === undefined ? 1.5 : 1.3)) + 4 * connections + 200;
  const remaining = await driver.call<number>('remaining', { name: pool.name });
  if (remaining >= need) return;
  const file = join(temp, `pool-${(poolFiles += 1)}.txt`);
  await leg.server.peer.call('seed', { kind: pool.kind, count: spare * need - remaining, file });
  await driver.call('pool', { name: pool.name, file });
  await unlink(file);
}

/**
 * A fresh pool of DPoP proofs for `seconds` of this leg, made by the driver right before the run that spends them (a
 * proof is used once, and the server takes its iat for 60 s only; what the run before left is dropped). Sized for
 * the most of: the server's best rate at this concurrency (its plain client_credentials, faster than with proofs),
 * twice the leg's own, and MIN_PROOF_RATE, since a cold warm-up's rates undersize the next run; and for the whole
 * seconds autocannon runs (it stops on the tick after the duration: 3 s for 2.5). A pool that runs dry voids the
 * segment and sends unproven requests until that tick.
 */
async function ensureProofs(leg: Leg, key: string, connections: number, seconds: number, group: string): Promise<void> {
  if (leg.proofs === undefined) return;
  const measured = caseRate.get(`${group}|${key}`) ?? 0;
  const best = bestRate.get(`${leg.server.name}|c${connections}`) ?? bestRate.get(`${leg.server.name}|c16`) ?? 0;
  const rate = Math.max(2 * measured, best, MIN_PROOF_RATE);
  const count = Math.ceil(rate * (Math.floor(seconds) + 1)) + 4 * connections + 200;
  await driver.call('proofs', { name: leg.proofs.name, htu: leg.proofs.htu, count });
}

const seededAccessPools = new Set<string>();

/** A reusable pool of `server`: `count` access tokens it issued, made once (introspection and exchange spend none). */
async function seedOnce(server: Server, name: string, count: number): Promise<void> {
  if (seededAccessPools.has(name)) return;
  const file = join(temp, `pool-${(poolFiles += 1)}.txt`);
  await server.peer.call('seed', { kind: 'access', count, file });
  await driver.call('pool', { name, file });
  await unlink(file);
  seededAccessPools.add(name);
}

interface Tally {
  responses: number;
  seconds: number;
  errors: number;
  firstError?: string;
  segmentRates: number[];
  serverCpu: number;
  instanceCpu: number[];
  databaseCpu: number;
  machineCpu: number;
  driverCpu: number;
  firstSecond: number[];
}

/** What one run of a participant measured; CPU figures are shares of one core, averaged over the run. */
interface Measured extends RunResult {
  /** Every leg's server together, and each leg's server. */
  readonly serverCpu: number;
  readonly instanceCpu: readonly number[];
  /** The participant's database processes (NaN without one), and the whole machine, every core. */
  readonly databaseCpu: number;
  readonly machineCpu: number;
}

/** The legs' results as one: responses added up over the longest leg's time. */
function combined(results: readonly RunResult[]): RunResult {
  const sum = (field: 'responses' | 'non2xx' | 'errors' | 'timeouts' | 'invalid' | 'exhausted'): number => results.reduce((total, result) => total + result[field], 0);
  const firstInvalid = results.find((result) => result.firstInvalid !== undefined)?.firstInvalid;
  const slots = Math.max(...results.map((result) => result.perHalfSecond.length));
  return {
    responses: sum('responses'),
    seconds: Math.max(...results.map((result) => result.seconds)),
    non2xx: sum('non2xx'),
    errors: sum('errors'),
    timeouts: sum('timeouts'),
    invalid: sum('invalid'),
    ...(firstInvalid === undefined ? {} : { firstInvalid }),
    exhausted: sum('exhausted'),
    perHalfSecond: Array.from({ length: slots }, (_, slot) => results.reduce((total, result) => total + (result.perHalfSecond[slot] ?? 0), 0)),
    // Each leg's figure is the whole driver process's.
    driverCpu: Math.max(...results.map((result) => result.driverCpu)),
  };
}

/** CPU seconds of each of the database's processes that runs on this machine (PostgreSQL's are named `postgres`). */
const databaseCpu = async (database: BenchDatabase): Promise<Map<number, number>> => cpuOfNamed(await database.processes(), 'postgres');

/** CPU seconds of a set of processes used since `before` (processes started since count from zero); NaN when none runs here (a remote database). */
function secondsSince(now: ReadonlyMap<number, number>, before: ReadonlyMap<number, number>): number {
  if (now.size === 0) return Number.NaN;
  let seconds = 0;
  for (const [pid, used] of now) seconds += used - (before.get(pid) ?? 0);
  return seconds;
}

async function runOnce(participant: Participant, connections: number, seconds: number, group: string, series?: string): Promise<Measured> {
  const split = shares(connections, participant.legs.length);
  const keyOf = (leg: Leg): string => `${participant.label}|${leg.server.name}`;
  await Promise.all(participant.legs.map((leg, i) => ensurePool(leg, keyOf(leg), split[i] as number, seconds, group, 2)));
  await Promise.all(participant.legs.map((leg, i) => ensureProofs(leg, keyOf(leg), split[i] as number, seconds, group)));
  // Each server's process and its children (the workers of `pinpoint serve`).
  const pids = participant.legs.map((leg) => leg.server.peer.pid);
  const cpuBefore = pids.map(cpuOfTree);
  const databaseBefore = participant.database === undefined ? new Map<number, number>() : await databaseCpu(participant.database);
  const machineBefore = machineTicks();
  const wallBefore = performance.now();
  // The legs run at once, each an autocannon instance of its own in the one driver process.
  const results = await Promise.all(
    participant.legs.map((leg, i) => {
      const spec: RunSpec = {
        port: leg.server.port,
        path: leg.path,
        connections: split[i] as number,
        seconds,
        body: leg.body,
        expect: leg.expect,
        ...(series === undefined ? {} : { series }),
        ...(leg.authorization === undefined ? {} : { authorization: leg.authorization }),
        ...(leg.proofs === undefined ? {} : { proofs: leg.proofs.name }),
      };
      return driver.call<RunResult>('run', { spec });
    }),
  );
  const wall = (performance.now() - wallBefore) / 1000;
  const instanceCpu = pids.map((pid, i) => secondsSince(cpuOfTree(pid), cpuBefore[i] as Map<number, number>) / wall);
  const databaseAfter = participant.database === undefined ? undefined : await databaseCpu(participant.database);
  const databaseShare = databaseAfter === undefined ? Number.NaN : secondsSince(databaseAfter, databaseBefore) / wall;
  const machineAfter = machineTicks();
  const machineCpu = ((machineAfter.busy - machineBefore.busy) / (machineAfter.total - machineBefore.total)) * cpus().length;
  for (const [i, leg] of participant.legs.entries()) {
    const result = results[i] as RunResult;
    const rate = result.responses / result.seconds;
    const best = `${leg.server.name}|c${split[i] as number}`;
    bestRate.set(best, Math.max(bestRate.get(best) ?? 0, rate));
    const own = `${group}|${keyOf(leg)}`;
    caseRate.set(own, Math.max(caseRate.get(own) ?? 0, rate));
  }
  return { ...combined(results), serverCpu: instanceCpu.reduce((sum, x) => sum + x, 0), instanceCpu, databaseCpu: databaseShare, machineCpu };
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
  caseName: Row['caseName'],
  connections: number,
  participants: readonly Participant[],
  afterWarmup?: () => Promise<unknown>,
): Promise<Row[]> {
  const group = `${caseName}|c${connections}`;
  const tallies = new Map<string, Tally>(
    participants.map((p) => [
      p.label,
      { responses: 0, seconds: 0, errors: 0, segmentRates: [], serverCpu: 0, instanceCpu: p.legs.map(() => 0), databaseCpu: 0, machineCpu: 0, driverCpu: 0, firstSecond: [] },
    ]),
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
  const pooled = participants.filter((participant) => participant.legs.some((leg) => leg.pool !== undefined));
  const measuredSeconds = timing.segment * timing.order([0]).length;
  const settleSeconds = timing.warmup > 0 ? 1 : 0;
  // All pools at once: servers on different cores (the PostgreSQL instances) seed side by side.
  await Promise.all(
    pooled.flatMap((participant) => {
      const split = shares(connections, participant.legs.length);
      return participant.legs.map((leg, i) => ensurePool(leg, `${participant.label}|${leg.server.name}`, split[i] as number, measuredSeconds + settleSeconds, group));
    }),
  );
  if (settleSeconds > 0) for (const participant of pooled) note(participant, await runOnce(participant, connections, settleSeconds, group));
  await afterWarmup?.();
  for (const participant of timing.order(participants)) {
    const result = await runOnce(participant, connections, timing.segment, group, `${group}|${participant.label}`);
    const tally = note(participant, result);
    tally.responses += result.responses;
    tally.seconds += result.seconds;
    tally.segmentRates.push(result.responses / result.seconds);
    tally.serverCpu += result.serverCpu * result.seconds;
    result.instanceCpu.forEach((cpu, i) => (tally.instanceCpu[i] = (tally.instanceCpu[i] ?? 0) + cpu * result.seconds));
    tally.databaseCpu += result.databaseCpu * result.seconds;
    tally.machineCpu += result.machineCpu * result.seconds;
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
      responses: tally.responses,
      segmentRates: tally.segmentRates,
      p50: latency.p50,
      p99: latency.p99,
      max: latency.max,
      errors: tally.errors,
      ...(tally.firstError === undefined ? {} : { firstError: tally.firstError }),
      serverCpu: tally.serverCpu / tally.seconds,
      ...(participant.legs.length > 1 ? { instanceCpu: tally.instanceCpu.map((cpu) => cpu / tally.seconds) } : {}),
      ...(participant.database === undefined ? {} : { databaseCpu: tally.databaseCpu / tally.seconds, machineCpu: tally.machineCpu / tally.seconds }),
      driverCpu: tally.driverCpu,
      firstSecond: tally.firstSecond.length === 0 ? Number.NaN : tally.firstSecond.reduce((sum, x) => sum + x, 0) / tally.firstSecond.length,
      rss: participant.legs.reduce((sum, leg) => sum + treeResidentMemory(leg.server.peer.pid), 0),
    });
  }
  return rows;
}

const ccBody: BodySpec = { kind: 'static', text: `grant_type=client_credentials&scope=${SCOPE}` };

/** `server` under `caseName`; a pooled case draws from the pool `poolName` (default: one pool per server and case). */
function legFor(caseName: CaseName | CostCaseName, server: Server, poolName?: string): Leg {
  const oidc = server.name === 'oidc-provider';
  switch (caseName) {
    case 'client_credentials':
      // Pinpoint: the client's whole audience (DESIGN.md §5); oidc-provider: its default resource.
      return { server, path: '/token', body: ccBody, expect: { shape: 'token', aud: oidc ? API : AUDIENCE, refreshToken: false, issuer: server.issuer } };
    case 'refresh_token+resource': {
      const name = poolName ?? `${server.name}:refresh`;
      return { server, path: '/token', body: { kind: 'refresh', pool: name }, expect: { shape: 'token', aud: API, refreshToken: true, issuer: server.issuer }, pool: { kind: 'refresh', name, preseeded: false } };
    }
    case 'authorization_code+resource': {
      const name = poolName ?? `${server.name}:code`;
      return { server, path: '/token', body: { kind: 'code', pool: name }, expect: { shape: 'token', aud: API, refreshToken: true, issuer: server.issuer }, pool: { kind: 'code', name, preseeded: false } };
    }
    case 'introspection': {
      const name = poolName ?? `${server.name}:access`;
      // oidc-provider answers introspection at its default path.
      return { server, path: oidc ? '/token/introspection' : '/introspect', body: { kind: 'introspect', pool: name }, expect: { shape: 'active' }, pool: { kind: 'access', name, preseeded: false } };
    }
    case 'token_exchange': {
      if (oidc) throw new Error('oidc-provider has no token exchange (RFC 8693): token_exchange runs on Pinpoint only');
      // The subject tokens: access tokens for API from refresh-token exchanges of the bench client, exchanged in turn.
      const name = poolName ?? `${server.name}:subject`;
      return {
        server,
        path: '/token',
        body: { kind: 'exchange', pool: name, resource: DOWNSTREAM },
        authorization: EXCHANGE_BASIC_AUTH,
        expect: { shape: 'token', aud: DOWNSTREAM, refreshToken: false, issuer: server.issuer, actor: EXCHANGE_CLIENT_ID },
        pool: { kind: 'access', name, preseeded: false, count: EXCHANGE_SUBJECTS },
      };
    }
    case 'client_credentials+dpop': {
      const plain = legFor('client_credentials', server);
      // htu: the token endpoint exactly as the issuer names it (RFC 9449 §4.2).
      return { ...plain, expect: { ...plain.expect, tokenType: 'DPoP' }, proofs: { name: poolName ?? `${server.name}:dpop`, htu: `${server.issuer}/token` } };
    }
  }
}

/** The fastify+jose floor's one route: parse the form, sign one JWT like Pinpoint's client_credentials token. */
function floorLeg(floor: Server): Leg {
  return { server: floor, path: '/jose', body: ccBody, expect: { shape: 'token', aud: AUDIENCE, refreshToken: false, issuer: floor.issuer } };
}

/** The rows of a cost case (report.ts COST_LABELS): the request measured, and plain client_credentials on the same process. */
function costParticipants(caseName: CostCaseName, pinpoint: Server, peer: Server): Participant[] {
  const clientCredentials = (server: Server): Leg => legFor('client_credentials', server);
  if (caseName === 'token_exchange') {
    return [single(COST_LABELS.pinpointClientCredentials, clientCredentials(pinpoint)), single(COST_LABELS.pinpoint, legFor(caseName, pinpoint))];
  }
  // Plain first: in smoke mode (no warm-up) its rate sizes the proof pool of the DPoP leg after it.
  return [
    single(COST_LABELS.pinpointClientCredentials, clientCredentials(pinpoint)),
    single(COST_LABELS.pinpoint, legFor(caseName, pinpoint)),
    single(COST_LABELS.peerClientCredentials, clientCredentials(peer)),
    single(COST_LABELS.peer, legFor(caseName, peer)),
  ];
}

function participantsFor(caseName: CaseName | CostCaseName, list: readonly { label: string; server: Server }[]): Participant[] {
  return list.map(({ label, server }) => single(label, legFor(caseName, server)));
}

async function stopAll(list: readonly Server[]): Promise<void> {
  await Promise.all(list.map((server) => server.peer.stop()));
  for (const server of list) servers.splice(servers.indexOf(server), 1);
}

/** Which module signs `server`'s JWTs (relative to the repository) and, for the previous signing, how many it signed. */
const signingOf = (server: Server): Promise<{ module: string; signatures?: number }> => server.peer.call('signing');

/** Loaded into the "jose cost" server only: dist/crypto/jwt.js becomes bench/legacy-jwt.ts there. */
const LEGACY_SIGNING_HOOK = pathToFileURL(join(here, 'legacy-signing.ts')).href;

/**
 * Refresh on PostgreSQL stays below this many req/s per instance (about 1,000 measured here on a busy machine) until the
 * case has measured it: it sizes the pools of the warm-up (made twice over) and of smoke mode's single cold second,
 * since seeding through PostgreSQL (under 2,000 tokens/s here) is too slow for the 15,000 req/s guess of the other cases.
 */
const POSTGRES_EXPECTED_RATE = smoke ? 1500 : 2000;

/** `server`, backed by PostgreSQL, under `caseName`; its pool (named `pool`) is sized from POSTGRES_EXPECTED_RATE until measured. */
function postgresLeg(caseName: CaseName | CostCaseName, server: Server, pool: string): Leg {
  const leg = legFor(caseName, server, pool);
  return leg.pool === undefined ? leg : { ...leg, pool: { ...leg.pool, expectedRate: POSTGRES_EXPECTED_RATE } };
}

/** The server `--target` names; pinpoint-postgres runs on a database of this run's own. */
async function startTarget(
  target: string | undefined,
  nodeOptions: readonly string[],
  wrapper?: readonly string[],
): Promise<{ server: Server; database?: BenchDatabase }> {
  // A file per target: with --against, the second server (v0.2.0 among them) must not open the first one's.
  const sqliteFile = join(temp, `${target}.db`);
  const extra = { nodeOptions, ...(wrapper === undefined ? {} : { wrapper }) };
  switch (target) {
    case 'oidc-provider':
      return { server: await startServer('oidc-provider', 'oidc-server.ts', {}, extra) };
    // The fastify+jose floor, to set its profile beside Pinpoint's (client_credentials only: its /jose route).
    case 'floor':
      return { server: await startServer('floor', 'floor-server.ts', {}, extra) };
    case 'pinpoint-memory':
      return { server: await startServer('pinpoint-memory', 'pinpoint-server.ts', pinpointEnv('memory'), extra) };
    case 'pinpoint-sqlite':
      return { server: await startServer('pinpoint-sqlite', 'pinpoint-server.ts', pinpointEnv('sqlite', sqliteFile), extra) };
    // The two sides of the "baseline ... (same signing)" lines, to profile each alone under the same load.
    case 'pinpoint-same-signing':
      return { server: await startServer('release-same-signing', 'pinpoint-server.ts', pinpointEnv('sqlite', sqliteFile), { ...extra, imports: [LEGACY_SIGNING_HOOK] }) };
    case 'v0.2.0':
      return { server: await startServer('release-v0.2.0', (await prepareRelease(log)).server, pinpointEnv('sqlite', sqliteFile), extra) };
    // --baseline DIR: another checkout's build, as the A/B runs it.
    case 'baseline':
      if (options.baseline === undefined) throw new Error('--target baseline needs --baseline DIR');
      return { server: await startServer('pinpoint-baseline', 'pinpoint-server.ts', { ...pinpointEnv('sqlite', sqliteFile), BENCH_PINPOINT_DIST: options.baseline }, extra) };
    case 'pinpoint-postgres': {
      const database = await createBenchDatabase();
      try {
        return { server: await startServer('postgres-a', 'pinpoint-server.ts', postgresEnv(database.url), extra), database };
      } catch (error) {
        await database.drop();
        throw error;
      }
    }
    default:
      throw new Error('--target takes one of pinpoint-sqlite, pinpoint-same-signing, v0.2.0, baseline, pinpoint-memory, pinpoint-postgres, oidc-provider, floor');
  }
}

/** The leg of a server startTarget started: the floor's own route, or the case on Pinpoint's store. */
function targetLeg(caseName: CaseName | CostCaseName, server: Server, database: BenchDatabase | undefined): Leg {
  if (server.name === 'floor') return floorLeg(server);
  return database === undefined ? legFor(caseName, server) : postgresLeg(caseName, server, `${server.name}:${caseName}`);
}

/** One server under one case at c=16, with the V8 profiler (and perf) on for the measured segments only (no seeding, no warm-up). */
async function profileRun(caseName: CaseName | CostCaseName, target: string | undefined): Promise<ProfiledRun> {
  const nodeOptions = options.perf ? ['--perf-basic-prof-only-functions'] : [];
  const { server, database } = await startTarget(target, nodeOptions);
  try {
    const leg = targetLeg(caseName, server, database);
    const participant = single(server.name, leg);
    // Every token the run needs is created before the profiler starts.
    await ensurePool(leg, `${participant.label}|${server.name}`, 16, timing.warmup + timing.segment * timing.order([0]).length, `${caseName}|c16`);
    const file = join(temp, `${server.name}-${caseName}.cpuprofile`);
    const perfData = join(temp, `${server.name}-${caseName}.perf.data`);
    let perf: ChildProcess | undefined;
    let threadsBefore = new Map<number, ThreadCpu>();
    let measuredFrom = 0;
    const rows = await runCase(caseName, 16, [participant], async () => {
      if (options.perf) perf = spawn('perf', ['record', '-F', '999', '-g', '-p', String(server.peer.pid), '-o', perfData], { stdio: 'ignore' });
      if (server.name !== 'oidc-provider' && server.name !== 'floor') await server.peer.call('loopDelay');
      if (v8Profiler) await server.peer.call('profileStart');
      threadsBefore = threadCpu(server.peer.pid);
      measuredFrom = performance.now();
    });
    const threadsUsed = threadCpuUsed(threadsBefore, threadCpu(server.peer.pid));
    const measuredSeconds = (performance.now() - measuredFrom) / 1000;
    if (v8Profiler) await server.peer.call('profileStop', { file });
    if (server.name !== 'oidc-provider' && server.name !== 'floor') {
      const delay = await server.peer.call<{ p50: number; p99: number; max: number }>('loopDelay');
      log(`event-loop delay while measured: p50 ${delay.p50.toFixed(1)} ms, p99 ${delay.p99.toFixed(1)} ms, max ${delay.max.toFixed(1)} ms`);
    }
    if (perf !== undefined) {
      const exited = new Promise((resolve) => perf?.once('exit', resolve));
      perf.kill('SIGINT');
      await exited;
    }
    printReport(rows, [], undefined, undefined, pinned, log);
    const profiled: ProfiledRun = { label: server.name, file, requestsPerSecond: rows[0]?.rate ?? Number.NaN };
    if (v8Profiler) for (const line of await summariseProfile(profiled)) log(line);
    for (const line of threadCpuLines(threadsUsed, profiled.requestsPerSecond * measuredSeconds, measuredSeconds)) log(line);
    if (perf !== undefined) {
      const report = spawnSync('perf', ['report', '-i', perfData, '--no-children', '--sort', 'dso,sym', '--stdio', '-g', 'none'], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
      log('perf, self time by symbol (whole process, every thread):');
      for (const line of report.stdout.split('\n').filter((l) => l.trim() !== '' && !l.startsWith('#')).slice(0, 40)) log(`  ${line.trim()}`);
    }
    return profiled;
  } finally {
    // Stopped, so a second profiled server (--against) runs alone.
    await stopAll([server]);
    await database?.drop();
  }
}

/**
 * One server under one case at c=16 inside valgrind's callgrind, counting instructions over the measured segments only
 * (warmed up first with counting off), per thread, and the main thread's by function (JavaScript named from the map
 * --perf-basic-prof writes). The counts do not move with the machine's other load, unlike seconds; see --instructions.
 */
async function instructionsRun(caseName: CaseName | CostCaseName, target: string | undefined): Promise<CountedRun> {
  const out = join(temp, `callgrind-${target ?? 'pinpoint-sqlite'}-${caseName}.out`);
  if (spawnSync('valgrind', ['--version']).status !== 0) throw new Error('--instructions needs valgrind (Debian package valgrind)');
  const extra = (process.env.BENCH_CALLGRIND_EXTRA ?? '').split(' ').filter((option) => option !== '');
  const wrapper = ['valgrind', '--tool=callgrind', '--instr-atstart=no', '--separate-threads=yes', ...extra, `--callgrind-out-file=${out}`];
  // The map of what V8 compiled, so the counts of JavaScript get its functions' names.
  const { server, database } = await startTarget(target, ['--perf-basic-prof'], wrapper);
  const perfMap = `/tmp/perf-${server.peer.pid}.map`;
  const control = (...args: string[]): void => {
    const result = spawnSync('callgrind_control', [...args, String(server.peer.pid)], { encoding: 'utf8' });
    if (result.status !== 0) throw new Error(`callgrind_control ${args.join(' ')}: ${result.stderr || result.stdout}`);
  };
  try {
    const plain = targetLeg(caseName, server, database);
    const leg = plain.pool === undefined ? plain : { ...plain, pool: { ...plain.pool, expectedRate: INSTRUCTIONS_EXPECTED_RATE } };
    const participant = single(server.name, leg);
    await ensurePool(leg, `${participant.label}|${server.name}`, 16, timing.warmup + timing.segment * timing.order([0]).length, `${caseName}|c16`);
    const rows = await runCase(caseName, 16, [participant], async () => control('--instr=on'));
    control('--dump');
    const prefix = `${basename(out)}.`;
    const dumps = (await readdir(temp)).filter((name) => name.startsWith(prefix)).sort();
    const threads = await Promise.all(
      dumps.map(async (name) => ({ thread: Number(/-(\d+)$/.exec(name)?.[1] ?? 1), instructions: await countedInstructions(join(temp, name)) })),
    );
    const mainDump = dumps.find((name) => /-0*1$/.test(name));
    const functions = mainDump === undefined ? new Map<string, number>() : functionCosts(join(temp, mainDump), await readPerfMap(perfMap));
    for (const row of rows) log(`  ${row.server}: ${row.rate.toFixed(0)} req/s under callgrind, ${row.errors} errors`);
    return { label: server.name, responses: rows[0]?.responses ?? 0, threads: threads.sort((a, b) => a.thread - b.thread), functions };
  } finally {
    await stopAll([server]);
    await database?.drop();
    // Kept beside the dumps (--keep) for callgrind_annotate --tree=caller, whose callers are addresses.
    await rename(perfMap, join(temp, `${basename(out)}-perf.map`)).catch(() => rm(perfMap, { force: true }));
  }
}

/** Scale: refresh with few and with many live grants, each SQLite file seeded in bulk by a separate process. */
async function runScale(rows: readonly Row[]): Promise<{ rows: Row[]; scale: ScaleResult }> {
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
  const scaleParticipants = scaleServers.map(({ label, server }) => {
    const leg = legFor('refresh_token+resource', server);
    return single(label, { ...leg, pool: { ...(leg.pool as NonNullable<Leg['pool']>), preseeded: true } });
  });
  const scaleRows = await runCase('scale', 16, scaleParticipants);
  for (const [which, entry] of [['small', scaleServers[0]], ['large', scaleServers[1]]] as const) {
    if (entry === undefined) continue;
    const memoryNow = residentMemory(entry.server.peer.pid);
    scale.rssAfterRun[which] = memoryNow.rss;
    scale.peakRss[which] = memoryNow.peak;
  }
  await stopAll(scaleServers.map((entry) => entry.server));
  return { rows: scaleRows, scale };
}

/**
 * Refresh on PostgreSQL: instance A alone (core 0), then A and B together (B on core 1, beside the driver), both on
 * one database of this run's own; the driver's 16 connections go to A, or 8 to each. Each instance's pool is seeded
 * through its own store. Skipped, with the reason, when the PostgreSQL server cannot be reached.
 */
async function runPostgres(): Promise<PostgresResult> {
  const refresh = (server: Server, pool: string): Leg => postgresLeg('refresh_token+resource', server, pool);
  let database: BenchDatabase;
  try {
    database = await createBenchDatabase();
  } catch (error) {
    const reason = `no PostgreSQL database could be made at ${serverAddress()}: ${(error as Error).message}`;
    log(`  postgres: skipped (${reason})`);
    return { skipped: reason };
  }
  const started: Server[] = [];
  try {
    const description = await describeServer(database.url);
    log(`  postgres: ${description}, database ${database.name}`);
    // One after the other: the first instance creates the signing keys, the second loads them.
    const a = await startServer('postgres-a', 'pinpoint-server.ts', postgresEnv(database.url), { onCore: SERVER_CORE });
    started.push(a);
    const b = await startServer('postgres-b', 'pinpoint-server.ts', postgresEnv(database.url), { onCore: DRIVER_CORE });
    started.push(b);
    const [jwksA, jwksB] = await Promise.all([a, b].map(async (server) => JSON.stringify(await (await fetch(`${server.issuer}/jwks`)).json())));
    if (jwksA !== jwksB) throw new Error('the two PostgreSQL instances publish different keys: they do not share one database');
    const participants: Participant[] = [
      { label: '1 instance', legs: [refresh(a, 'postgres-1:a')], database },
      { label: '2 instances', legs: [refresh(a, 'postgres-2:a'), refresh(b, 'postgres-2:b')], database },
    ];
    return { rows: await runCase('postgres', POSTGRES_CONNECTIONS, participants), server: description };
  } finally {
    await stopAll(started);
    await database.drop().catch((error: unknown) => log(`  postgres: could not drop ${database.name}: ${(error as Error).message}`));
  }
}

/** --baseline: this build against another build's dist/, both on SQLite, each case interleaved; the ratio per case. */
async function baselineRun(dist: string): Promise<number> {
  const [current, baseline] = await Promise.all([
    startServer('pinpoint-sqlite', 'pinpoint-server.ts', pinpointEnv('sqlite', join(temp, 'pinpoint.db'))),
    startServer('pinpoint-baseline', 'pinpoint-server.ts', { ...pinpointEnv('sqlite', join(temp, 'baseline.db')), BENCH_PINPOINT_DIST: dist }),
  ]);
  const peers = [
    { label: 'pinpoint sqlite', server: current },
    { label: 'pinpoint baseline', server: baseline },
  ];
  const rows: Row[] = [];
  // token_exchange too (with --only): its cost line is held against client_credentials, so a change to it needs an A/B.
  const cases = [...CASES, ...(only?.includes('token_exchange') === true ? (['token_exchange'] as const) : [])];
  for (const caseName of cases.filter(selected)) {
    for (const connections of concurrencies) rows.push(...(await runCase(caseName, connections, participantsFor(caseName, peers))));
  }
  log('');
  const refused = printReport(rows, [], undefined, undefined, pinned, log, baselineLines(rows, 'pinpoint sqlite', 'pinpoint baseline'));
  return refused > 0 ? 1 : 0;
}

/** The password hash of the `pinpoint serve` deployments: made once per run by `pinpoint hash-password` (scrypt, N = 2^17). */
let passwordHash: Promise<string> | undefined;
const deploymentHash = (): Promise<string> => (passwordHash ??= hashPasswordWithCli(PASSWORD, shippedNodeFlags));

/** `pinpoint serve` on every core for one case, its deployment (config, secret, SQLite state) in temp/NAME. */
async function startDeployment(name: string, args: readonly string[]): Promise<{ server: CliServer } | { refused: string }> {
  const deployment = await writeDeployment(join(temp, name), await deploymentHash());
  return startCliServer({
    deployment,
    args,
    nodeFlags: shippedNodeFlags,
    cores: core(ALL_CORES),
    stdout: join(temp, `${name}.log`),
    stderr: join(temp, `${name}.err`),
  });
}

/**
 * Refresh and code exchange at c=16: this build, the same build with v0.2.0's node:crypto signing, and v0.2.0 built
 * beside this checkout (bench/release.ts), each on SQLite, interleaved. Skipped in smoke mode: preparing the release
 * means a build, which CI's short run must not do.
 */
async function runRelease(): Promise<ReleaseResult> {
  if (smoke) return { skipped: 'skipped in smoke' };
  let prepared: PreparedRelease;
  try {
    prepared = await prepareRelease(log);
  } catch (error) {
    const reason = `not measured: ${RELEASE.name} could not be prepared here (${(error as Error).message})`;
    log(`  ${reason}`);
    return { skipped: reason };
  }
  log(`  ${RELEASE.name}: ${prepared.done}`);
  const started = await Promise.all([
    startServer('release-current', 'pinpoint-server.ts', pinpointEnv('sqlite', join(temp, 'release-current.db'))),
    startServer('release-same-signing', 'pinpoint-server.ts', pinpointEnv('sqlite', join(temp, 'release-same-signing.db')), { imports: [LEGACY_SIGNING_HOOK] }),
    startServer('release-v0.2.0', prepared.server, pinpointEnv('sqlite', join(temp, 'release-v0.2.0.db'))),
  ]);
  const [current, sameSigning, release] = started;
  try {
    const signing = await signingOf(sameSigning);
    if (signing.module !== 'bench/legacy-jwt.ts') throw new Error(`${RELEASE_LABELS.sameSigning}: expected bench/legacy-jwt.ts to sign, got ${signing.module}`);
    const peers = [
      { label: RELEASE_LABELS.current, server: current },
      { label: RELEASE_LABELS.sameSigning, server: sameSigning },
      { label: RELEASE_LABELS.release, server: release },
    ];
    const rows: Row[] = [];
    for (const caseName of ['refresh_token+resource', 'authorization_code+resource'] as const) {
      rows.push(...(await runCase(caseName, 16, participantsFor(caseName, peers))));
    }
    log(`  ${RELEASE_LABELS.sameSigning}: ${(await signingOf(sameSigning)).signatures ?? 0} JWTs signed by bench/legacy-jwt.ts (node:crypto)`);
    return { rows };
  } finally {
    await stopAll(started);
  }
}

/** client_credentials at c=16 on `pinpoint serve --workers 2` and `--workers 1`, servers and driver on every core. */
async function runWorkers(): Promise<WorkersResult> {
  const started: CliServer[] = [];
  try {
    const legs: Leg[] = [];
    for (const count of [1, 2] as const) {
      const name = count === 1 ? 'workers-1' : 'workers-2';
      const outcome = await startDeployment(name, ['--workers', String(count)]);
      if ('refused' in outcome) {
        log(`  workers: ${outcome.refused}`);
        return { unavailable: outcome.refused };
      }
      started.push(outcome.server);
      legs.push(legFor('client_credentials', { name, peer: outcome.server, port: outcome.server.port, issuer: outcome.server.issuer }));
    }
    const processes = [processTree(started[0]?.pid ?? -1).length, processTree(started[1]?.pid ?? -1).length] as const;
    log(`  workers: serve --workers 1 runs ${processes[0]} process(es), serve --workers 2 runs ${processes[1]}`);
    const participants = [single('1 worker', legs[0] as Leg), single('2 workers', legs[1] as Leg)];
    // Both cores are the servers' to use here, and the driver's too: no core is set aside for either.
    if (pinned) pinProcess(driver.pid, ALL_CORES);
    try {
      return { rows: await runCase('workers', 16, participants), processes };
    } finally {
      if (pinned) pinProcess(driver.pid, DRIVER_CORE);
    }
  } finally {
    await Promise.all(started.map((server) => server.stop()));
  }
}

/** How often the storm samples the server's resident memory: a scrypt hash holds its 128 MiB for about a third of a second. */
const STORM_SAMPLE_MS = 50;

/** The sign-in storm (bench/storm.ts) against `pinpoint serve` on every core, its processes' memory sampled meanwhile. */
async function runStorm(): Promise<StormResult> {
  const outcome = await startDeployment('storm', []);
  if ('refused' in outcome) throw new Error(`storm: pinpoint serve did not start: ${outcome.refused}`);
  const server = outcome.server;
  let pids = processTree(server.pid);
  let listed = Date.now();
  let peakRss = 0;
  const sample = (): void => {
    // Workers come and go rarely: the process list is read again once a second, their memory every sample.
    if (Date.now() - listed > 1000) [pids, listed] = [processTree(server.pid), Date.now()];
    const rss = pids.reduce((sum, pid) => sum + (residentMemory(pid).rss || 0), 0);
    peakRss = Math.max(peakRss, rss);
  };
  const sampler = setInterval(sample, STORM_SAMPLE_MS);
  try {
    const seconds = smoke ? { warmup: 0.5, quiet: 1, storm: 3 } : { warmup: 2, quiet: 3, storm: 30 };
    log(`  storm: token requests (c=8) alone for ${seconds.warmup + seconds.quiet} s, then beside 8 browsers signing in for ${seconds.storm} s`);
    const output = await runScript({ script: join(here, 'storm.ts'), args: [JSON.stringify({ issuer: server.issuer, ...seconds })], core: core(ALL_CORES) });
    sample();
    const measured = JSON.parse(output) as StormMeasurement;
    const summedHighWater = pids.reduce((sum, pid) => sum + (residentMemory(pid).peak || 0), 0);
    return { ...measured, peakRss, summedHighWater, processes: pids.length, sampleMs: STORM_SAMPLE_MS };
  } finally {
    clearInterval(sampler);
    await server.stop();
  }
}

/** The cases of the table (CASES): Pinpoint, oidc-provider, the floor and the "jose cost" server, in one set of processes. */
async function runCases(): Promise<Row[]> {
  log('starting servers (each in its own process, pinned to core 0; driver on core 1)');
  const joseCost = selected('client_credentials') && concurrencies.includes(16);
  const [sqlite, memory, oidc, floor, legacy] = await Promise.all([
    startServer('pinpoint-sqlite', 'pinpoint-server.ts', pinpointEnv('sqlite', join(temp, 'pinpoint.db'))),
    startServer('pinpoint-memory', 'pinpoint-server.ts', pinpointEnv('memory')),
    startServer('oidc-provider', 'oidc-server.ts'),
    startServer('floor', 'floor-server.ts'),
    joseCost
      ? startServer('pinpoint-legacy-signing', 'pinpoint-server.ts', pinpointEnv('sqlite', join(temp, 'legacy-signing.db')), { imports: [LEGACY_SIGNING_HOOK] })
      : undefined,
  ]);
  if (legacy !== undefined) {
    const [jose, previous] = await Promise.all([signingOf(sqlite), signingOf(legacy)]);
    if (jose.module !== 'dist/crypto/jwt.js' || previous.module !== 'bench/legacy-jwt.ts') {
      throw new Error(`jose cost: expected dist/crypto/jwt.js and bench/legacy-jwt.ts to sign, got ${jose.module} and ${previous.module}`);
    }
    log(`  ${LEGACY_SIGNING}: dist/crypto/jwt.js resolves to ${previous.module} (pinpoint sqlite: ${jose.module})`);
  }
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
    single('fastify+jose', floorLeg(floor)),
    single('fastify bare', { server: floor, path: '/bare', body: ccBody, expect: { shape: 'plain' } }),
  ];

  const rows: Row[] = [];
  for (const caseName of CASES.filter(selected)) {
    for (const connections of concurrencies) {
      const list = participantsFor(caseName, peers);
      // The previous signing runs beside Pinpoint as it is, on the case where signing dominates.
      const withLegacy = caseName === 'client_credentials' && connections === 16 && legacy !== undefined;
      if (withLegacy) list.splice(1, 0, single(LEGACY_SIGNING, legFor(caseName, legacy)));
      if (caseName === 'client_credentials') list.push(...floorParticipants);
      rows.push(...(await runCase(caseName, connections, list)));
      if (withLegacy) log(`  ${LEGACY_SIGNING}: ${(await signingOf(legacy)).signatures ?? 0} JWTs signed by bench/legacy-jwt.ts (node:crypto)`);
    }
  }
  for (const caseName of COST_CASES.filter(selected)) {
    for (const connections of concurrencies) rows.push(...(await runCase(caseName, connections, costParticipants(caseName, sqlite, oidc))));
  }
  const logSize = await stat(join(temp, 'pinpoint-sqlite.log')).then((s) => s.size, () => 0);
  log(`  pinpoint sqlite access log: ${(logSize / 1e6).toFixed(1)} MB written at level info`);
  await stopAll([...servers]);
  return rows;
}

async function main(): Promise<number> {
  await driver.ready;
  if (options.profile !== undefined) {
    const profilable: readonly string[] = [...CASES, ...COST_CASES];
    if (!profilable.includes(options.profile)) throw new Error(`--profile takes one of ${profilable.join(', ')}`);
    const first = await profileRun(options.profile as CaseName | CostCaseName, options.target);
    if (options.against !== undefined) {
      const second = await profileRun(options.profile as CaseName | CostCaseName, options.against);
      log('');
      if (v8Profiler) for (const line of await compareProfiles(first, second)) log(line);
      else log(`A = ${first.label} (${first.requestsPerSecond.toFixed(0)} req/s), B = ${second.label} (${second.requestsPerSecond.toFixed(0)} req/s): A / B = ${(first.requestsPerSecond / second.requestsPerSecond).toFixed(3)}, no V8 profiler`);
    }
    return 0;
  }

  if (options.instructions !== undefined) {
    const countable: readonly string[] = [...CASES, ...COST_CASES];
    if (!countable.includes(options.instructions)) throw new Error(`--instructions takes one of ${countable.join(', ')}`);
    const first = await instructionsRun(options.instructions as CaseName | CostCaseName, options.target);
    for (const line of instructionLines(first)) log(line);
    if (options.against !== undefined) {
      const second = await instructionsRun(options.instructions as CaseName | CostCaseName, options.against);
      for (const line of [...instructionLines(second), '', ...comparisonLines(first, second)]) log(line);
    }
    return 0;
  }
  if (options.baseline !== undefined) return baselineRun(options.baseline);
  const rows = [...CASES, ...COST_CASES].some(selected) ? await runCases() : [];
  // A part that breaks off is reported on its lines (and fails the run) without losing the figures of the others.
  const failed: string[] = [];
  /** Logs why `part` broke off, in full, and returns the first line of it for the part's report lines. */
  const brokeOff = (part: string, error: unknown): string => {
    const reason = error instanceof Error ? error.message : String(error);
    failed.push(part);
    log(`  ${part}: failed: ${reason}`);
    return reason.split('\n')[0] ?? reason;
  };
  const release = selected('v0.2.0') ? await runRelease().catch((error: unknown) => ({ skipped: `failed: ${brokeOff(RELEASE.name, error)}` })) : undefined;
  const scaled = selected('scale') ? await runScale(rows) : undefined;
  const postgres = selected('postgres') ? await runPostgres() : undefined;
  const workers: WorkersResult | undefined = selected('workers') ? await runWorkers().catch((error: unknown) => ({ failed: brokeOff('workers', error) })) : undefined;
  const storm: StormOutcome | undefined = selected('storm') ? await runStorm().catch((error: unknown) => ({ failed: brokeOff('storm', error) })) : undefined;

  let signing: string | undefined;
  if (!smoke && !partial) {
    log('  signing micro-benchmark (bench/sign.ts, pinned to core 0)');
    signing = await runScript({ script: join(here, 'sign.ts'), env: { SIGN_SECONDS: '2' }, core: core(SERVER_CORE) });
  }
  let writeLock: string | undefined;
  if (!smoke && (!partial || selected('write-lock'))) {
    log('  SQLite write lock per rotation (bench/write-lock.ts, pinned to core 0)');
    writeLock = await runScript({ script: join(here, 'write-lock.ts'), core: core(SERVER_CORE) });
    if (partial) log(writeLock.trimEnd());
  }

  log('');
  const more = {
    rows: [...(release === undefined || 'skipped' in release ? [] : release.rows), ...(workers === undefined || !('rows' in workers) ? [] : workers.rows)],
    lines: [
      ...(release === undefined ? [] : releaseLines(release, !smoke)),
      ...(workers === undefined ? [] : [workersLine(workers)]),
      ...(storm === undefined ? [] : stormLines(storm, !smoke)),
    ],
  };
  const ratios = rows.length === 0 ? [] : ratioLines(rows, !smoke);
  const refused = printReport(rows, scaled?.rows ?? [], scaled?.scale, postgres, pinned, log, ratios, more);
  const targets = smoke || scaled === undefined ? undefined : [...evaluateTargets(rows, scaled.rows, scaled.scale), ...issueTargets(release, storm)];
  if (targets !== undefined) {
    log('');
    log('targets (same run; Pinpoint on SQLite against the fastify+jose floor and v0.2.0; the storm on `pinpoint serve`):');
    for (const target of targets) log(`  ${target.met ? 'met    ' : 'NOT MET'}  ${target.name}: ${target.detail}`);
  }
  log(`\nbench: ${((Date.now() - started) / 1000).toFixed(0)} s`);
  if (!smoke && !partial && scaled !== undefined && postgres !== undefined && release !== undefined && workers !== undefined && storm !== undefined) {
    await writeResults(join(here, 'RESULTS.md'), {
      rows,
      scaleRows: scaled.rows,
      scale: scaled.scale,
      postgres,
      release,
      workers,
      storm,
      targets: targets ?? [],
      signing,
      writeLock,
      pinned,
      seconds: (Date.now() - started) / 1000,
      nodeFlags: shippedNodeFlags,
      loadAtStart,
    });
    log('bench: wrote bench/RESULTS.md');
  }
  return refused > 0 || failed.length > 0 ? 1 : 0;
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

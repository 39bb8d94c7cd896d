/** The benchmark's figures: the table, the ratio lines a script reads, the targets, and bench/RESULTS.md. */
import { spawnSync } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { cpus, loadavg, release, totalmem, type } from 'node:os';
import type { StormMeasurement } from './storm.js';

export const CASES = ['client_credentials', 'refresh_token+resource', 'authorization_code+resource', 'introspection'] as const;
export type CaseName = (typeof CASES)[number];

/**
 * Cases with a cost line rather than a plain ratio: each measures a request against Pinpoint's client_credentials on
 * the same server process, interleaved (DPoP also on oidc-provider). Their rows use LABELS.
 */
export const COST_CASES = ['token_exchange', 'client_credentials+dpop'] as const;
export type CostCaseName = (typeof COST_CASES)[number];

/** The rows of the cost cases: the request measured, and the plain client_credentials beside it. */
export const COST_LABELS = {
  pinpoint: 'pinpoint sqlite',
  pinpointClientCredentials: 'pinpoint sqlite, client_credentials',
  peer: 'oidc-provider',
  peerClientCredentials: 'oidc-provider, client_credentials',
} as const;

export interface Row {
  readonly caseName: CaseName | CostCaseName | 'scale' | 'postgres' | 'workers';
  readonly connections: number;
  readonly server: string;
  /** Responses per second over all measured segments. */
  readonly rate: number;
  /** Responses over all measured segments. */
  readonly responses?: number;
  readonly segmentRates: readonly number[];
  /** Milliseconds, over every measured response. */
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
  readonly errors: number;
  readonly firstError?: string;
  /** Share of one core the server used while measured (several instances: together), and the most the driver used. */
  readonly serverCpu: number;
  readonly driverCpu: number;
  /** Several instances loaded at once: each one's share of a core. */
  readonly instanceCpu?: readonly number[];
  /** With a database in its own processes: their share of one core, and the whole machine's busy cores (every process on it). */
  readonly databaseCpu?: number;
  readonly machineCpu?: number;
  /** Rate in the first second of a segment against that segment's rate, averaged over the segments (1.00: warm). */
  readonly firstSecond: number;
  readonly rss: number;
}

export interface ScaleResult {
  readonly small: number;
  readonly large: number;
  readonly seedSeconds: Partial<Record<'small' | 'large', number>>;
  readonly rssAfterSeed: Partial<Record<'small' | 'large', number>>;
  readonly rssAfterRun: Partial<Record<'small' | 'large', number>>;
  readonly peakRss: Partial<Record<'small' | 'large', number>>;
}

/** Refresh on PostgreSQL with one and with two instances, or why it did not run. */
export type PostgresResult = { readonly rows: readonly Row[]; readonly server: string } | { readonly skipped: string };

/** This build against the previous release (its rows use RELEASE_LABELS), or why it was not measured (skipped or failed). */
export type ReleaseResult = { readonly rows: readonly Row[] } | { readonly skipped: string };

/**
 * `pinpoint serve --workers 2` against `--workers 1` (rows '1 worker' and '2 workers'); `unavailable`: this build refused
 * the flag; `failed`: the case broke off.
 */
export type WorkersResult =
  | { readonly rows: readonly Row[]; readonly processes: readonly [number, number] }
  | { readonly unavailable: string }
  | { readonly failed: string };

/** The sign-in storm as bench/storm.ts measured it, with the server's memory as the runner sampled it. */
export interface StormResult extends StormMeasurement {
  /** Highest sum of VmRSS over the server's processes, sampled; and the sum of their VmHWM at the end. */
  readonly peakRss: number;
  readonly summedHighWater: number;
  readonly processes: number;
  readonly sampleMs: number;
}

/** The storm, or why it broke off. */
export type StormOutcome = StormResult | { readonly failed: string };

export interface Target {
  readonly name: string;
  readonly met: boolean;
  readonly detail: string;
}

const PINPOINT = 'pinpoint sqlite';
const PEER = 'oidc-provider';
const FLOOR = 'fastify+jose';
/** The same Pinpoint with the signing it had before jose (bench/legacy-jwt.ts). */
export const LEGACY_SIGNING = 'pinpoint sqlite (node:crypto signing)';
const ONE_INSTANCE = '1 instance';
const TWO_INSTANCES = '2 instances';
const RSS_LIMIT = 250 * 1024 * 1024;
const MIB = 1024 * 1024;
/** The issue's targets (DESIGN.md §11): Pinpoint against the floor, this build against v0.2.0 with the same signing, the storm. */
const FLOOR_TARGET = 0.85;
const RELEASE_TARGET = 1.1;
/** DESIGN.md §12-13: what an exchange and a DPoP proof may cost against client_credentials (its rate over theirs). */
const EXCHANGE_COST_TARGET = 1.3;
const DPOP_COST_TARGET = 1.5;
const STORM_P99_MS = 50;
const STORM_RSS_LIMIT = 512 * MIB;

/** The three sides of the release comparison: this build, this build with the release's signing, the release. */
export const RELEASE_LABELS = {
  current: 'this build',
  sameSigning: 'this build, node:crypto signing',
  release: 'v0.2.0 (634e1de)',
} as const;
const RELEASE_CASES = ['refresh_token+resource', 'authorization_code+resource'] as const;

const mb = (bytes: number | undefined): string => (bytes === undefined || Number.isNaN(bytes) ? '-' : `${(bytes / 1024 / 1024).toFixed(0)} MB`);
const fixed = (value: number, digits: number): string => (Number.isFinite(value) ? value.toFixed(digits) : '-');
const whole = (value: number): string => (Number.isFinite(value) ? Math.round(value).toString() : '-');
const percent = (share: number | undefined): string => (share === undefined || !Number.isFinite(share) ? '-' : `${Math.round(share * 100)}%`);

function spread(rates: readonly number[]): string {
  if (rates.length < 2) return '';
  const mean = rates.reduce((sum, rate) => sum + rate, 0) / rates.length;
  const half = (Math.max(...rates) - Math.min(...rates)) / 2;
  return `±${Math.round((half / mean) * 100)}%`;
}

const find = (rows: readonly Row[], caseName: Row['caseName'], server: string, connections = 16): Row | undefined =>
  rows.find((row) => row.caseName === caseName && row.server === server && row.connections === connections);

const HEADER = ['case', 'c', 'server', 'req/s', 'spread', 'p50 ms', 'p99 ms', 'max ms', 'errors', 'srv cpu', 'drv cpu', 'warm', 'rss'];

function cells(row: Row): string[] {
  const refused = row.errors > 0;
  return [
    row.caseName,
    String(row.connections),
    row.server,
    refused ? 'refused' : whole(row.rate),
    refused ? '' : spread(row.segmentRates),
    fixed(row.p50, 2),
    fixed(row.p99, 2),
    fixed(row.max, 1),
    String(row.errors),
    `${Math.round(row.serverCpu * 100)}%`,
    `${Math.round(row.driverCpu * 100)}%`,
    fixed(row.firstSecond, 2),
    mb(row.rss),
  ];
}

/** One ratio line (exact form, for scripts), or `refused` when either side had an error. */
function ratioLine(prefix: string, pinpoint: Row | undefined, other: Row | undefined, digits = 2): string {
  if (pinpoint === undefined || other === undefined) return `${prefix}: missing`;
  if (pinpoint.errors > 0 || other.errors > 0) return `${prefix}: refused (${pinpoint.errors + other.errors} errors)`;
  return `${prefix}: ${Math.round(pinpoint.rate)} / ${Math.round(other.rate)} = ${(pinpoint.rate / other.rate).toFixed(digits)}`;
}

/** `a` over `b`, NaN unless both were measured without errors. */
function cleanRatio(a: Row | undefined, b: Row | undefined): number {
  return a === undefined || b === undefined || a.errors > 0 || b.errors > 0 ? Number.NaN : a.rate / b.rate;
}

/** `line` with what it is held to and whether it met it; `met` undefined: not judged (smoke mode's 1 s figures). */
function judged(line: string, target: string, met: boolean | undefined): string {
  return `${line} (target ${target}: ${met === undefined ? 'not judged in smoke' : met ? 'met' : 'not met'})`;
}

/** The ratio lines of a full run; `judge` false (smoke): the floor and cost lines say they are not judged. */
export function ratioLines(rows: readonly Row[], judge = true): string[] {
  const pinpoint = find(rows, 'client_credentials', PINPOINT);
  const floor = find(rows, 'client_credentials', FLOOR);
  return [
    ...CASES.map((caseName) => ratioLine(`ratio ${caseName}`, find(rows, caseName, PINPOINT), find(rows, caseName, PEER))),
    judged(ratioLine('floor client_credentials', pinpoint, floor), `>= ${FLOOR_TARGET}`, judge ? cleanRatio(pinpoint, floor) >= FLOOR_TARGET : undefined),
    ratioLine('jose cost', pinpoint, find(rows, 'client_credentials', LEGACY_SIGNING)),
    ...costLines(rows, judge),
  ];
}

/** The figures of the cost cases at c=16, from their own rows; NaN where a row is missing or had errors. */
function costFigures(rows: readonly Row[]): {
  exchange?: Row;
  exchangeReference?: Row;
  exchangeCost: number;
  dpop?: Row;
  plain?: Row;
  peerDpop?: Row;
  peerPlain?: Row;
  dpopCost: number;
  dpopRatio: number;
  plainRatio: number;
} {
  const exchange = find(rows, 'token_exchange', COST_LABELS.pinpoint);
  const exchangeReference = find(rows, 'token_exchange', COST_LABELS.pinpointClientCredentials);
  const dpop = find(rows, 'client_credentials+dpop', COST_LABELS.pinpoint);
  const plain = find(rows, 'client_credentials+dpop', COST_LABELS.pinpointClientCredentials);
  const peerDpop = find(rows, 'client_credentials+dpop', COST_LABELS.peer);
  const peerPlain = find(rows, 'client_credentials+dpop', COST_LABELS.peerClientCredentials);
  return {
    exchange,
    exchangeReference,
    exchangeCost: cleanRatio(exchangeReference, exchange),
    dpop,
    plain,
    peerDpop,
    peerPlain,
    dpopCost: cleanRatio(plain, dpop),
    dpopRatio: cleanRatio(dpop, peerDpop),
    plainRatio: cleanRatio(plain, peerPlain),
  };
}

/** What went wrong with a cost line's rows, or undefined when every one was measured cleanly. */
function costProblem(...rows: (Row | undefined)[]): string | undefined {
  if (rows.some((row) => row === undefined)) return 'missing';
  const errors = rows.reduce((sum, row) => sum + (row?.errors ?? 0), 0);
  return errors > 0 ? `refused (${errors} errors)` : undefined;
}

/**
 * The lines of the cost cases that ran (c=16; exact form, for scripts): token exchange against client_credentials, and
 * client_credentials with a DPoP proof against without, on Pinpoint and against oidc-provider with one.
 */
export function costLines(rows: readonly Row[], judge = true): string[] {
  const f = costFigures(rows);
  const ran = (caseName: CostCaseName): boolean => rows.some((row) => row.caseName === caseName);
  const lines: string[] = [];
  if (ran('token_exchange')) {
    const problem = costProblem(f.exchange, f.exchangeReference);
    lines.push(
      problem !== undefined
        ? `token_exchange: ${problem}`
        : judged(
            `token_exchange: ${whole(f.exchange?.rate ?? Number.NaN)} vs client_credentials ${whole(f.exchangeReference?.rate ?? Number.NaN)}: cost ${fixed(f.exchangeCost, 2)}x`,
            `<= ${EXCHANGE_COST_TARGET}x`,
            judge ? f.exchangeCost <= EXCHANGE_COST_TARGET : undefined,
          ),
    );
  }
  if (ran('client_credentials+dpop')) {
    const costProblemText = costProblem(f.dpop, f.plain);
    lines.push(
      costProblemText !== undefined
        ? `client_credentials+dpop: ${costProblemText}`
        : judged(
            `client_credentials+dpop: pinpoint ${whole(f.dpop?.rate ?? Number.NaN)} / plain ${whole(f.plain?.rate ?? Number.NaN)} = cost ${fixed(f.dpopCost, 2)}x`,
            `<= ${DPOP_COST_TARGET}x`,
            judge ? f.dpopCost <= DPOP_COST_TARGET : undefined,
          ),
    );
    const ratioProblem = costProblem(f.dpop, f.peerDpop, f.plain, f.peerPlain);
    lines.push(
      ratioProblem !== undefined
        ? `ratio client_credentials+dpop: ${ratioProblem}`
        : judged(
            `ratio client_credentials+dpop: pinpoint ${whole(f.dpop?.rate ?? Number.NaN)} / oidc-provider ${whole(f.peerDpop?.rate ?? Number.NaN)} = ${fixed(f.dpopRatio, 2)}`,
            `>= ratio client_credentials ${fixed(f.plainRatio, 2)}`,
            judge ? f.dpopRatio >= f.plainRatio : undefined,
          ),
    );
  }
  return lines;
}

/** The targets of the cost cases, for the targets table. */
function costTargets(rows: readonly Row[]): Target[] {
  const f = costFigures(rows);
  return [
    { name: `token_exchange costs <= ${EXCHANGE_COST_TARGET}x client_credentials`, met: f.exchangeCost <= EXCHANGE_COST_TARGET, detail: `${fixed(f.exchangeCost, 2)}x at c=16` },
    { name: `client_credentials with DPoP costs <= ${DPOP_COST_TARGET}x without`, met: f.dpopCost <= DPOP_COST_TARGET, detail: `${fixed(f.dpopCost, 2)}x at c=16` },
    {
      name: 'client_credentials+dpop against oidc-provider >= client_credentials against oidc-provider',
      met: f.dpopRatio >= f.plainRatio,
      detail: `${fixed(f.dpopRatio, 2)} against ${fixed(f.plainRatio, 2)} at c=16`,
    },
  ];
}

/**
 * The release lines: this build with the release's signing against the release (target), and with its own (a figure),
 * for refresh and code exchange at c=16; or the reason they were not measured, on each line.
 */
export function releaseLines(result: ReleaseResult, judge: boolean): string[] {
  const lines: string[] = [];
  for (const signing of ['same', 'own'] as const) {
    for (const caseName of RELEASE_CASES) {
      const prefix = `baseline ${caseName} (${signing} signing)`;
      if ('skipped' in result) {
        lines.push(`${prefix}: ${result.skipped}`);
        continue;
      }
      const current = find(result.rows, caseName, signing === 'same' ? RELEASE_LABELS.sameSigning : RELEASE_LABELS.current);
      const release = find(result.rows, caseName, RELEASE_LABELS.release);
      const line = ratioLine(prefix, current, release);
      lines.push(signing === 'own' ? line : judged(line, `>= ${RELEASE_TARGET.toFixed(2)}`, judge ? cleanRatio(current, release) >= RELEASE_TARGET : undefined));
    }
  }
  return lines;
}

export function workersLine(result: WorkersResult): string {
  const prefix = 'scale workers 2';
  if ('unavailable' in result) return `${prefix}: not available in this build (${result.unavailable})`;
  if ('failed' in result) return `${prefix}: failed (${result.failed})`;
  const [one, two] = result.processes;
  return `${ratioLine(prefix, find(result.rows, 'workers', '2 workers'), find(result.rows, 'workers', '1 worker'))} (processes: ${two} with --workers 2, ${one} with --workers 1)`;
}

const ms = (value: number): string => (Number.isFinite(value) ? value.toFixed(1) : '-');
const mib = (bytes: number): string => (Number.isFinite(bytes) ? (bytes / MIB).toFixed(0) : '-');

export function stormLines(storm: StormOutcome, judge: boolean): string[] {
  if ('failed' in storm) return [`storm p99: failed (${storm.failed})`, 'storm rss: failed (see storm p99)'];
  const errors = storm.tokenErrors > 0 ? `; ${storm.tokenErrors} token requests failed (first: ${storm.firstTokenError ?? '?'})` : '';
  const signInFailures = storm.signInErrors > 0 ? `, ${storm.signInErrors} failed (first: ${storm.firstSignInError ?? '?'})` : '';
  const p99Met = storm.tokenErrors === 0 && storm.tokenRequests > 0 && storm.p99 < STORM_P99_MS;
  return [
    judged(`storm p99: ${ms(storm.p99)} ms`, `< ${STORM_P99_MS} ms`, judge ? p99Met : undefined) +
      ` — p50 ${ms(storm.p50)} ms, max ${ms(storm.max)} ms over ${storm.tokenRequests} token requests in ${storm.seconds.toFixed(0)} s` +
      ` (${(storm.tokenRequests / storm.seconds).toFixed(0)}/s; ${ms(storm.quietP99)} ms p99 at ${(storm.quietRequests / Math.max(storm.quietSeconds, 0.001)).toFixed(0)}/s before the sign-ins)` +
      ` beside ${storm.signIns} sign-ins (median ${ms(storm.signInP50)} ms; ${storm.signInsRefused} refused with 503${signInFailures})${errors}`,
    judged(`storm rss: ${mib(storm.peakRss)} MiB`, `< ${STORM_RSS_LIMIT / MIB} MiB`, judge ? storm.peakRss < STORM_RSS_LIMIT : undefined) +
      ` — highest sum of VmRSS over the server's ${storm.processes} process${storm.processes === 1 ? '' : 'es'}, sampled every ${storm.sampleMs} ms; their VmHWM summed: ${mib(storm.summedHighWater)} MiB`,
  ];
}

/** The targets of the release lines and the storm, for the targets table. */
export function issueTargets(result: ReleaseResult | undefined, storm: StormOutcome | undefined): Target[] {
  const targets: Target[] = [];
  if (result !== undefined && !('skipped' in result)) {
    for (const caseName of RELEASE_CASES) {
      const value = cleanRatio(find(result.rows, caseName, RELEASE_LABELS.sameSigning), find(result.rows, caseName, RELEASE_LABELS.release));
      targets.push({ name: `${caseName} >= ${RELEASE_TARGET.toFixed(2)}x v0.2.0, same signing`, met: value >= RELEASE_TARGET, detail: `${fixed(value, 2)}x at c=16` });
    }
  }
  if (storm !== undefined && 'failed' in storm) {
    targets.push({ name: `token p99 < ${STORM_P99_MS} ms during the sign-in storm`, met: false, detail: `failed: ${storm.failed}` });
    targets.push({ name: `server RSS < ${STORM_RSS_LIMIT / MIB} MiB during the sign-in storm`, met: false, detail: 'failed' });
  } else if (storm !== undefined) {
    targets.push({
      name: `token p99 < ${STORM_P99_MS} ms during the sign-in storm`,
      met: storm.tokenErrors === 0 && storm.tokenRequests > 0 && storm.p99 < STORM_P99_MS,
      detail: `${ms(storm.p99)} ms over ${storm.tokenRequests} requests, ${storm.tokenErrors} errors`,
    });
    targets.push({ name: `server RSS < ${STORM_RSS_LIMIT / MIB} MiB during the sign-in storm`, met: storm.peakRss < STORM_RSS_LIMIT, detail: `peak ${mib(storm.peakRss)} MiB (sampled)` });
  }
  return targets;
}

/** run.ts --baseline: `current` against `baseline` for every case and concurrency measured (three digits: A/B steps are small). */
export function baselineLines(rows: readonly Row[], current: string, baseline: string): string[] {
  return rows
    .filter((row) => row.server === current)
    .map((row) => ratioLine(`baseline ${row.caseName} c=${row.connections}`, row, find(rows, row.caseName, baseline, row.connections), 3));
}

/** What `jose cost` compares, in one sentence. */
const JOSE_COST =
  'jose cost: Pinpoint as it is (every JWT signed by jose, CompactSign with a CryptoKey) against the same build with ' +
  'bench/legacy-jwt.ts in place of dist/crypto/jwt.js (the compact JWS built by hand and signed synchronously by node:crypto, ' +
  'as before 9fbb4d6), client_credentials at c=16, both on SQLite, interleaved in the same run.';

/** What `ratio introspection` compares, in one sentence. */
const INTROSPECTION =
  'introspection: each server is asked about access tokens it issued for one resource server from refresh-token ' +
  'exchanges (so each names a live grant), by the confidential client that holds them (HTTP Basic): Pinpoint at ' +
  '/introspect about its JWT access tokens (jose verification, remembered per token while its key is published and it ' +
  'is unexpired, and the grant looked up, which the SQLite store remembers until a commit could change it: ' +
  'store/remembered-holdings.ts), oidc-provider at /token/introspection about its opaque ' +
  'access tokens (it finds only those: a JWT access token is stored under its jti, not its value), each token from a pool ' +
  'of 2,000 introspected over and over, as a resource server introspects the token of each call it receives.';

/** What the token_exchange line compares, in one sentence. */
const EXCHANGE_TEXT =
  'token_exchange: a resource server (a configured confidential client with token_exchange { subject_audience = [its ' +
  'address] }, HTTP Basic) exchanges person access tokens addressed to it (200 of them, each from a refresh-token ' +
  "exchange of the bench client naming that resource, exchanged in turn over and over: Pinpoint remembers verified " +
  "tokens, and checks the subject token's grant on every call) for a token naming one resource of its own audience " +
  '(RFC 8693, DESIGN.md §12); against client_credentials on the same Pinpoint process (SQLite), interleaved, cost = ' +
  'client_credentials req/s / token_exchange req/s. oidc-provider has no token exchange: no ratio to it.';

/** What the client_credentials+dpop lines compare, in one sentence. */
const DPOP_TEXT =
  'client_credentials+dpop: client_credentials with a DPoP proof (RFC 9449: typ dpop+jwt, ES256, jwk in the header, ' +
  'htm POST, htu the issuer + /token, iat now, a unique jti) on every request, each proof used once, made by the driver ' +
  "with jose right before each segment; every answer must be 200 with token_type DPoP (and a sampled token's cnf.jkt the " +
  "proof key's). Interleaved in one case: Pinpoint (SQLite) and oidc-provider, each with and without proofs; the cost is " +
  "Pinpoint's plain rate over its DPoP rate, and the ratio to oidc-provider with proofs is held to the plain ratio of the same case.";

/** The PostgreSQL scale line (exact form, for scripts). */
function postgresLines(postgres: PostgresResult): string[] {
  const prefix = 'scale postgres 2 instances';
  if ('skipped' in postgres) return [`${prefix}: skipped (${postgres.skipped})`];
  const one = find(postgres.rows, 'postgres', ONE_INSTANCE);
  const two = find(postgres.rows, 'postgres', TWO_INSTANCES);
  if (one === undefined || two === undefined) return [`${prefix}: missing`];
  if (one.errors > 0 || two.errors > 0) return [`${prefix}: refused (${one.errors + two.errors} errors)`];
  return [`${prefix}: ${Math.round(two.rate)} / ${Math.round(one.rate)} = ${(two.rate / one.rate).toFixed(2)}`];
}

/** Where the CPU went in one PostgreSQL row, as shares of one core. */
function postgresCpu(row: Row): string {
  const instances = row.instanceCpu === undefined ? percent(row.serverCpu) : row.instanceCpu.map((cpu, i) => `${String.fromCharCode(65 + i)} ${percent(cpu)}`).join(' + ');
  return `Pinpoint ${instances}, PostgreSQL ${percent(row.databaseCpu)}, driver ${percent(row.driverCpu)}; machine busy ${percent(row.machineCpu)} of ${cpus().length * 100}%`;
}

function scaleLines(scaleRows: readonly Row[], scale: ScaleResult): string[] {
  const [small, large] = scaleRows;
  const lines: string[] = [];
  if (small !== undefined && large !== undefined) {
    const ok = small.errors === 0 && large.errors === 0;
    lines.push(
      ok
        ? `scale refresh_token+resource: ${Math.round(large.rate)} (${scale.large.toLocaleString('en')} grants) / ${Math.round(small.rate)} (${scale.small.toLocaleString('en')} grants) = ${(large.rate / small.rate).toFixed(2)}`
        : `scale refresh_token+resource: refused (${small.errors + large.errors} errors)`,
    );
  }
  lines.push(
    `scale rss with ${scale.large.toLocaleString('en')} grants in SQLite: ${mb(scale.rssAfterSeed.large)} after start, ${mb(scale.rssAfterRun.large)} after the run, peak ${mb(scale.peakRss.large)}` +
      ` (seeded in ${fixed(scale.seedSeconds.large ?? Number.NaN, 1)} s)`,
  );
  return lines;
}

function table(rows: readonly Row[]): string[] {
  const all = [HEADER, ...rows.map(cells)];
  const widths = HEADER.map((_, i) => Math.max(...all.map((line) => (line[i] as string).length)));
  return all.map((line) => line.map((cell, i) => (i <= 2 ? cell.padEnd(widths[i] as number) : cell.padStart(widths[i] as number))).join('  '));
}

/** Prints the table, the errors of refused cases and the ratio lines; returns how many rows were refused. */
export function printReport(
  rows: readonly Row[],
  scaleRows: readonly Row[],
  scale: ScaleResult | undefined,
  postgres: PostgresResult | undefined,
  pinned: boolean,
  log: (line: string) => void,
  ratios: readonly string[] = ratioLines(rows),
  more: { readonly rows: readonly Row[]; readonly lines: readonly string[] } = { rows: [], lines: [] },
): number {
  const postgresRows = postgres === undefined || 'skipped' in postgres ? [] : postgres.rows;
  const all = [...rows, ...scaleRows, ...postgresRows, ...more.rows];
  for (const line of table(all)) log(line);
  log(`(req/s: mean over the measured segments; spread: half the range of segment rates; warm: first second / segment rate, mean over segments;${pinned ? '' : ' NOT PINNED;'} cpu: share of one core)`);
  for (const row of all.filter((r) => r.errors > 0)) log(`refused ${row.caseName} c=${row.connections} ${row.server}: ${row.firstError ?? `${row.errors} errors`}`);
  log('');
  for (const ratio of ratios) log(ratio);
  if (scale !== undefined) for (const line of scaleLines(scaleRows, scale)) log(line);
  if (postgres !== undefined) for (const line of postgresLines(postgres)) log(line);
  for (const row of postgresRows) log(`postgres ${row.server} cpu: ${postgresCpu(row)}`);
  for (const line of more.lines) log(line);
  return all.filter((row) => row.errors > 0).length;
}

export function evaluateTargets(rows: readonly Row[], scaleRows: readonly Row[], scale: ScaleResult): Target[] {
  const targets: Target[] = [];
  const ratio = (caseName: CaseName, other: string): number => {
    const pinpoint = find(rows, caseName, PINPOINT);
    const peer = find(rows, caseName, other);
    return pinpoint === undefined || peer === undefined ? Number.NaN : pinpoint.rate / peer.rate;
  };
  // The ratios to oidc-provider are figures, not targets (the issue "Every core, steady latency" holds Pinpoint to the floor and to v0.2.0).
  const floor = ratio('client_credentials', FLOOR);
  targets.push({ name: `client_credentials >= ${FLOOR_TARGET}x fastify+jose`, met: floor >= FLOOR_TARGET, detail: `${fixed(floor, 2)}x at c=16` });
  const pinpointRows = [...rows, ...scaleRows].filter((row) => row.connections === 16 && (row.server === PINPOINT || row.caseName === 'scale'));
  const worst = pinpointRows.reduce((max, row) => (row.p99 > max.p99 ? row : max), pinpointRows[0] as Row);
  targets.push({
    name: 'p99 < 10 ms at c=16 on every case (Pinpoint on SQLite)',
    met: pinpointRows.every((row) => row.p99 < 10),
    detail: worst === undefined ? '-' : `worst ${fixed(worst.p99, 2)} ms (${worst.caseName}, ${worst.server})`,
  });
  targets.push(...costTargets(rows));
  const errors = [...rows, ...scaleRows].reduce((sum, row) => sum + row.errors, 0);
  targets.push({ name: 'error count 0', met: errors === 0, detail: `${errors} errors over every case and server` });
  const [small, large] = scaleRows;
  const scaleRatio = small === undefined || large === undefined ? Number.NaN : large.rate / small.rate;
  targets.push({
    name: `refresh at ${scale.large.toLocaleString('en')} grants within 20% of ${scale.small.toLocaleString('en')}`,
    met: scaleRatio >= 0.8,
    detail: `${fixed(scaleRatio, 2)}x`,
  });
  const peak = Math.max(scale.peakRss.large ?? Number.NaN, scale.rssAfterRun.large ?? Number.NaN);
  targets.push({ name: `RSS < 250 MB with ${scale.large.toLocaleString('en')} grants in SQLite`, met: peak < RSS_LIMIT, detail: `peak ${mb(peak)}` });
  return targets;
}

async function packageVersion(name: string): Promise<string> {
  try {
    return (JSON.parse(await readFile(new URL(`../node_modules/${name}/package.json`, import.meta.url), 'utf8')) as { version: string }).version;
  } catch {
    return '?';
  }
}

/** The subsection on the PostgreSQL case: this run's figures; the analysis is written by hand in the notes. */
function postgresSection(postgres: PostgresResult): string[] {
  const heading = ['### PostgreSQL: what limits two instances on 2 cores', ''];
  if ('skipped' in postgres) return [...heading, `Not measured in this run: ${postgres.skipped}.`, ''];
  const one = find(postgres.rows, 'postgres', ONE_INSTANCE);
  const two = find(postgres.rows, 'postgres', TWO_INSTANCES);
  if (one === undefined || two === undefined) return [...heading, 'Not measured in this run.', ''];
  const figures = (row: Row): string =>
    row.errors > 0 ? `refused (${row.firstError ?? `${row.errors} errors`})` : `${whole(row.rate)} req/s, p99 ${fixed(row.p99, 2)} ms; CPU: ${postgresCpu(row)}`;
  return [
    ...heading,
    `refresh_token+resource, every instance on one database of ${postgres.server}; 16 connections from the one driver`,
    'process: one autocannon instance of 16 connections for one Pinpoint instance, two of 8 connections each (one per instance) for two.',
    '',
    `- 1 instance (core 0): ${figures(one)}.`,
    `- 2 instances (A on core 0, B on core 1): ${figures(two)}; ${fixed(two.rate / one.rate, 2)}x the one instance.`,
    '',
    "CPU shares are of one core, averaged over the measured segments; PostgreSQL's are its backends for this database and its",
    'background processes (WAL writer, checkpointer, autovacuum). With two instances, B shares core 1 with the driver,',
    "and PostgreSQL's processes are not pinned: they run on either core, so the instances, the driver and PostgreSQL all",
    'compete for the two cores. "machine busy" counts every process on the machine, this benchmark\'s and any other.',
    '',
  ];
}

/** What the release lines compare, in one paragraph. */
const RELEASE_TEXT =
  'baseline ... v0.2.0: refresh_token+resource and authorization_code+resource at c=16, interleaved in one case each: this ' +
  'build as it is ("own signing"), this build with bench/legacy-jwt.ts in place of dist/crypto/jwt.js (node:crypto signing, ' +
  'as v0.2.0 signs: "same signing", so the ratio compares everything but the signature), and v0.2.0 (634e1de) built by ' +
  "this checkout's tsc in .bench-cache/v0.2.0 and run by its own bench/pinpoint-server.ts; all three on SQLite.";

/** What the workers line compares, in one paragraph. */
const WORKERS_TEXT =
  'scale workers 2: client_credentials at c=16 on `pinpoint serve --workers 2` against `--workers 1` (dist/cli.js with a ' +
  'config file, SQLite state), interleaved; the servers and the driver may run on either core (none pinned).';

/** What the storm measures, in one paragraph. */
const STORM_TEXT =
  'storm: `pinpoint serve` (SQLite, a local user whose password hash `pinpoint hash-password` made: scrypt N = 2^17), free ' +
  'to use both cores; 8 token loops (4 client_credentials, 4 refresh_token each along its own rotation chain) run alone, ' +
  'then beside 8 browsers that sign in through the password form as fast as the server lets them (GET /authorize, the ' +
  'form posted with its hidden inputs, redirects followed to the client). p99: every token answer during the storm. ' +
  'rss: the highest sum of VmRSS over the server process and its children (/proc, sampled).';

/** The line under which each full run puts its section, above the sections of earlier runs. */
const RUNS_MARKER = '<!-- each full run of `npm run bench` adds its section below this line, above the earlier ones -->';

const FILE_HEADER = [
  '# Benchmark results',
  '',
  'Written by `npm run bench` (bench/run.ts). Pinpoint and oidc-provider run side by side in the same run;',
  'the ratios are the result, the absolute figures move with the machine. Each full run adds a dated section,',
  'newest first; what is written by hand under a run is kept.',
  '',
].join('\n');

export async function writeResults(
  file: string,
  run: {
    rows: readonly Row[];
    scaleRows: readonly Row[];
    scale: ScaleResult;
    postgres: PostgresResult;
    release: ReleaseResult;
    workers: WorkersResult;
    storm: StormOutcome;
    targets: readonly Target[];
    signing?: string;
    /** bench/write-lock.ts: how long a refresh holds SQLite's write lock, by rotations in flight. */
    writeLock?: string;
    pinned: boolean;
    seconds: number;
    nodeFlags: readonly string[];
    loadAtStart: readonly number[];
  },
): Promise<void> {
  const previous = await readFile(file, 'utf8').catch(() => '');
  const packages = ['fastify', '@fastify/formbody', 'jose', 'better-sqlite3', 'pino', 'oidc-provider', 'autocannon'];
  const versions = await Promise.all(packages.map(async (name) => `${name} ${await packageVersion(name)}`));
  const commit = spawnSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).stdout.trim();
  const dirty = spawnSync('git', ['status', '--porcelain', '--', 'src'], { encoding: 'utf8' }).stdout.trim() !== '';
  const cpu = cpus();
  const load = (values: readonly number[]): string => values.map((x) => x.toFixed(2)).join(' ');
  const postgresRows = 'skipped' in run.postgres ? [] : run.postgres.rows;
  const releaseRows = 'skipped' in run.release ? [] : run.release.rows;
  const workerRows = 'rows' in run.workers ? run.workers.rows : [];
  const tableRows = [...run.rows, ...run.scaleRows, ...postgresRows, ...releaseRows, ...workerRows].map(cells);
  const date = new Date().toISOString();
  const section = [
    `## ${date.slice(0, 10)}: full run at ${commit}${dirty ? ' (uncommitted changes in src/)' : ''}`,
    '',
    `- date: ${date}; run took ${Math.round(run.seconds)} s`,
    `- machine: ${cpu.length} × ${cpu[0]?.model ?? '?'}, ${(totalmem() / 1024 ** 3).toFixed(1)} GiB, ${type()} ${release()}; ` +
      `**shared with other engineers' work while this ran, so every figure is noisy**: load average ${load(run.loadAtStart)} at the start, ${load(loadavg())} at the end`,
    `- pinning: ${run.pinned ? 'each server process on core 0 (taskset), the autocannon driver on core 1; PostgreSQL case: instance A on core 0, instance B on core 1, PostgreSQL unpinned; workers and storm: server and load on both cores' : 'NONE (taskset missing)'}`,
    `- Node ${process.version}; Pinpoint ${commit}${dirty ? ' with uncommitted changes in src/' : ''}; ${versions.join(', ')}`,
    '- cases: warmed up 2 s per server, then 10 s measured per server as 4 segments of 2.5 s interleaved A B C C B A A B C C B A',
    `- every server process runs with the node flags Pinpoint ships with (\`npm start\`: ${run.nodeFlags.join(' ')}), so the ratios compare code, not runtime settings`,
    `- Pinpoint: run from dist/ (tsc output, as \`npm start\`); production logger (info, one access-log line per request, pino to a file, so written on the event loop in 4 KiB batches; up to 36b5e5c, asynchronously); SQLite in WAL at synchronous=NORMAL (durable against a killed process)`,
    '',
    '### Ratios',
    '',
    '```',
    ...ratioLines(run.rows),
    ...releaseLines(run.release, true),
    workersLine(run.workers),
    ...stormLines(run.storm, true),
    ...scaleLines(run.scaleRows, run.scale),
    ...postgresLines(run.postgres),
    '```',
    '',
    JOSE_COST,
    '',
    RELEASE_TEXT,
    '',
    WORKERS_TEXT,
    '',
    STORM_TEXT,
    '',
    INTROSPECTION,
    '',
    EXCHANGE_TEXT,
    '',
    DPOP_TEXT,
    '',
    '### Targets',
    '',
    '| target | met | figure |',
    '|---|---|---|',
    ...run.targets.map((target) => `| ${target.name} | ${target.met ? 'yes' : '**no**'} | ${target.detail} |`),
    '',
    '### All figures',
    '',
    `| ${HEADER.join(' | ')} |`,
    `|${HEADER.map((_, i) => (i <= 2 ? '---' : '---:')).join('|')}|`,
    ...tableRows.map((line) => `| ${line.join(' | ')} |`),
    '',
    'req/s: mean over the measured segments; spread: half the range of the segment rates; p50/p99/max: every measured response;',
    'srv cpu: share of one core the server used while measured (all its processes); drv cpu: the most the driver used (near 100%: the driver, not the server, is the limit);',
    'warm: the rate in the first second of a segment against that segment\'s rate, mean over the segments (about 1: no slow start); rss: server resident memory after the case.',
    'postgres rows: srv cpu and rss are both instances\' together.',
    '',
    ...(run.signing === undefined ? [] : ['### Signing one ES256 JWS on one core (bench/sign.ts)', '', '```', run.signing.trimEnd(), '```', '']),
    ...(run.writeLock === undefined
      ? []
      : ['### SQLite write lock per refresh (bench/write-lock.ts): what bounds refresh across workers', '', '```', run.writeLock.trimEnd(), '```', '']),
    ...postgresSection(run.postgres),
  ].join('\n');
  const at = previous.indexOf(RUNS_MARKER);
  // A file without the marker (or none yet): its text is kept below the new section.
  const [head, rest] = at === -1 ? [`${FILE_HEADER}\n${RUNS_MARKER}`, previous === '' ? '' : `\n${previous}`] : [previous.slice(0, at + RUNS_MARKER.length), previous.slice(at + RUNS_MARKER.length)];
  await writeFile(file, `${head}\n\n${section}${rest.startsWith('\n') ? rest : `\n${rest}`}`);
}

/** The benchmark's figures: the table, the ratio lines a script reads, the targets, and bench/RESULTS.md. */
import { spawnSync } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { cpus, loadavg, release, totalmem, type } from 'node:os';

export const CASES = ['client_credentials', 'refresh_token+resource', 'authorization_code+resource', 'introspection'] as const;
export type CaseName = (typeof CASES)[number];

export interface Row {
  readonly caseName: CaseName | 'scale' | 'postgres';
  readonly connections: number;
  readonly server: string;
  /** Responses per second over all measured segments. */
  readonly rate: number;
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

/** The ratio lines of a full run. */
export function ratioLines(rows: readonly Row[]): string[] {
  return [
    ...CASES.map((caseName) => ratioLine(`ratio ${caseName}`, find(rows, caseName, PINPOINT), find(rows, caseName, PEER))),
    ratioLine('floor client_credentials', find(rows, 'client_credentials', PINPOINT), find(rows, 'client_credentials', FLOOR)),
    ratioLine('jose cost', find(rows, 'client_credentials', PINPOINT), find(rows, 'client_credentials', LEGACY_SIGNING)),
  ];
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
  'is unexpired, plus one lookup of the grant on every call), oidc-provider at /token/introspection about its opaque ' +
  'access tokens (it finds only those: a JWT access token is stored under its jti, not its value), each token from a pool ' +
  'of 2,000 introspected over and over, as a resource server introspects the token of each call it receives.';

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
): number {
  const postgresRows = postgres === undefined || 'skipped' in postgres ? [] : postgres.rows;
  const all = [...rows, ...scaleRows, ...postgresRows];
  for (const line of table(all)) log(line);
  log(`(req/s: mean over the measured segments; spread: half the range of segment rates; warm: first second / segment rate, mean over segments;${pinned ? '' : ' NOT PINNED;'} cpu: share of one core)`);
  for (const row of all.filter((r) => r.errors > 0)) log(`refused ${row.caseName} c=${row.connections} ${row.server}: ${row.firstError ?? `${row.errors} errors`}`);
  log('');
  for (const ratio of ratios) log(ratio);
  if (scale !== undefined) for (const line of scaleLines(scaleRows, scale)) log(line);
  if (postgres !== undefined) for (const line of postgresLines(postgres)) log(line);
  for (const row of postgresRows) log(`postgres ${row.server} cpu: ${postgresCpu(row)}`);
  return all.filter((row) => row.errors > 0).length;
}

export function evaluateTargets(rows: readonly Row[], scaleRows: readonly Row[], scale: ScaleResult): Target[] {
  const targets: Target[] = [];
  const ratio = (caseName: CaseName, other: string): number => {
    const pinpoint = find(rows, caseName, PINPOINT);
    const peer = find(rows, caseName, other);
    return pinpoint === undefined || peer === undefined ? Number.NaN : pinpoint.rate / peer.rate;
  };
  for (const caseName of ['refresh_token+resource', 'authorization_code+resource', 'client_credentials', 'introspection'] as const) {
    const value = ratio(caseName, PEER);
    targets.push({ name: `${caseName} >= 2.0x oidc-provider`, met: value >= 2, detail: `${fixed(value, 2)}x at c=16` });
  }
  const floor = ratio('client_credentials', FLOOR);
  targets.push({ name: 'client_credentials >= 0.8x fastify+jose', met: floor >= 0.8, detail: `${fixed(floor, 2)}x at c=16` });
  const pinpointRows = [...rows, ...scaleRows].filter((row) => row.connections === 16 && (row.server === PINPOINT || row.caseName === 'scale'));
  const worst = pinpointRows.reduce((max, row) => (row.p99 > max.p99 ? row : max), pinpointRows[0] as Row);
  targets.push({
    name: 'p99 < 10 ms at c=16 on every case (Pinpoint on SQLite)',
    met: pinpointRows.every((row) => row.p99 < 10),
    detail: worst === undefined ? '-' : `worst ${fixed(worst.p99, 2)} ms (${worst.caseName}, ${worst.server})`,
  });
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

/** The section on the PostgreSQL case: this run's figures in a marked paragraph; the analysis is written by hand in the notes. */
function postgresSection(postgres: PostgresResult): string[] {
  const heading = ['## PostgreSQL: what limits two instances on 2 cores', '', '<!-- figures written by report.ts from this run; the analysis belongs in the notes below, which a run keeps -->', ''];
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

/** Everything below this line of RESULTS.md is written by hand and kept when the figures are rewritten. */
const NOTES_MARKER = '<!-- notes below are kept when `npm run bench` rewrites the figures above -->';

export async function writeResults(
  file: string,
  run: {
    rows: readonly Row[];
    scaleRows: readonly Row[];
    scale: ScaleResult;
    postgres: PostgresResult;
    targets: readonly Target[];
    signing?: string;
    pinned: boolean;
    seconds: number;
    nodeFlags: readonly string[];
  },
): Promise<void> {
  const previous = await readFile(file, 'utf8').catch(() => '');
  const at = previous.indexOf(NOTES_MARKER);
  const notes = at === -1 ? '\n## Notes\n' : previous.slice(at + NOTES_MARKER.length);
  const packages = ['fastify', '@fastify/formbody', 'jose', 'better-sqlite3', 'pino', 'oidc-provider', 'autocannon'];
  const versions = await Promise.all(packages.map(async (name) => `${name} ${await packageVersion(name)}`));
  const commit = spawnSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).stdout.trim();
  const dirty = spawnSync('git', ['status', '--porcelain', '--', 'src'], { encoding: 'utf8' }).stdout.trim() !== '';
  const cpu = cpus();
  const postgresRows = 'skipped' in run.postgres ? [] : run.postgres.rows;
  const tableRows = [...run.rows, ...run.scaleRows, ...postgresRows].map(cells);
  const text = [
    '# Benchmark results',
    '',
    'Written by `npm run bench` (bench/run.ts). Pinpoint and oidc-provider run side by side in the same run;',
    'the ratios are the result, the absolute figures move with the machine.',
    '',
    `- date: ${new Date().toISOString()}; run took ${Math.round(run.seconds)} s`,
    `- machine: ${cpu.length} × ${cpu[0]?.model ?? '?'}, ${(totalmem() / 1024 ** 3).toFixed(1)} GiB, ${type()} ${release()}; load average at the end ${loadavg().map((x) => x.toFixed(2)).join(' ')}`,
    `- pinning: ${run.pinned ? 'each server process on core 0 (taskset), the autocannon driver on core 1; PostgreSQL case: instance A on core 0, instance B on core 1, PostgreSQL unpinned' : 'NONE (taskset missing)'}`,
    `- Node ${process.version}; Pinpoint ${commit}${dirty ? ' with uncommitted changes in src/' : ''}; ${versions.join(', ')}`,
    '- cases: warmed up 2 s per server, then 10 s measured per server as 4 segments of 2.5 s interleaved A B C C B A A B C C B A',
    `- every server process runs with the node flags Pinpoint ships with (\`npm start\`: ${run.nodeFlags.join(' ')}), so the ratios compare code, not runtime settings`,
    `- Pinpoint: run from dist/ (tsc output, as \`npm start\`); production logger (info, one access-log line per request, asynchronous pino to a file); SQLite in WAL at synchronous=NORMAL (durable against a killed process)`,
    '',
    '## Ratios',
    '',
    '```',
    ...ratioLines(run.rows),
    ...scaleLines(run.scaleRows, run.scale),
    ...postgresLines(run.postgres),
    '```',
    '',
    JOSE_COST,
    '',
    INTROSPECTION,
    '',
    '## Targets',
    '',
    '| target | met | figure |',
    '|---|---|---|',
    ...run.targets.map((target) => `| ${target.name} | ${target.met ? 'yes' : '**no**'} | ${target.detail} |`),
    '',
    '## All figures',
    '',
    `| ${HEADER.join(' | ')} |`,
    `|${HEADER.map((_, i) => (i <= 2 ? '---' : '---:')).join('|')}|`,
    ...tableRows.map((line) => `| ${line.join(' | ')} |`),
    '',
    'req/s: mean over the measured segments; spread: half the range of the segment rates; p50/p99/max: every measured response;',
    'srv cpu: share of its core the server used while measured; drv cpu: the most the driver used (near 100%: the driver, not the server, is the limit);',
    'warm: the rate in the first second of a segment against that segment\'s rate, mean over the segments (about 1: no slow start); rss: server resident memory after the case.',
    'postgres rows: srv cpu and rss are both instances\' together.',
    '',
    ...(run.signing === undefined ? [] : ['## Signing one ES256 JWS on one core (bench/sign.ts)', '', '```', run.signing.trimEnd(), '```', '']),
    ...postgresSection(run.postgres),
    NOTES_MARKER,
  ].join('\n');
  await writeFile(file, `${text}${notes}`);
}

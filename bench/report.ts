/** The benchmark's figures: the table, the ratio lines a script reads, the targets, and bench/RESULTS.md. */
import { spawnSync } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { cpus, loadavg, release, totalmem, type } from 'node:os';

export const CASES = ['client_credentials', 'refresh_token+resource', 'authorization_code+resource'] as const;
export type CaseName = (typeof CASES)[number];

export interface Row {
  readonly caseName: CaseName | 'scale';
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
  /** Share of one core the server used while measured, and the most the driver used. */
  readonly serverCpu: number;
  readonly driverCpu: number;
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

export interface Target {
  readonly name: string;
  readonly met: boolean;
  readonly detail: string;
}

const PINPOINT = 'pinpoint sqlite';
const PEER = 'oidc-provider';
const FLOOR = 'fastify+jose';
const RSS_LIMIT = 250 * 1024 * 1024;

const mb = (bytes: number | undefined): string => (bytes === undefined || Number.isNaN(bytes) ? '-' : `${(bytes / 1024 / 1024).toFixed(0)} MB`);
const fixed = (value: number, digits: number): string => (Number.isFinite(value) ? value.toFixed(digits) : '-');
const whole = (value: number): string => (Number.isFinite(value) ? Math.round(value).toString() : '-');

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

/** The ratio lines (exact form, for scripts), or `refused` when either side had an error. */
export function ratioLines(rows: readonly Row[]): string[] {
  const line = (prefix: string, pinpoint: Row | undefined, other: Row | undefined): string => {
    if (pinpoint === undefined || other === undefined) return `${prefix}: missing`;
    if (pinpoint.errors > 0 || other.errors > 0) return `${prefix}: refused (${pinpoint.errors + other.errors} errors)`;
    return `${prefix}: ${Math.round(pinpoint.rate)} / ${Math.round(other.rate)} = ${(pinpoint.rate / other.rate).toFixed(2)}`;
  };
  return [
    ...CASES.map((caseName) => line(`ratio ${caseName}`, find(rows, caseName, PINPOINT), find(rows, caseName, PEER))),
    line('floor client_credentials', find(rows, 'client_credentials', PINPOINT), find(rows, 'client_credentials', FLOOR)),
  ];
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
export function printReport(rows: readonly Row[], scaleRows: readonly Row[], scale: ScaleResult | undefined, pinned: boolean, log: (line: string) => void): number {
  const all = [...rows, ...scaleRows];
  for (const line of table(all)) log(line);
  log(`(req/s: mean over the measured segments; spread: half the range of segment rates; warm: first second / segment rate, mean over segments;${pinned ? '' : ' NOT PINNED;'} cpu: share of one core)`);
  for (const row of all.filter((r) => r.errors > 0)) log(`refused ${row.caseName} c=${row.connections} ${row.server}: ${row.firstError ?? `${row.errors} errors`}`);
  log('');
  for (const line of ratioLines(rows)) log(line);
  if (scale !== undefined) for (const line of scaleLines(scaleRows, scale)) log(line);
  return all.filter((row) => row.errors > 0).length;
}

export function evaluateTargets(rows: readonly Row[], scaleRows: readonly Row[], scale: ScaleResult): Target[] {
  const targets: Target[] = [];
  const ratio = (caseName: CaseName, other: string): number => {
    const pinpoint = find(rows, caseName, PINPOINT);
    const peer = find(rows, caseName, other);
    return pinpoint === undefined || peer === undefined ? Number.NaN : pinpoint.rate / peer.rate;
  };
  for (const caseName of ['refresh_token+resource', 'authorization_code+resource', 'client_credentials'] as const) {
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

/** Everything below this line of RESULTS.md is written by hand and kept when the figures are rewritten. */
const NOTES_MARKER = '<!-- notes below are kept when `npm run bench` rewrites the figures above -->';

export async function writeResults(
  file: string,
  run: { rows: readonly Row[]; scaleRows: readonly Row[]; scale: ScaleResult; targets: readonly Target[]; signing?: string; pinned: boolean; seconds: number; nodeFlags: readonly string[] },
): Promise<void> {
  const previous = await readFile(file, 'utf8').catch(() => '');
  const at = previous.indexOf(NOTES_MARKER);
  const notes = at === -1 ? '\n## Notes\n' : previous.slice(at + NOTES_MARKER.length);
  const packages = ['fastify', '@fastify/formbody', 'jose', 'better-sqlite3', 'pino', 'oidc-provider', 'autocannon'];
  const versions = await Promise.all(packages.map(async (name) => `${name} ${await packageVersion(name)}`));
  const commit = spawnSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).stdout.trim();
  const dirty = spawnSync('git', ['status', '--porcelain', '--', 'src'], { encoding: 'utf8' }).stdout.trim() !== '';
  const cpu = cpus();
  const tableRows = [...run.rows, ...run.scaleRows].map(cells);
  const text = [
    '# Benchmark results',
    '',
    'Written by `npm run bench` (bench/run.ts). Pinpoint and oidc-provider run side by side in the same run;',
    'the ratios are the result, the absolute figures move with the machine.',
    '',
    `- date: ${new Date().toISOString()}; run took ${Math.round(run.seconds)} s`,
    `- machine: ${cpu.length} × ${cpu[0]?.model ?? '?'}, ${(totalmem() / 1024 ** 3).toFixed(1)} GiB, ${type()} ${release()}; load average at the end ${loadavg().map((x) => x.toFixed(2)).join(' ')}`,
    `- pinning: ${run.pinned ? 'each server process on core 0 (taskset), the autocannon driver on core 1' : 'NONE (taskset missing)'}`,
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
    '```',
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
    '',
    ...(run.signing === undefined ? [] : ['## Signing one ES256 JWS on one core (bench/sign.ts)', '', '```', run.signing.trimEnd(), '```', '']),
    NOTES_MARKER,
  ].join('\n');
  await writeFile(file, `${text}${notes}`);
}

/**
 * Reads what callgrind counted (`npm run bench -- --instructions CASE`): instructions per thread, and the main thread's
 * instructions by function, JavaScript compiled by V8 named through the map `node --perf-basic-prof` writes.
 */
import { spawnSync } from 'node:child_process';
import { readFile } from 'node:fs/promises';

/** One server's instructions under callgrind: per thread (the main thread is 1), over `responses` answers. */
export interface CountedRun {
  readonly label: string;
  readonly responses: number;
  readonly threads: readonly { readonly thread: number; readonly instructions: number }[];
  /** The main thread's instructions by function, heaviest first. */
  readonly functions: ReadonlyMap<string, number>;
}

/** The instructions a callgrind dump counted: its `totals:` line (or `summary:`, when it has none). */
export async function countedInstructions(file: string): Promise<number> {
  const text = await readFile(file, 'utf8');
  const line = /^totals:\s+(\d+)/m.exec(text) ?? /^summary:\s+(\d+)/m.exec(text);
  return line === null ? 0 : Number(line[1]);
}

/** Code V8 compiled, from a perf map (`start size name` in hex, one per line), sorted by start for lookups. */
type CodeMap = readonly { readonly start: bigint; readonly end: bigint; readonly name: string }[];

export async function readPerfMap(file: string): Promise<CodeMap> {
  const text = await readFile(file, 'utf8').catch(() => '');
  const entries = [];
  for (const line of text.split('\n')) {
    const match = /^([0-9a-f]+) ([0-9a-f]+) (.*)$/i.exec(line);
    if (match === null) continue;
    const start = BigInt(`0x${match[1]}`);
    entries.push({ start, end: start + BigInt(`0x${match[2]}`), name: match[3] as string });
  }
  return entries.sort((a, b) => (a.start < b.start ? -1 : a.start > b.start ? 1 : 0));
}

/** The name of the code at `address`: the last entry starting at or before it (code moved later wins), if it spans it. */
function codeAt(map: CodeMap, address: bigint): string | undefined {
  let low = 0;
  let high = map.length - 1;
  let found = -1;
  while (low <= high) {
    const middle = (low + high) >> 1;
    if ((map[middle] as CodeMap[number]).start <= address) {
      found = middle;
      low = middle + 1;
    } else high = middle - 1;
  }
  const entry = map[found];
  return entry !== undefined && address < entry.end ? entry.name : undefined;
}

/** A V8 code name without its tier marks and absolute paths: `JS:*name file:line:col` as `name dist/x.js:line`. */
function shortName(name: string): string {
  const js = /^(?:JS|LazyCompile|Function):[*~^+-]?(\S*) (?:file:\/\/)?(.*?)(?::\d+)?$/.exec(name);
  if (js === null) return name;
  const place = (js[2] as string).replace(/^.*\/node_modules\//, '').replace(/^.*\/((?:src|dist|bench)\/)/, '$1');
  return `${js[1] || '(anonymous)'} ${place}`;
}

/**
 * The self instructions of each function in a dump (callgrind_annotate), the names of code V8 compiled read from
 * `map`, the rest as callgrind names them (node's builtins and C++, libc, better-sqlite3).
 */
export function functionCosts(dump: string, map: CodeMap): Map<string, number> {
  // --auto=no: no annotated source after the table, whose lines have the table's shape.
  const annotated = spawnSync('callgrind_annotate', ['--threshold=100', '--auto=no', dump], { encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 });
  const costs = new Map<string, number>();
  const lines = annotated.stdout.split('\n');
  const table = lines.findIndex((line) => /\bfile:function\s*$/.test(line));
  if (table < 0) return costs;
  for (const line of lines.slice(table + 1)) {
    const match = /^\s*([\d,]+) \([ \d.]+%\)\s+(.*)$/.exec(line);
    if (match === null) continue;
    const count = Number((match[1] as string).replaceAll(',', ''));
    const where = match[2] as string;
    const unknown = /^\?\?\?:0x([0-9a-f]+) \[\?\?\?\]$/i.exec(where);
    const name = unknown === null ? where.replace(/^\?\?\?:/, '').replace(/\s*\[[^\]]*\]$/, '').replace(/\(.*$/, '') : (shortName(codeAt(map, BigInt(`0x${unknown[1]}`)) ?? 'unnamed compiled code'));
    costs.set(name, (costs.get(name) ?? 0) + count);
  }
  return new Map([...costs].sort((a, b) => b[1] - a[1]));
}

const perRequest = (run: CountedRun, instructions: number): string => Math.round(instructions / run.responses).toLocaleString('en');
const totalOf = (run: CountedRun, mainOnly: boolean): number => run.threads.filter((t) => !mainOnly || t.thread === 1).reduce((sum, t) => sum + t.instructions, 0);

/** The per-request lines of one counted run: every thread, and the main thread's heaviest functions. */
export function instructionLines(run: CountedRun, top = 30): string[] {
  const lines = [`${run.label}: ${run.responses} answers counted; instructions per request: ${perRequest(run, totalOf(run, false))} in all`];
  for (const t of run.threads) if (t.instructions > 0) lines.push(`  thread ${t.thread}${t.thread === 1 ? ' (main)' : ''}: ${perRequest(run, t.instructions)}`);
  lines.push('  main thread, self instructions per request by function:');
  for (const [name, count] of [...run.functions].slice(0, top)) lines.push(`    ${perRequest(run, count).padStart(9)}  ${name}`);
  return lines;
}

/** A against B: the ratios, and the functions whose instructions per request differ most between the two. */
export function comparisonLines(a: CountedRun, b: CountedRun, top = 40): string[] {
  const lines = [
    `A = ${a.label}, B = ${b.label}: instructions per request A / B = ${(totalOf(a, false) / a.responses / (totalOf(b, false) / b.responses)).toFixed(3)} in all, ${(totalOf(a, true) / a.responses / (totalOf(b, true) / b.responses)).toFixed(3)} on the main thread`,
    '  main thread, self instructions per request: A, B, A - B (largest differences first)',
  ];
  const names = new Set([...a.functions.keys(), ...b.functions.keys()]);
  const differences = [...names].map((name) => {
    const inA = (a.functions.get(name) ?? 0) / a.responses;
    const inB = (b.functions.get(name) ?? 0) / b.responses;
    return { name, inA, inB, difference: inA - inB };
  });
  differences.sort((x, y) => Math.abs(y.difference) - Math.abs(x.difference));
  const fmt = (n: number): string => Math.round(n).toLocaleString('en').padStart(9);
  for (const d of differences.slice(0, top)) lines.push(`    ${fmt(d.inA)} ${fmt(d.inB)} ${fmt(d.difference)}  ${d.name}`);
  return lines;
}

/** Reads a V8 .cpuprofile (node --cpu-prof) and says where the time went: by package or source file, and by function. */
import { readFile } from 'node:fs/promises';
import type { ThreadsCpuUsed } from './processes.js';

interface ProfileNode {
  readonly id: number;
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number };
  readonly children?: readonly number[];
}

interface CpuProfile {
  readonly nodes: readonly ProfileNode[];
  readonly samples: readonly number[];
  readonly timeDeltas: readonly number[];
}

/** Where a frame belongs: an npm package, a file of ours, a node: module, or V8's own buckets. */
function placeOf(frame: ProfileNode['callFrame']): string {
  const { url, functionName } = frame;
  if (url === '') return functionName.startsWith('(') ? functionName : `(native) ${functionName || 'anonymous'}`;
  const npm = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url);
  if (npm !== null) return npm[1] as string;
  const ours = /\/((?:src|dist|bench)\/.*)$/.exec(url);
  if (ours !== null) return ours[1] as string;
  if (url.startsWith('node:')) return url;
  return url;
}

const frameName = (frame: ProfileNode['callFrame']): string =>
  `${frame.functionName || '(anonymous)'} ${placeOf(frame)}${frame.url === '' ? '' : `:${frame.lineNumber + 1}`}`;

const percent = (part: number, whole: number): string => `${((part / whole) * 100).toFixed(1).padStart(5)}%`;

/** One profile's sampled time (µs): self by place and by function, inclusive by function, and the total. */
interface ProfileTimes {
  readonly selfByPlace: ReadonlyMap<string, number>;
  readonly selfByFunction: ReadonlyMap<string, number>;
  readonly inclusive: ReadonlyMap<string, number>;
  readonly total: number;
}

async function readProfile(file: string): Promise<ProfileTimes> {
  const profile = JSON.parse(await readFile(file, 'utf8')) as CpuProfile;
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parent = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const selfByPlace = new Map<string, number>();
  const selfByFunction = new Map<string, number>();
  const inclusive = new Map<string, number>();
  let total = 0;
  profile.samples.forEach((sample, i) => {
    const delta = profile.timeDeltas[i] ?? 0;
    const node = byId.get(sample);
    if (node === undefined) return;
    total += delta;
    const place = placeOf(node.callFrame);
    selfByPlace.set(place, (selfByPlace.get(place) ?? 0) + delta);
    const name = frameName(node.callFrame);
    selfByFunction.set(name, (selfByFunction.get(name) ?? 0) + delta);
    const seen = new Set<string>();
    for (let id: number | undefined = sample; id !== undefined; id = parent.get(id)) {
      const frame = byId.get(id);
      if (frame === undefined) break;
      const key = frameName(frame.callFrame);
      if (!seen.has(key)) inclusive.set(key, (inclusive.get(key) ?? 0) + delta);
      seen.add(key);
    }
  });
  return { selfByPlace, selfByFunction, inclusive, total };
}

/** A profiled run: its profile and the request rate measured while the profiler ran. */
export interface ProfiledRun {
  readonly label: string;
  readonly file: string;
  readonly requestsPerSecond: number;
}

/** µs of sampled time per request: the profile covers the measured segments, whose requests came at `requestsPerSecond`. */
const perRequest = (time: number, times: ProfileTimes, requestsPerSecond: number): number => time / ((times.total / 1e6) * requestsPerSecond);

const microseconds = (value: number): string => value.toFixed(2).padStart(8);

/**
 * A profile's summary: self time by place and function, inclusive time by function, each as a share and, per request,
 * in µs (shares alone hide that two servers spend the same share of more time).
 */
export async function summariseProfile(run: ProfiledRun, top = 25): Promise<string[]> {
  const times = await readProfile(run.file);
  const ranked = (map: ReadonlyMap<string, number>, filter: (key: string) => boolean = () => true): string[] =>
    [...map]
      .filter(([key]) => filter(key))
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([key, time]) => `  ${percent(time, times.total)} ${microseconds(perRequest(time, times, run.requestsPerSecond))} µs  ${key}`);
  return [
    `profile ${run.file}: ${(times.total / 1e6).toFixed(1)} s sampled at ${Math.round(run.requestsPerSecond)} req/s; ` +
      `${perRequest(times.total, times, run.requestsPerSecond).toFixed(1)} µs of the main thread per request, idle included`,
    'self time by place:',
    ...ranked(times.selfByPlace),
    'self time by function:',
    ...ranked(times.selfByFunction),
    'inclusive time, our code and the libraries on the request path:',
    ...ranked(times.inclusive, (key) => /\s(src\/|dist\/|jose|better-sqlite3|pino|fastify|@fastify|light-my-request|find-my-way|avvio)/.test(key)),
  ];
}

/** Two profiled runs side by side in µs per request: by place, then the functions whose self time differs most. */
export async function compareProfiles(a: ProfiledRun, b: ProfiledRun, top = 25): Promise<string[]> {
  const [timesA, timesB] = await Promise.all([readProfile(a.file), readProfile(b.file)]);
  const table = (mapA: ReadonlyMap<string, number>, mapB: ReadonlyMap<string, number>): string[] =>
    [...new Set([...mapA.keys(), ...mapB.keys()])]
      .map((key) => {
        const costA = perRequest(mapA.get(key) ?? 0, timesA, a.requestsPerSecond);
        const costB = perRequest(mapB.get(key) ?? 0, timesB, b.requestsPerSecond);
        return { key, costA, costB };
      })
      .sort((x, y) => Math.abs(y.costA - y.costB) - Math.abs(x.costA - x.costB))
      .slice(0, top)
      .map(({ key, costA, costB }) => `  ${microseconds(costA)} ${microseconds(costB)} ${microseconds(costA - costB)}  ${key}`);
  const heading = `  ${'A'.padStart(8)} ${'B'.padStart(8)} ${'A - B'.padStart(8)}  (µs per request)`;
  return [
    `A = ${a.label} (${Math.round(a.requestsPerSecond)} req/s), B = ${b.label} (${Math.round(b.requestsPerSecond)} req/s); each profiled alone, one after the other`,
    `main thread per request, idle included: A ${perRequest(timesA.total, timesA, a.requestsPerSecond).toFixed(1)} µs, B ${perRequest(timesB.total, timesB, b.requestsPerSecond).toFixed(1)} µs`,
    'self time by place, largest differences first:',
    heading,
    ...table(timesA.selfByPlace, timesB.selfByPlace),
    'self time by function, largest differences first:',
    heading,
    ...table(timesA.selfByFunction, timesB.selfByFunction),
  ];
}

/** Every thread's CPU per request over `requests` answered in `seconds`, kernel time apart: the V8 profile sees the main thread only. */
export function threadCpuLines(used: readonly ThreadsCpuUsed[], requests: number, seconds: number): string[] {
  const perRequestOf = (cpuSeconds: number): string => ((cpuSeconds * 1e6) / requests).toFixed(1).padStart(7);
  const total = used.reduce((sum, entry) => sum + entry.user + entry.system, 0);
  return [
    `CPU per request by thread (/proc, user + system, ${requests.toFixed(0)} requests in ${seconds.toFixed(1)} s):`,
    ...used
      .filter((entry) => entry.user + entry.system > 0)
      .map((entry) => `  ${perRequestOf(entry.user + entry.system)} µs = ${perRequestOf(entry.user)} user + ${perRequestOf(entry.system)} system  ${entry.name} (${entry.threads} thread${entry.threads === 1 ? '' : 's'})`),
    `  ${perRequestOf(total)} µs in all`,
  ];
}

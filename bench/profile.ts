/** Reads a V8 .cpuprofile (node --cpu-prof) and says where the time went: by package or source file, and by function. */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';

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

/** Summaries of every .cpuprofile in `dir`: self time by place and function, inclusive time by function. */
export async function summariseProfile(dir: string, top = 25): Promise<string[]> {
  const files = (await readdir(dir).catch(() => [] as string[])).filter((file) => file.endsWith('.cpuprofile'));
  const lines: string[] = [];
  for (const file of files) {
    const profile = JSON.parse(await readFile(join(dir, file), 'utf8')) as CpuProfile;
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
    const ranked = (map: Map<string, number>, filter: (key: string) => boolean = () => true): string[] =>
      [...map]
        .filter(([key]) => filter(key))
        .sort((a, b) => b[1] - a[1])
        .slice(0, top)
        .map(([key, time]) => `  ${percent(time, total)}  ${key}`);
    lines.push(`profile ${join(dir, file)}: ${(total / 1e6).toFixed(1)} s sampled`);
    lines.push('self time by place:', ...ranked(selfByPlace));
    lines.push('self time by function:', ...ranked(selfByFunction));
    lines.push(
      'inclusive time, our code and the libraries on the request path:',
      ...ranked(inclusive, (key) => /\s(src\/|dist\/|jose|better-sqlite3|pino|fastify|@fastify|light-my-request|find-my-way|avvio)/.test(key)),
    );
  }
  if (files.length === 0) lines.push(`no .cpuprofile in ${dir}`);
  return lines;
}

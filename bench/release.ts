/**
 * The previous release built beside this checkout, for the "baseline ... v0.2.0" lines: a detached git worktree of
 * its commit in .bench-cache/ (ignored), using this checkout's node_modules when the release's dependencies are a
 * subset of this checkout's (same names, same ranges), compiled once by this checkout's tsc into its own dist/. The
 * build is kept and reused while its marker names the commit; the release's own bench/pinpoint-server.ts runs it.
 */
import { spawn } from 'node:child_process';
import { lstat, mkdir, readFile, readlink, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** v0.2.0, the release the baseline lines compare with. */
export const RELEASE = { name: 'v0.2.0', commit: '634e1de' } as const;

const ROOT = fileURLToPath(new URL('..', import.meta.url));
/** Written into the release's dist/ once its build has finished: the full commit it was built from. */
const BUILD_MARKER = '.bench-build';

export interface PreparedRelease {
  /** The worktree, its dist/, and the benchmark server of that release (speaks this runner's protocol). */
  readonly folder: string;
  readonly dist: string;
  readonly server: string;
  /** The full commit hash. */
  readonly commit: string;
  /** What was done this time (made the worktree, built it, or reused both). */
  readonly done: string;
}

/** Runs `command` in `cwd`; resolves with stdout, rejects with the exit code and stderr. */
function run(command: string, args: readonly string[], cwd: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (chunk: Buffer) => out.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => err.push(chunk));
    child.once('error', reject);
    child.once('exit', (code) => {
      const stdout = Buffer.concat(out).toString('utf8');
      if (code === 0) resolve(stdout);
      else reject(new Error(`${command} ${args.join(' ')} exited with ${code}: ${`${Buffer.concat(err).toString('utf8')}${stdout}`.trim().slice(-2000)}`));
    });
  });
}

const exists = (path: string): Promise<boolean> => lstat(path).then(() => true, () => false);

type Manifest = { dependencies?: Record<string, string>; devDependencies?: Record<string, string> };
const everyDependency = (manifest: Manifest): Record<string, string> => ({ ...manifest.devDependencies, ...manifest.dependencies });

/** The release's dependencies this checkout does not provide as the release asks (name and range), with what is here. */
async function missingDependencies(folder: string): Promise<string[]> {
  const release = everyDependency(JSON.parse(await readFile(join(folder, 'package.json'), 'utf8')) as Manifest);
  const here = everyDependency(JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as Manifest);
  const missing: string[] = [];
  for (const [name, range] of Object.entries(release)) {
    const installed = await exists(join(ROOT, 'node_modules', name, 'package.json'));
    if (here[name] !== range || !installed) missing.push(`${name}@${range} (here: ${installed ? (here[name] ?? 'not declared') : 'not installed'})`);
  }
  return missing;
}

/** The worktree's node_modules: a link to this checkout's, unless it already has one (a link there, or its own install). */
async function linkNodeModules(folder: string): Promise<void> {
  const link = join(folder, 'node_modules');
  const target = await realpath(join(ROOT, 'node_modules'));
  const stats = await lstat(link).catch(() => undefined);
  if (stats === undefined) return symlink(target, link, 'dir');
  if (stats.isSymbolicLink() && (await realpath(link).catch(() => '')) !== target) {
    throw new Error(`${link} links to ${await readlink(link)}, not to this checkout's node_modules (${target}): remove it and run again`);
  }
}

/**
 * The release's worktree and build, made when missing or stale. Rejects, saying why, when it cannot be made here
 * (its dependencies are not this checkout's, git or tsc failed); the caller prints that in place of the lines.
 */
export async function prepareRelease(log: (line: string) => void): Promise<PreparedRelease> {
  const commit = (await run('git', ['rev-parse', '--verify', `${RELEASE.commit}^{commit}`], ROOT)).trim();
  const folder = join(ROOT, '.bench-cache', RELEASE.name);
  const dist = join(folder, 'dist');
  const server = join(folder, 'bench', 'pinpoint-server.ts');
  const steps: string[] = [];
  if (!(await exists(folder))) {
    log(`  ${RELEASE.name}: git worktree add --detach ${folder} ${RELEASE.commit}`);
    await mkdir(join(ROOT, '.bench-cache'), { recursive: true });
    await run('git', ['worktree', 'add', '--detach', folder, commit], ROOT);
    steps.push('made its worktree');
  }
  const head = await run('git', ['rev-parse', 'HEAD'], folder).then((out) => out.trim(), () => '');
  if (head !== commit) {
    throw new Error(`${folder} is not a worktree at ${RELEASE.commit} (HEAD ${head === '' ? 'unreadable' : head.slice(0, 7)}): remove it (git worktree remove --force ${folder}) and run again`);
  }
  const missing = await missingDependencies(folder);
  if (missing.length > 0) throw new Error(`its dependencies are not all this checkout's, so it would need its own npm ci: ${missing.join(', ')}`);
  await linkNodeModules(folder);
  const built = await readFile(join(dist, BUILD_MARKER), 'utf8').then((text) => text.trim(), () => '');
  if (built !== commit) {
    log(`  ${RELEASE.name}: building ${folder} with this checkout's tsc`);
    // A build cut short leaves no marker: start from an empty dist/.
    await rm(dist, { recursive: true, force: true });
    await run(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.json'], folder);
    await writeFile(join(dist, BUILD_MARKER), `${commit}\n`);
    steps.push('built it');
  }
  if (!(await exists(server))) throw new Error(`${server} is missing: the release has no benchmark server`);
  return { folder, dist, server, commit, done: steps.length === 0 ? `reused the build in ${dist}` : `${steps.join(', ')} (${dist})` };
}

/**
 * How tests start the `pinpoint` command. From dist/ when `npm run build` has compiled every source file as it is now
 * (CI builds at `npm ci`): it starts in about a third of the time tsx takes, and tests start it hundreds of times.
 * Otherwise from src/ through tsx, so a test never runs a stale build.
 */
import { readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const SOURCES = join(REPO, 'src');

/** Whether every src/**.ts has its dist/**.js, written after the source last changed. */
function buildIsCurrent(folder = SOURCES): boolean {
  return readdirSync(folder, { withFileTypes: true }).every((entry) => {
    const source = join(folder, entry.name);
    if (entry.isDirectory()) return buildIsCurrent(source);
    if (!entry.name.endsWith('.ts') || entry.name.endsWith('.d.ts')) return true;
    const built = join(REPO, 'dist', relative(SOURCES, source)).replace(/\.ts$/, '.js');
    try {
      return statSync(built).mtimeMs >= statSync(source).mtimeMs;
    } catch {
      return false;
    }
  });
}

const FROM_BUILD = buildIsCurrent();

/** The node arguments that run `pinpoint ...args`. */
export const cliArgs = (...args: readonly string[]): string[] =>
  FROM_BUILD ? [join(REPO, 'dist', 'cli.js'), ...args] : ['--import', 'tsx', join(SOURCES, 'cli.ts'), ...args];

/** The script a worker of `serve --workers` runs, as its command line names it. */
export const WORKER_SCRIPT = FROM_BUILD ? join(REPO, 'dist', 'worker.js') : join(SOURCES, 'worker.ts');

/**
 * The primary's pid file (DESIGN.md §2 `--pid-file`): whether the pid it holds is a running `pinpoint serve`. A pid
 * file outlives a server killed with SIGKILL, and its number may by then belong to another process: `reload` must not
 * send that one SIGHUP, and a second `serve` must not take a live server's file.
 */
import { readFile } from 'node:fs/promises';

/** The pid a pid file holds, or undefined (no file, or not a pid). */
export async function pidIn(pidFile: string): Promise<number | undefined> {
  const text = await readFile(pidFile, 'utf8').catch(() => '');
  return /^\d+\s*$/.test(text) ? Number(text) : undefined;
}

/** Whether a process with `pid` exists (signal 0 checks without sending anything). */
export function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The command's words: `node … cli.js serve …` runs Pinpoint's server (dist/cli.js, src/cli.ts, the `pinpoint` bin). */
export const isServeCommand = (words: readonly string[]): boolean =>
  words.includes('serve') && words.some((word) => /(?:^|\/)(?:cli\.[jt]s|pinpoint)$/.test(word));

/**
 * Whether `pid` is a running `pinpoint serve`. Where /proc cannot be read (not Linux), a running process is taken
 * for one, as before.
 */
export async function isPinpointServer(pid: number): Promise<boolean> {
  if (!isRunning(pid)) return false;
  const commandLine = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => undefined);
  return commandLine === undefined || isServeCommand(commandLine.split('\0'));
}

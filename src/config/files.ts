import { constants } from 'node:fs';
import { open, stat, type FileHandle } from 'node:fs/promises';

/** DESIGN.md §7: a file named by the config for a secret or keys holds at most this much. */
const MAX_CONFIG_FILE_BYTES = 64 * 1024;
const tooLarge = (path: string): SmallFileResult => ({ error: `is larger than ${MAX_CONFIG_FILE_BYTES / 1024} KiB (${path}); it should hold one secret or key set` });

/** What reading a secret file gave: the secret, or why not; plus a warning when others may read it. */
export type SecretFileResult =
  | { readonly secret: string; readonly warning?: string }
  | { readonly error: string; readonly warning?: undefined };

/** What reading a small config-named file gave: its text and mode bits, or why not. */
export type SmallFileResult = { readonly text: string; readonly mode: number } | { readonly error: string };

/**
 * Reads a file the config names for a secret or keys (secret_file, token_file, password_file, a future jwks_file):
 * a regular file of at most 64 KiB (DESIGN.md §7). O_NONBLOCK so opening a FIFO without a writer cannot hang, and
 * the open descriptor is what fstat judges, so the file checked is the file read; a device is refused, never read.
 */
export async function readSmallFile(path: string): Promise<SmallFileResult> {
  let handle: FileHandle;
  try {
    // O_NONBLOCK and O_NOCTTY are 0 where the platform has none; O_NONBLOCK has no effect on regular files.
    handle = await open(path, constants.O_RDONLY | (constants.O_NONBLOCK ?? 0) | (constants.O_NOCTTY ?? 0));
  } catch (error) {
    return { error: describeFsError(error, path) };
  }
  try {
    const info = await handle.stat();
    if (info.isDirectory()) return { error: `is a directory, not a file (${path})` };
    if (!info.isFile()) return { error: `is not a regular file (${path}); name a file holding the value, not a pipe, socket or device` };
    if (info.size > MAX_CONFIG_FILE_BYTES) return tooLarge(path);
    // Never more than the limit plus one byte, even if the file grew since fstat.
    const buffer = Buffer.alloc(MAX_CONFIG_FILE_BYTES + 1);
    let length = 0;
    while (length < buffer.length) {
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, length);
      if (bytesRead === 0) break;
      length += bytesRead;
    }
    if (length > MAX_CONFIG_FILE_BYTES) return tooLarge(path);
    return { text: buffer.toString('utf8', 0, length), mode: info.mode };
  } catch (error) {
    return { error: describeFsError(error, path) };
  } finally {
    await handle.close();
  }
}

/** Reads a secret (one trailing newline ignored); empty, unreadable, not a regular file or over 64 KiB is an error, DESIGN.md §3, §7. */
export async function readSecretFile(path: string): Promise<SecretFileResult> {
  const read = await readSmallFile(path);
  if ('error' in read) return { error: read.error };
  const secret = read.text.replace(/\r?\n$/, '');
  if (secret.length === 0) return { error: `is empty (${path}); put the secret in it` };
  const warning = exposureOf(read.mode, path);
  return warning ? { secret, warning } : { secret };
}

/** Undefined when the file can be opened for reading, else why not. */
export async function checkReadableFile(path: string): Promise<string | undefined> {
  try {
    const info = await stat(path);
    if (!info.isFile()) return `is not a regular file (${path})`;
    await (await open(path, 'r')).close();
    return undefined;
  } catch (error) {
    return describeFsError(error, path);
  }
}

/** A warning when group or others have any access to a file that holds a secret. */
export async function exposureWarning(path: string): Promise<string | undefined> {
  try {
    return exposureOf((await stat(path)).mode, path);
  } catch {
    return undefined;
  }
}

function exposureOf(fileMode: number, path: string): string | undefined {
  const mode = fileMode & 0o777;
  if ((mode & 0o077) === 0) return undefined;
  return `is accessible by group or others (mode ${mode.toString(8).padStart(4, '0')}); run chmod 600 ${path}`;
}

function describeFsError(error: unknown, path: string): string {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  if (code === 'ENOENT') return `does not exist (${path})`;
  if (code === 'EACCES' || code === 'EPERM') return `cannot be read: permission denied (${path})`;
  if (code === 'EISDIR') return `is a directory, not a file (${path})`;
  return `cannot be read (${path}): ${error instanceof Error ? error.message : String(error)}`;
}

/** Files read at once while a config loads: a config of thousands of clients must not hit the open-files limit (EMFILE). */
export const FILES_READ_AT_ONCE = 16;

/** `work` over `items`, at most `limit` running at once; the results in the items' order. */
export async function mapAtMost<T, R>(items: readonly T[], limit: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const index = next;
      next += 1;
      results[index] = await work(items[index] as T);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}

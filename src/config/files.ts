import { open, readFile, stat } from 'node:fs/promises';

/** What reading a secret file gave: the secret, or why not; plus a warning when others may read it. */
export type SecretFileResult =
  | { readonly secret: string; readonly warning?: string }
  | { readonly error: string; readonly warning?: undefined };

/** Reads a secret (one trailing newline ignored); empty or unreadable is an error, DESIGN.md §3. */
export async function readSecretFile(path: string): Promise<SecretFileResult> {
  let content: string;
  try {
    content = await readFile(path, 'utf8');
  } catch (error) {
    return { error: describeFsError(error, path) };
  }
  const secret = content.replace(/\r?\n$/, '');
  if (secret.length === 0) return { error: `is empty (${path}); put the secret in it` };
  const warning = await exposureWarning(path);
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
    const mode = (await stat(path)).mode & 0o777;
    if ((mode & 0o077) === 0) return undefined;
    return `is accessible by group or others (mode ${mode.toString(8).padStart(4, '0')}); run chmod 600 ${path}`;
  } catch {
    return undefined;
  }
}

function describeFsError(error: unknown, path: string): string {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  if (code === 'ENOENT') return `does not exist (${path})`;
  if (code === 'EACCES' || code === 'EPERM') return `cannot be read: permission denied (${path})`;
  if (code === 'EISDIR') return `is a directory, not a file (${path})`;
  return `cannot be read (${path}): ${error instanceof Error ? error.message : String(error)}`;
}

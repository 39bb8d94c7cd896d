/**
 * Loaded with `--import` (after tsx) into one benchmark server only: a module-resolution hook that hands
 * bench/legacy-jwt.ts to every importer of Pinpoint's dist/crypto/jwt.js, so that server runs the same code
 * with the signing it had before jose. Node loads this file twice: in the main thread, where it registers
 * itself, and in the loader thread, where its `resolve` runs.
 */
import { register, type ResolveHookContext } from 'node:module';
import { isMainThread } from 'node:worker_threads';

const JOSE_SIGNING = new URL('../dist/crypto/jwt.js', import.meta.url).href;
const LEGACY_SIGNING = new URL('./legacy-jwt.ts', import.meta.url).href;

type NextResolve = (specifier: string, context?: ResolveHookContext) => Promise<{ url: string; format?: string | null }>;

const withoutQuery = (url: string | undefined): string | undefined => url?.replace(/[?#].*$/, '');

export async function resolve(specifier: string, context: ResolveHookContext, nextResolve: NextResolve): Promise<{ url: string; format?: string | null }> {
  const resolved = await nextResolve(specifier, context);
  // legacy-jwt.ts itself imports the jose module for verification.
  if (withoutQuery(resolved.url) !== JOSE_SIGNING || withoutQuery(context.parentURL) === LEGACY_SIGNING) return resolved;
  return nextResolve(LEGACY_SIGNING, context);
}

if (isMainThread) register(import.meta.url);

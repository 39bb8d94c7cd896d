/** The one parameter parser: form bodies and query strings become name -> every value sent. */
import { OAuthError } from '../policy/oauth-error.js';

export type Params = ReadonlyMap<string, readonly string[]>;

/** DESIGN.md §7: a NUL byte in any parameter is invalid_request on every store (PostgreSQL text cannot hold one). */
const nulByte = (): OAuthError => new OAuthError('invalid_request', 'a parameter contains a NUL byte');

/** application/x-www-form-urlencoded (WHATWG), keeping repeats so they can be refused or collected; throws on a NUL byte. */
export function parseParams(text: string): Params {
  const params = new Map<string, string[]>();
  // Only a text holding %00 or a raw NUL can decode to one, so most requests pay one scan.
  const mayHoldNul = text.includes('%00') || text.includes('\0');
  for (const [name, value] of new URLSearchParams(text)) {
    if (mayHoldNul && (name.includes('\0') || value.includes('\0'))) throw nulByte();
    const values = params.get(name);
    if (values === undefined) params.set(name, [value]);
    else values.push(value);
  }
  return params;
}

export const EMPTY_PARAMS: Params = new Map();

/** The query string of a raw request URL ("" when none). */
export function queryOf(rawUrl: string): string {
  const at = rawUrl.indexOf('?');
  return at === -1 ? '' : rawUrl.slice(at + 1);
}

/** The first parameter (other than `except`) sent more than once, if any. */
export function repeatedParameter(params: Params, except: readonly string[] = []): string | undefined {
  for (const [name, values] of params) {
    if (values.length > 1 && !except.includes(name)) return name;
  }
  return undefined;
}

/** The one value of a parameter; empty values count as absent (RFC 6749 §3.1). */
export function single(params: Params, name: string): string | undefined {
  const value = params.get(name)?.[0];
  return value === undefined || value === '' ? undefined : value;
}

export function required(params: Params, name: string): string {
  const value = single(params, name);
  if (value === undefined) throw new OAuthError('invalid_request', `${name} is required`);
  return value;
}

/** Every value of a repeatable parameter (empty values included: `resource=` is a value, DESIGN.md §5). */
export function all(params: Params, name: string): readonly string[] {
  return params.get(name) ?? [];
}

/** DESIGN.md §4 limits on lengths and counts. */
export const LIMITS = { valueLength: 2048, resourceCount: 20, bodyBytes: 64 * 1024 } as const;

export function checkLimits(params: Params): OAuthError | undefined {
  for (const name of ['state', 'nonce']) {
    const value = params.get(name)?.[0];
    if (value !== undefined && value.length > LIMITS.valueLength) {
      return new OAuthError('invalid_request', `${name} is longer than ${LIMITS.valueLength} characters`);
    }
  }
  const resources = all(params, 'resource');
  if (resources.length > LIMITS.resourceCount) {
    return new OAuthError('invalid_request', `more than ${LIMITS.resourceCount} resource values`);
  }
  if (resources.some((resource) => resource.length > LIMITS.valueLength)) {
    return new OAuthError('invalid_request', `a resource is longer than ${LIMITS.valueLength} characters`);
  }
  return undefined;
}

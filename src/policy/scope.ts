/** Scope decisions (RFC 6749 §3.3), pure like the resource policy. */
import { OAuthError } from './oauth-error.js';
import { allow, refuse, type Decision } from './decision.js';

/** A whole `scope` parameter: scope tokens (RFC 6749 §3.3 NQCHAR) separated by spaces, checked in one pass. */
const SCOPE_PARAMETER = /^[\x20\x21\x23-\x5B\x5D-\x7E]*$/;

/** Splits a `scope` parameter into its values, repeats removed, order kept; undefined when malformed. */
export function parseScope(raw: string | undefined): string[] | undefined {
  if (raw === undefined) return [];
  if (!SCOPE_PARAMETER.test(raw)) return undefined;
  const values = raw.split(' ').filter((value) => value.length > 0);
  // One value (the usual request) has no repeat to remove: no Set on the /token path.
  return values.length < 2 ? values : [...new Set(values)];
}

/** A client may ask only the scopes its config lists. */
export function decideRequestedScope(requested: readonly string[], allowed: readonly string[]): Decision<string[]> {
  const outside = requested.find((value) => !allowed.includes(value));
  if (outside !== undefined) {
    return refuse(new OAuthError('invalid_scope', `scope "${outside}" is not one this client may ask`));
  }
  return allow([...requested]);
}

/**
 * Refresh (DESIGN.md §5 "scope"): a sent scope within the grant's is accepted and carried by the
 * access token; beyond it is invalid_scope; absent means the whole grant's scope.
 */
export function decideRefreshScope(requested: readonly string[] | undefined, granted: readonly string[]): Decision<string[]> {
  if (requested === undefined || requested.length === 0) return allow([...granted]);
  const outside = requested.find((value) => !granted.includes(value));
  if (outside !== undefined) {
    return refuse(new OAuthError('invalid_scope', `scope "${outside}" was not granted`));
  }
  return allow([...requested]);
}

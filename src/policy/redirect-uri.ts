/**
 * Redirect URI matching (RFC 6749 §3.1.2.3, RFC 8252 §7.3, DESIGN.md §3): exact, character for character, except
 * that a loopback redirect URI may come on any port, because native apps and MCP hosts pick a free port per run.
 */

/** How a client's loopback redirect URIs match on ports. */
export type LoopbackPorts =
  /** Configured clients: a registered loopback URI without a port matches that URI on any port. */
  | 'when-registered-without-port'
  /** Dynamic clients: a registered loopback URI matches on any port, registered with a port or not. */
  | 'always';

// The loopback hosts of RFC 8252 §7.3 (and localhost, which DESIGN.md §3 names too), written as-is: no normalisation.
const LOOPBACK = /^http:\/\/(127\.0\.0\.1|\[::1\]|localhost)(:\d{1,5})?([/?].*)?$/;

interface LoopbackParts {
  readonly host: string;
  readonly port: string | undefined;
  /** Path and query exactly as written ("" when none). */
  readonly rest: string;
}

function loopbackParts(uri: string): LoopbackParts | undefined {
  const match = LOOPBACK.exec(uri);
  if (match === null) return undefined;
  return { host: match[1] as string, port: match[2], rest: match[3] ?? '' };
}

/** True when `presented` is one of `registered`, or the same loopback URI on another port where `ports` allows it. */
export function redirectUriMatches(registered: readonly string[], presented: string, ports: LoopbackPorts): boolean {
  if (registered.includes(presented)) return true;
  const asked = loopbackParts(presented);
  if (asked === undefined) return false;
  return registered.some((uri) => {
    const known = loopbackParts(uri);
    if (known === undefined || known.host !== asked.host || known.rest !== asked.rest) return false;
    return ports === 'always' || known.port === undefined;
  });
}

/** True for a loopback http redirect URI (RFC 8252 §7.3). */
export const isLoopbackRedirect = (uri: string): boolean => LOOPBACK.test(uri);

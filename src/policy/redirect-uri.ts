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

/** True when a browser can be sent to `uri`: it parses, and a port it names is 1–65535 (DESIGN.md §7; port 0 reaches nothing). */
export function isUsableRedirectUri(uri: string): boolean {
  return URL.canParse(uri) && new URL(uri).port !== '0';
}

/** True when `presented` is usable and one of `registered`, or the same loopback URI on another port where `ports` allows it. */
export function redirectUriMatches(registered: readonly string[], presented: string, ports: LoopbackPorts): boolean {
  // A loopback URI registered without a port matches any port text, 99999 and 0 included: those are refused here.
  if (!isUsableRedirectUri(presented)) return false;
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

/** The origins of a dynamic client's https redirect URIs: where its pages may read the client endpoints' answers (DESIGN.md §9). */
export const httpsRedirectOrigins = (redirectUris: readonly string[]): string[] =>
  redirectUris.filter((uri) => uri.startsWith('https://')).map((uri) => new URL(uri).origin);

/** Schemes that run code or read local data: never a redirect URI (RFC 8252 §8.4, DESIGN.md §9). */
const NEVER_SCHEMES = new Set(['javascript:', 'data:', 'file:', 'vbscript:', 'blob:', 'about:', 'filesystem:', 'ws:', 'wss:', 'ftp:']);

/**
 * The operating system's and browser's own handlers, not a native app's (RFC 8252 §7.1 names an app's scheme after a
 * domain it controls): a stranger's registration must not make this server's origin launch them. Windows' `ms-*`
 * family (ms-msdt was CVE-2022-30190, ms-officecmd opens Office on a remote file), its shell, search and help
 * handlers, remote file shares (an NTLM hash leaks to a hostile share), Android intents and the browser's own pages.
 */
const SYSTEM_HANDLER_SCHEMES = new Set([
  'search-ms:', 'search:', 'shell:', 'hcp:', 'its:', 'mk:', 'res:', 'jar:', 'view-source:', 'intent:',
  'smb:', 'nfs:', 'afp:', 'ldap:', 'ldaps:', 'telnet:', 'gopher:',
  'chrome:', 'chrome-extension:', 'edge:', 'microsoft-edge:', 'moz-extension:', 'opera:', 'brave:',
]);

/** Why a scheme can never be a dynamic client's redirect URI's, or undefined. */
function refusedScheme(protocol: string): string | undefined {
  if (NEVER_SCHEMES.has(protocol)) return `must not use the ${protocol} scheme`;
  if (SYSTEM_HANDLER_SCHEMES.has(protocol) || protocol.startsWith('ms-')) return `must not use the ${protocol} scheme (a handler of the operating system or browser, not of an app)`;
  return undefined;
}

// RFC 3986 §3.1: an absolute URI starts with a scheme.
const HAS_SCHEME = /^[A-Za-z][A-Za-z0-9+.-]*:/;
// RFC 3986 §2: the characters a URI is written with. A browser's URL parser drops tabs, newlines and outer spaces and
// reads "\" as "/", so a URI holding any other character would send the browser somewhere else than the string says.
const URI_CHARACTERS = /^[A-Za-z0-9\-._~:/?#[\]@!$&'()*+,;=%]*$/;
// "https:///cb": http(s) with an empty host, which the URL parser repairs into another host ("https://cb/"); a
// private-use scheme may have an empty one ("com.example.app:///cb").
const EMPTY_AUTHORITY = /^https?:\/\/(?:[/?#]|$)/i;

/**
 * Why `uri` cannot be a dynamic client's redirect URI (registration, metadata documents; DESIGN.md §9), or undefined:
 * https; plain http only to a loopback host; a native app's private-use scheme (RFC 8252 §7.1) unless the client
 * said it is a `web` application, whose redirect URIs must all be https.
 */
export function dynamicRedirectUriProblem(uri: string, applicationType?: 'native' | 'web'): string | undefined {
  if (!HAS_SCHEME.test(uri) || !URL.canParse(uri)) return 'is not an absolute URI';
  if (uri.includes('#')) return 'must not contain a fragment';
  const url = new URL(uri);
  const scheme = refusedScheme(url.protocol);
  if (scheme !== undefined) return scheme;
  if (!URI_CHARACTERS.test(uri)) return 'holds a character a URI cannot (RFC 3986 §2: spaces, control characters, "\\" and the like)';
  if (EMPTY_AUTHORITY.test(uri)) return 'has an empty host';
  if (url.port === '0') return 'must not name port 0 (a port is 1 to 65535)';
  if (url.username !== '' || url.password !== '') return 'must not contain a user name or password';
  if (url.protocol === 'https:') return undefined;
  if (applicationType === 'web') return "must be https: a web client's redirect URIs are";
  if (url.protocol === 'http:' && !isLoopbackRedirect(uri)) return 'may use plain http only for a loopback host (127.0.0.1, [::1] or localhost)';
  return undefined;
}

/** Minimal cookie reading and writing (RFC 6265) for the session and CSRF cookies. */

/** Where the server's cookies live and whether they need TLS (decided once from the issuer). */
export interface CookieSettings {
  readonly path: string;
  readonly secure: boolean;
}

export function readCookie(header: string | undefined, name: string): string | undefined {
  if (header === undefined) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq === -1) continue;
    if (part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

export interface CookieOptions extends CookieSettings {
  /** Seconds; 0 deletes the cookie; absent makes a browser-session cookie. */
  readonly maxAge?: number;
}

export function serializeCookie(name: string, value: string, options: CookieOptions): string {
  const parts = [`${name}=${value}`, `Path=${options.path}`, 'HttpOnly', 'SameSite=Lax'];
  if (options.maxAge !== undefined) parts.push(`Max-Age=${options.maxAge}`);
  if (options.secure) parts.push('Secure');
  return parts.join('; ');
}

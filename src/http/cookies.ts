/** Minimal cookie reading and writing (RFC 6265) for the session and CSRF cookies. */

/** Where the server's cookies live and whether they need TLS (decided once from the issuer). */
export interface CookieSettings {
  readonly path: string;
  readonly secure: boolean;
  /** `__Host-` when the issuer is https with no path (RFC 6265bis §4.1.3.2: Secure, Path=/, no Domain), else none. */
  readonly prefix: '' | '__Host-';
}

/** The settings for an issuer: Secure unless plain http (loopback only), scoped to the issuer's path. */
export function cookieSettingsFor(issuer: string, basePath: string): CookieSettings {
  const secure = issuer.startsWith('https:');
  return { path: basePath === '' ? '/' : basePath, secure, prefix: secure && basePath === '' ? '__Host-' : '' };
}

/** A cookie's name as sent, with the prefix the settings call for. */
export const cookieName = (settings: CookieSettings, name: string): string => `${settings.prefix}${name}`;

/** The value of the server's cookie `name` (prefixed as `settings` say) in a Cookie header. */
export function readCookie(header: string | undefined, settings: CookieSettings, name: string): string | undefined {
  return readRawCookie(header, cookieName(settings, name));
}

function readRawCookie(header: string | undefined, name: string): string | undefined {
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
  const parts = [`${cookieName(options, name)}=${value}`, `Path=${options.path}`, 'HttpOnly', 'SameSite=Lax'];
  if (options.maxAge !== undefined) parts.push(`Max-Age=${options.maxAge}`);
  if (options.secure) parts.push('Secure');
  return parts.join('; ');
}

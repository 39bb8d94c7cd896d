/**
 * Whether what a person allowed a dynamic client covers a request (DESIGN.md §8: asked again only when it asks more
 * or sends the answer to another redirect origin).
 */
import { isLoopbackRedirect } from './redirect-uri.js';

export interface AllowedAccess {
  readonly scope: readonly string[];
  readonly resources: readonly string[];
  /** The whole audience was allowed (a request naming no resource asks for it). */
  readonly wholeAudience: boolean;
  /** Where the answer went when it was given (redirectOriginOf); a consent remembered without one counts for none. */
  readonly redirectOrigin?: string;
  readonly grantedAt: number;
}

export interface AskedAccess {
  readonly scope: readonly string[];
  /** Empty: the whole audience (DESIGN.md §8). */
  readonly resources: readonly string[];
  /** redirectOriginOf the request's redirect URI: the code goes there. */
  readonly redirectOrigin: string;
  /**
   * prompt=consent: the page is shown even when consent is remembered, so only a consent given after `askedAt` counts;
   * with no `askedAt` the request is being made now, and none does (a consent of the same millisecond came before it).
   */
  readonly promptConsent: boolean;
  readonly askedAt?: number;
}

/**
 * The redirect origin a consent is remembered for (DESIGN.md §8): scheme, host and port, except that a loopback
 * redirect URI counts on any port (RFC 8252 §7.3: a native app or MCP host takes a free port per run). A URI that
 * does not parse is its own origin, so it matches nothing else.
 */
export function redirectOriginOf(redirectUri: string): string {
  if (!URL.canParse(redirectUri)) return redirectUri;
  const url = new URL(redirectUri);
  return `${url.protocol}//${isLoopbackRedirect(redirectUri) ? url.hostname : url.host}`;
}

export function consentCovers(allowed: AllowedAccess | undefined, asked: AskedAccess): boolean {
  if (allowed === undefined) return false;
  // A consent was given for where that code went: one for another origin (or none, before origins were kept) does not count.
  if (allowed.redirectOrigin !== asked.redirectOrigin) return false;
  if (asked.promptConsent && (asked.askedAt === undefined || allowed.grantedAt < asked.askedAt)) return false;
  if (!asked.scope.every((value) => allowed.scope.includes(value))) return false;
  if (allowed.wholeAudience) return true;
  return asked.resources.length > 0 && asked.resources.every((resource) => allowed.resources.includes(resource));
}

/** What is remembered after a person allows `asked`: the union with what they allowed before for the same origin. */
export function widenConsent(allowed: AllowedAccess | undefined, asked: AskedAccess, now: number): Required<AllowedAccess> {
  const before = allowed?.redirectOrigin === asked.redirectOrigin ? allowed : undefined;
  const scope = [...new Set([...(before?.scope ?? []), ...asked.scope])];
  const wholeAudience = (before?.wholeAudience ?? false) || asked.resources.length === 0;
  const resources = wholeAudience ? [] : [...new Set([...(before?.resources ?? []), ...asked.resources])];
  return { scope, resources, wholeAudience, redirectOrigin: asked.redirectOrigin, grantedAt: now };
}

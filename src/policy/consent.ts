/** Whether what a person allowed a dynamic client covers a request (DESIGN.md §8: asked again only when it asks more). */

export interface AllowedAccess {
  readonly scope: readonly string[];
  readonly resources: readonly string[];
  /** The whole audience was allowed (a request naming no resource asks for it). */
  readonly wholeAudience: boolean;
  readonly grantedAt: number;
}

export interface AskedAccess {
  readonly scope: readonly string[];
  /** Empty: the whole audience (DESIGN.md §8). */
  readonly resources: readonly string[];
  /** prompt=consent: the page is shown even when consent is remembered, so only a consent given after `askedAt` counts. */
  readonly promptConsent: boolean;
  readonly askedAt: number;
}

export function consentCovers(allowed: AllowedAccess | undefined, asked: AskedAccess): boolean {
  if (allowed === undefined) return false;
  if (asked.promptConsent && allowed.grantedAt < asked.askedAt) return false;
  if (!asked.scope.every((value) => allowed.scope.includes(value))) return false;
  if (allowed.wholeAudience) return true;
  return asked.resources.length > 0 && asked.resources.every((resource) => allowed.resources.includes(resource));
}

/** What is remembered after a person allows `asked`: the union with what they allowed before. */
export function widenConsent(allowed: AllowedAccess | undefined, asked: AskedAccess, now: number): AllowedAccess {
  const scope = [...new Set([...(allowed?.scope ?? []), ...asked.scope])];
  const wholeAudience = (allowed?.wholeAudience ?? false) || asked.resources.length === 0;
  const resources = wholeAudience ? [] : [...new Set([...(allowed?.resources ?? []), ...asked.resources])];
  return { scope, resources, wholeAudience, grantedAt: now };
}

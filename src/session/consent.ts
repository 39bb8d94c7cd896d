/**
 * Consent records (DESIGN.md §8): what a person allowed a dynamic client, remembered per redirect origin until a
 * request asks more. Reading and remembering them over the ConsentStore; the rules themselves are policy/consent.ts.
 */
import { consentCovers, redirectOriginOf, widenConsent, type AllowedAccess } from '../policy/consent.js';
import type { ConsentStore, PendingAuthorization } from '../store/types.js';

/** A person's answer, or question, about one authorization request of one client. */
export interface ConsentQuestion {
  readonly subject: string;
  readonly clientId: string;
  readonly authorization: PendingAuthorization;
  /** When the request was made: with prompt=consent only a consent given after it counts; absent, the request is made now. */
  readonly askedAt?: number;
}

/** True when the person must be asked: nothing remembered for this redirect origin covers the request (only dynamic clients ask; the caller knows which). */
export async function consentDue(consents: ConsentStore, question: ConsentQuestion): Promise<boolean> {
  const { subject, clientId, authorization, askedAt } = question;
  const redirectOrigin = redirectOriginOf(authorization.redirectUri);
  const allowed = await consents.findConsent(subject, clientId, redirectOrigin);
  const asked = { scope: authorization.scope, resources: authorization.resources, redirectOrigin, promptConsent: authorization.prompt === 'consent', askedAt };
  return !consentCovers(allowed, asked);
}

/** Remembers that the person allowed the request, together with what they allowed before for the same redirect origin; what is allowed now. */
export async function rememberConsent(consents: ConsentStore, answer: ConsentQuestion, now: number): Promise<Required<AllowedAccess>> {
  const { subject, clientId, authorization, askedAt } = answer;
  const redirectOrigin = redirectOriginOf(authorization.redirectUri);
  const before = await consents.findConsent(subject, clientId, redirectOrigin);
  const asked = { scope: authorization.scope, resources: authorization.resources, redirectOrigin, promptConsent: false, askedAt };
  const allowed = widenConsent(before, asked, now);
  await consents.saveConsent({ subject, clientId, ...allowed });
  return allowed;
}

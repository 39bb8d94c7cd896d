/** Who an upstream says the person is: its claims, the email it vouches for, and the subject Pinpoint derives. Pure. */
import type { FederationRecord } from '../config/types.js';
import type { SubjectClaims } from '../store/types.js';

type Claims = Readonly<Record<string, unknown>>;

/** Whether userinfo may add what the ID token lacks: an email or name the scopes ask, or the claim the subject is made of. */
export function wantsUserinfo(upstream: Pick<FederationRecord, 'scopes' | 'subjectClaim'>, idToken: Claims): boolean {
  return (
    (idToken.email === undefined && upstream.scopes.includes('email')) ||
    (idToken.name === undefined && upstream.scopes.includes('profile')) ||
    (upstream.subjectClaim !== undefined && idToken[upstream.subjectClaim] === undefined)
  );
}

/**
 * The ID token's claims completed from userinfo. `email` and `email_verified` come as a pair from one source (the ID
 * token when it has an email, else userinfo): one source's email_verified never vouches for the other's address.
 */
export function mergedClaims(idToken: Claims, userinfo: Claims | undefined): Record<string, unknown> {
  const { email: _idEmail, email_verified: _idVerified, ...idRest } = idToken;
  const { email: _infoEmail, email_verified: _infoVerified, ...infoRest } = userinfo ?? {};
  const source = idToken.email !== undefined || userinfo === undefined ? idToken : userinfo;
  return {
    ...infoRest,
    ...idRest,
    ...(source.email !== undefined && { email: source.email }),
    ...(source.email_verified !== undefined && { email_verified: source.email_verified }),
  };
}

/** DESIGN.md §7: an address is passed on only when the upstream says it verified it. */
export function verifiedEmailOf(claims: Claims): string | undefined {
  return typeof claims.email === 'string' && claims.email !== '' && claims.email_verified === true ? claims.email : undefined;
}

export function identityOf(claims: Claims): SubjectClaims {
  const email = verifiedEmailOf(claims);
  const name = typeof claims.name === 'string' ? claims.name : undefined;
  return { ...(email !== undefined && { email }), ...(name !== undefined && { name }) };
}

/**
 * The value of the subject (`upstream:value`): `sub` by default, else the configured claim. An email is a subject only
 * when the upstream verified it (OIDC Core §5.7): else anyone holding an unverified copy of an address becomes its owner.
 */
export function subjectValueOf(
  upstream: Pick<FederationRecord, 'subjectClaim'>,
  sub: string,
  claims: Claims,
): { readonly ok: true; readonly value: string } | { readonly ok: false; readonly reason: 'missing' | 'unverified email' } {
  if (upstream.subjectClaim === undefined) return sub === '' ? { ok: false, reason: 'missing' } : { ok: true, value: sub };
  const value = claims[upstream.subjectClaim];
  if (typeof value !== 'string' || value === '') return { ok: false, reason: 'missing' };
  if (upstream.subjectClaim === 'email' && verifiedEmailOf(claims) === undefined) return { ok: false, reason: 'unverified email' };
  return { ok: true, value };
}

/** The claims of access tokens (RFC 9068 §2.2) and ID tokens (OIDC Core §2): values only, signing is crypto/jwt.ts. */
import { sha256 } from '../crypto/digest.js';
import { randomText } from '../crypto/random.js';
import type { ActClaim } from '../policy/act-chain.js';
import type { Audience } from '../policy/resource.js';
import type { SubjectClaims } from '../store/types.js';

/** Seconds since the epoch, as JWT NumericDate wants. */
export const epochSeconds = (ms: number): number => Math.floor(ms / 1000);

export interface AccessTokenInput {
  readonly issuer: string;
  readonly subject: string;
  readonly clientId: string;
  readonly audience: Audience;
  readonly scope: readonly string[];
  /** RFC 9449 §6.1: the JWK thumbprint of the DPoP key the token is bound to (`cnf.jkt`). */
  readonly confirmation?: string;
  readonly lifetimeSeconds: number;
  readonly authTime?: number;
  /** The grant the token belongs to; none for client_credentials. */
  readonly grantId?: string;
  /** Token exchange (RFC 8693 §4.1): who acts for the subject, built by policy/act-chain.ts. */
  readonly act?: ActClaim;
  /** Epoch seconds the token may not outlive (DESIGN.md §12: an exchanged token ends with its subject token). */
  readonly notAfter?: number;
}

/** A token's jti names its grant (`<grant id>.<random>`), so /introspect checks the grant with one lookup by key. */
export const JTI_SEPARATOR = '.';

/** The grant an access token's jti names, or undefined for a token without one (client_credentials). */
export function grantIdOfJti(jti: string): string | undefined {
  const separator = jti.indexOf(JTI_SEPARATOR);
  return separator <= 0 ? undefined : jti.slice(0, separator);
}

export function accessTokenClaims(input: AccessTokenInput, now: number): Record<string, unknown> {
  const iat = epochSeconds(now);
  const claims: Record<string, unknown> = {
    iss: input.issuer,
    sub: input.subject,
    aud: input.audience,
    exp: input.notAfter === undefined ? iat + input.lifetimeSeconds : Math.min(iat + input.lifetimeSeconds, input.notAfter),
    iat,
    jti: input.grantId === undefined ? randomText(16) : `${input.grantId}${JTI_SEPARATOR}${randomText(16)}`,
    client_id: input.clientId,
    scope: input.scope.join(' '),
    ...(input.confirmation !== undefined && { cnf: { jkt: input.confirmation } }),
  };
  if (input.authTime !== undefined) claims.auth_time = epochSeconds(input.authTime);
  if (input.act !== undefined) claims.act = input.act;
  return claims;
}

/** OIDC Core §3.1.3.6: left half of SHA-256 of the access token, base64url. */
export function accessTokenHash(accessToken: string): string {
  const digest = sha256(accessToken);
  return digest.subarray(0, digest.length / 2).toString('base64url');
}

/** The profile claims a scope releases (OIDC Core §5.4). */
export function releasedClaims(scope: readonly string[], claims: SubjectClaims): Record<string, string> {
  const released: Record<string, string> = {};
  if (scope.includes('email') && claims.email !== undefined) released.email = claims.email;
  if (scope.includes('profile') && claims.name !== undefined) released.name = claims.name;
  return released;
}

export interface IdTokenInput {
  readonly issuer: string;
  readonly subject: string;
  readonly clientId: string;
  readonly scope: readonly string[];
  readonly claims: SubjectClaims;
  readonly authTime: number;
  readonly nonce?: string;
  readonly accessToken: string;
  readonly lifetimeSeconds: number;
}

export function idTokenClaims(input: IdTokenInput, now: number): Record<string, unknown> {
  const iat = epochSeconds(now);
  const claims: Record<string, unknown> = {
    iss: input.issuer,
    sub: input.subject,
    aud: input.clientId,
    exp: iat + input.lifetimeSeconds,
    iat,
    auth_time: epochSeconds(input.authTime),
    at_hash: accessTokenHash(input.accessToken),
    ...releasedClaims(input.scope, input.claims),
  };
  if (input.nonce !== undefined) claims.nonce = input.nonce;
  return claims;
}

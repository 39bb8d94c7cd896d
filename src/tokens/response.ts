/** Building the token response (RFC 6749 §5.1, DESIGN.md §4) once a grant handler has decided. */
import type { ClientRecord } from '../config/types.js';
import type { SigningKeys } from '../crypto/keys.js';
import type { ActClaim } from '../policy/act-chain.js';
import type { Audience } from '../policy/resource.js';
import type { SubjectClaims } from '../store/types.js';
import { signJwt } from '../crypto/jwt.js';
import { accessTokenClaims, idTokenClaims } from './claims.js';

export interface TokenResponse {
  readonly access_token: string;
  /** RFC 9449 §5: DPoP for a token bound to the request's proof key. */
  readonly token_type: 'Bearer' | 'DPoP';
  readonly expires_in: number;
  readonly scope: string;
  readonly refresh_token?: string;
  readonly id_token?: string;
  /** RFC 8693 §2.2.1: what a token exchange issued. */
  readonly issued_token_type?: string;
}

/** The answer and what the audit line says of it (DESIGN.md §10: client, grant type, aud, scope, grant id). */
export interface Issued {
  readonly response: TokenResponse;
  readonly audience: Audience;
  readonly grantId?: string;
  /** More for the audit line, e.g. token exchange's subject token (DESIGN.md §12). */
  readonly audit?: Readonly<Record<string, unknown>>;
}

export interface IssueInput {
  readonly client: ClientRecord;
  /** The grant the tokens belong to; none for client_credentials. */
  readonly grantId?: string;
  readonly subject: string;
  readonly audience: Audience;
  readonly scope: readonly string[];
  /** RFC 9449: the DPoP key (thumbprint) the access token is bound to. */
  readonly confirmation?: string;
  readonly authTime?: number;
  /** New refresh token value, already stored. */
  readonly refreshToken?: string;
  /** Present for the code flow with `openid` (OIDC Core §3.1.3.3). */
  readonly idToken?: { readonly nonce?: string; readonly claims: SubjectClaims; readonly authTime: number };
  /** Token exchange (DESIGN.md §12): the `act` chain, the subject token's expiry to stay within, what was issued. */
  readonly exchange?: { readonly act: ActClaim; readonly notAfter: number; readonly issuedTokenType: string };
  /** More for the audit line (Issued.audit). */
  readonly audit?: Readonly<Record<string, unknown>>;
}

/** What signing a token response needs: the issuer, the access-token lifetime, and the keys in use now. */
export interface TokenSigner {
  readonly issuer: string;
  readonly accessTokenLifetimeMs: number;
  /** Read on every use: a KeyRing swaps the keys when they are rotated or retired. */
  readonly keys: () => SigningKeys;
}

export async function issueTokens(signer: TokenSigner, input: IssueInput, now: number): Promise<Issued> {
  const keys = signer.keys();
  const lifetimeSeconds = Math.floor(signer.accessTokenLifetimeMs / 1000);
  const claims = accessTokenClaims({
    issuer: signer.issuer,
    subject: input.subject,
    clientId: input.client.clientId,
    audience: input.audience,
    scope: input.scope,
    confirmation: input.confirmation,
    lifetimeSeconds,
    authTime: input.authTime,
    grantId: input.grantId,
    act: input.exchange?.act,
    notAfter: input.exchange?.notAfter,
  }, now);
  const accessToken = await signJwt(keys.accessToken, 'at+jwt', claims);
  const response: { -readonly [K in keyof TokenResponse]: TokenResponse[K] } = {
    access_token: accessToken,
    token_type: input.confirmation === undefined ? 'Bearer' : 'DPoP',
    // An exchanged token may end before the lifetime does (DESIGN.md §12).
    expires_in: (claims.exp as number) - (claims.iat as number),
    scope: input.scope.join(' '),
  };
  if (input.exchange !== undefined) response.issued_token_type = input.exchange.issuedTokenType;
  if (input.refreshToken !== undefined) response.refresh_token = input.refreshToken;
  if (input.idToken !== undefined && input.scope.includes('openid')) {
    // DESIGN.md §3: a client chooses its ID token algorithm; ES256 uses the access-token key.
    const idTokenKey = input.client.idTokenSigningAlg === 'ES256' ? keys.accessToken : keys.idToken;
    response.id_token = await signJwt(
      idTokenKey,
      'JWT',
      idTokenClaims({
        issuer: signer.issuer,
        subject: input.subject,
        clientId: input.client.clientId,
        scope: input.scope,
        claims: input.idToken.claims,
        authTime: input.idToken.authTime,
        nonce: input.idToken.nonce,
        accessToken,
        lifetimeSeconds,
      }, now),
    );
  }
  return { response, audience: input.audience, ...(input.grantId !== undefined && { grantId: input.grantId }), ...(input.audit !== undefined && { audit: input.audit }) };
}

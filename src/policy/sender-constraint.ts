/**
 * Which tokens are bound to a DPoP key (RFC 9449 §5, DESIGN.md §13). Pure: the handler verifies the proof and reads
 * the refresh token, these functions decide.
 */
import { OAuthError, invalidGrant } from './oauth-error.js';

/** What these decisions need of a client. */
export interface BindingClient {
  readonly kind: 'confidential' | 'public' | 'device';
  readonly requireDpop?: boolean;
}

/** DESIGN.md §13: a client with require_dpop (or registered with dpop_bound_access_tokens) sends a proof every time. */
export function proofRequirement(client: BindingClient, hasProof: boolean): OAuthError | undefined {
  if (client.requireDpop === true && !hasProof) {
    return new OAuthError('invalid_request', 'this client must send a DPoP proof (RFC 9449) with every token request');
  }
  return undefined;
}

/**
 * The key a new refresh token is bound to: a public client's follows the proof (RFC 9449 §5), and a token bound once
 * stays bound to that key through every rotation; a confidential client's is never bound, since it authenticates.
 */
export function refreshTokenBinding(client: BindingClient, proofKey: string | undefined, boundBefore?: string): string | undefined {
  if (client.kind === 'confidential') return undefined;
  return boundBefore ?? proofKey;
}

/**
 * RFC 9449 §5 and §10: a bound refresh token, or a code whose authorization request named dpop_jkt, is used only with a
 * proof by its key; refused as invalid_grant, changing nothing.
 */
export function bindingRefusal(boundKey: string | undefined, proofKey: string | undefined, credential: 'refresh token' | 'authorization code' = 'refresh token'): OAuthError | undefined {
  if (boundKey === undefined || boundKey === proofKey) return undefined;
  return invalidGrant(
    proofKey === undefined
      ? `the ${credential} is bound to a DPoP key; send a DPoP proof made with that key`
      : `the ${credential} is bound to another DPoP key than the one of this proof`,
  );
}

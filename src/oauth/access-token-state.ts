/**
 * Whether an access token jose has verified still stands (DESIGN.md §6, §8): revocation and config changes reach
 * tokens already issued, on every instance sharing the store, for the price of one lookup.
 */
import type { AppContext } from '../context.js';
import type { GrantStore, RevokedTokenStore } from '../store/types.js';
import { grantIdOfJti } from './token-claims.js';

export interface AccessTokenClaims {
  readonly jti: string;
  readonly clientId: string;
}

/**
 * True while the token's client is still known and, for a token of a grant, the grant lives, is the client's, and its
 * person is still known; a token without a grant (client_credentials) stands until its jti is revoked.
 */
export async function accessTokenStands(ctx: AppContext, store: GrantStore & RevokedTokenStore, { jti, clientId }: AccessTokenClaims): Promise<boolean> {
  if (!ctx.clients.isKnownClient(clientId)) return false;
  const now = ctx.now();
  const grantId = grantIdOfJti(jti);
  if (grantId === undefined) return !(await store.isAccessTokenRevoked(jti, now));
  const grant = await store.findGrant(grantId, now);
  return grant !== undefined && grant.clientId === clientId && ctx.isKnownSubject(grant.subject);
}

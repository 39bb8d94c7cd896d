/**
 * Whether an access token jose has verified still stands (DESIGN.md §6, §8): revocation and config changes reach
 * tokens already issued, on every instance sharing the store, for the price of one lookup.
 */
import type { AccessTokenStateStore, RevokedTokenStore } from '../store/types.js';
import { grantIdOfJti } from './claims.js';

export interface AccessTokenClaims {
  readonly jti: string;
  readonly clientId: string;
  /** Its `sub`: the client itself for a token without a person (client_credentials, RFC 9068 §2.2). */
  readonly subject: string;
  /** The token came from a token exchange (it carries `act`, DESIGN.md §12): its grant is another client's. */
  readonly exchanged?: boolean;
}

/**
 * True while the token's client is still known and, for a token of a grant, the grant lives, is the client's, and its
 * person is still known; a client's own token (client_credentials) stands until its jti is revoked. A person's token
 * whose jti names no grant (issued before 0.3.0) does not stand: nothing could tell whether its grant was revoked. An exchanged
 * token belongs to the grant of the person's own client (so revoking that grant ends it too); its caller must still
 * be configured for token exchange, and its own jti may be revoked alone (its caller holds no grant to revoke).
 */
export interface AccessTokenStateSources {
  readonly store: AccessTokenStateStore & RevokedTokenStore;
  readonly now: () => number;
  /** Whether a client_id still names a client (configured, registered or by document). */
  readonly isKnownClient: (clientId: string) => boolean;
  /** Whether a grant's subject is still a user, or comes from a configured upstream (DESIGN.md §6). */
  readonly isKnownSubject: (subject: string) => boolean;
  /** Whether a configured client still has a token_exchange block (DESIGN.md §12). */
  readonly mayExchange: (clientId: string) => boolean;
}

export async function accessTokenStands(sources: AccessTokenStateSources, { jti, clientId, subject, exchanged = false }: AccessTokenClaims): Promise<boolean> {
  const { store, isKnownClient, isKnownSubject } = sources;
  if (!isKnownClient(clientId)) return false;
  const now = sources.now();
  const grantId = grantIdOfJti(jti);
  if (grantId === undefined) return subject === clientId && !(await store.isAccessTokenRevoked(jti, now));
  if (exchanged && !sources.mayExchange(clientId)) return false;
  // One read: the grant's holder, and for an exchanged token its own revocation (only such a jti is ever revoked alone).
  const holding = await store.findGrantHolding(grantId, exchanged ? jti : undefined, now);
  if (holding === undefined || holding.tokenRevoked || !isKnownSubject(holding.subject)) return false;
  return exchanged ? isKnownClient(holding.clientId) : holding.clientId === clientId;
}

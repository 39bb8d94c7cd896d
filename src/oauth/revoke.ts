/**
 * POST /revoke (RFC 7009, DESIGN.md §8). A refresh or access token of the authenticated client revokes its grant
 * (every refresh token of it stops working, its access tokens turn inactive at /introspect); a client_credentials
 * token has no grant, so its jti is revoked until it expires. Anything else (another client's token, unknown,
 * expired, malformed) answers 200 and changes nothing (RFC 7009 §2.2).
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ClientDirectory } from '../clients/directory.js';
import { verifyAccessToken } from '../crypto/jwt.js';
import type { SigningKeys } from '../crypto/keys.js';
import { refreshTokenKey } from '../crypto/refresh-token.js';
import { single } from '../http/params.js';
import { invalidRequest } from '../policy/oauth-error.js';
import type { GrantStore, RefreshTokenStore, ReplayStore, RevokedTokenStore } from '../store/types.js';
import { assertionVerifier, authenticateClient, claimedClient } from '../clients/authentication.js';
import { handleFormEndpoint, type FormEndpointDeps } from './form-endpoint.js';
import { useCredentialsOnce } from './one-time-credentials.js';
import { grantIdOfJti } from '../tokens/claims.js';
import { exposeToRedirectOrigin } from '../http/cors.js';

export type RevocationStores = GrantStore & RefreshTokenStore & RevokedTokenStore & ReplayStore;

/** What /revoke uses, wired by buildApp. */
export interface RevocationRouteDeps extends FormEndpointDeps {
  readonly store: RevocationStores;
  /** Clients by client_id, and the keys a private_key_jwt client's assertion is checked with (DESIGN.md §13). */
  readonly clients: Pick<ClientDirectory, 'find' | 'assertionKeysOf' | 'refetchedAssertionKeysOf'>;
  readonly issuer: string;
  /** The keys in use now, read at each use: keys rotate while the server runs. */
  readonly keys: () => SigningKeys;
}

export function revocationRoutes(deps: RevocationRouteDeps): FastifyPluginAsync {
  const { store } = deps;
  /** The grant (or, without one, the jti) a token of `clientId` names; undefined when it is not such a token. */
  async function whatToRevoke(clientId: string, token: string): Promise<{ grantId: string } | { jti: string; expiresAt: number } | undefined> {
    if (token.split('.').length === 3) {
      let payload;
      try {
        payload = await verifyAccessToken(deps.keys(), token, deps.issuer, deps.now());
      } catch {
        return undefined;
      }
      if (payload.client_id !== clientId || typeof payload.jti !== 'string' || typeof payload.exp !== 'number') return undefined;
      // An exchanged token's grant is the person's client's (DESIGN.md §12): its caller revokes only the token itself.
      const grantId = payload.act === undefined ? grantIdOfJti(payload.jti) : undefined;
      return grantId === undefined ? { jti: payload.jti, expiresAt: payload.exp * 1000 } : { grantId };
    }
    const key = refreshTokenKey(token);
    if (key === undefined) return undefined;
    const lookup = await store.findRefreshToken(key.grantId, key.digest, deps.now());
    if (lookup.status === 'active' && lookup.grant.clientId === clientId) return { grantId: lookup.grant.id };
    // A rotated token of this client names its grant too: revoking it ends the chain (RFC 7009 §2.1).
    if (lookup.status === 'rotated' && lookup.clientId === clientId) return { grantId: lookup.grantId };
    return undefined;
  }

  // RFC 7523 §3: the token endpoint's URL may name the server too (clients that reuse one audience for every call).
  const verifyAssertion = assertionVerifier(deps, '/revoke', '/token');
  return async (app) => {
    app.post('/revoke', async (request, reply) =>
      handleFormEndpoint(deps, request, reply, async (params, presented) => {
        const { client, assertionReplay } = await authenticateClient(presented, await claimedClient(deps.clients, presented), verifyAssertion);
        exposeToRedirectOrigin(request, reply, client);
        const token = single(params, 'token');
        if (token === undefined) throw invalidRequest('token is required');
        await useCredentialsOnce(store, { assertion: assertionReplay, proof: undefined }, deps.now());
        const target = await whatToRevoke(client.clientId, token);
        if (target !== undefined) {
          if ('grantId' in target) await store.revokeGrant(target.grantId);
          else await store.revokeAccessToken(target.jti, target.expiresAt);
          request.log.info(
            { audit: true, event: 'revocation', client_id: client.clientId, ...('grantId' in target ? { grant_id: target.grantId } : { jti: target.jti }) },
            'token revoked',
          );
        }
        return { body: {} };
      }),
    );
  };
}

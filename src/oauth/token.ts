/** POST /token (RFC 6749 §3.2): parse, authenticate the client, hand over to the grant's handler. */
import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../context.js';
import { single } from '../http/params.js';
import { OAuthError } from '../policy/oauth-error.js';
import { proofRequirement } from '../policy/sender-constraint.js';
import type { AuthorizationCodeStore, DeviceCodeStore, GrantStore, RefreshTokenStore, ReplayStore, RevokedTokenStore } from '../store/types.js';
import { assertionVerifier, authenticateClient, claimedClient } from '../clients/authentication.js';
import { proofOf, useProofOnce } from './dpop-request.js';
import { handleFormEndpoint } from './form-endpoint.js';
import { authorizationCodeGrant } from './grants/authorization-code.js';
import { clientCredentialsGrant } from './grants/client-credentials.js';
import { deviceCodeGrant } from './grants/device-code.js';
import { runGrant, type GrantHandler } from './grants/grant.js';
import { refreshTokenGrant } from './grants/refresh-token.js';
import { tokenExchangeGrant } from './grants/token-exchange.js';

/** The state /token reads and changes. */
export type TokenStores = GrantStore & AuthorizationCodeStore & RefreshTokenStore & DeviceCodeStore & RevokedTokenStore & ReplayStore;

export type GrantTable = ReadonlyMap<string, GrantHandler<unknown>>;

export function grantTable(ctx: AppContext, store: TokenStores): GrantTable {
  const handlers = [
    authorizationCodeGrant(ctx, store),
    refreshTokenGrant(ctx, store),
    clientCredentialsGrant(ctx),
    deviceCodeGrant(ctx, store),
    tokenExchangeGrant(ctx, store),
  ] as GrantHandler<unknown>[];
  return new Map(handlers.map((handler) => [handler.grantType, handler]));
}

export function tokenRoutes(ctx: AppContext, store: TokenStores): FastifyPluginAsync {
  const grants = grantTable(ctx, store);
  const verifyAssertion = assertionVerifier(ctx, store, '/token');
  return async (app) => {
    app.post('/token', async (request, reply) =>
      handleFormEndpoint(ctx, request, reply, async (params, presented) => {
        const grantType = single(params, 'grant_type');
        if (grantType === undefined) throw new OAuthError('invalid_request', 'grant_type is required');
        const handler = grants.get(grantType);
        if (handler === undefined) throw new OAuthError('unsupported_grant_type', `grant_type "${grantType}" is not supported`);
        // RFC 9449 §5: a proof is judged before the client (it writes nothing; an assertion's jti is recorded).
        const proof = await proofOf(ctx, request);
        const client = await authenticateClient(presented, await claimedClient(ctx.clients, presented), verifyAssertion);
        const unproven = proofRequirement(client, proof !== undefined);
        if (unproven !== undefined) throw unproven;
        const audit = (fields: Record<string, unknown>): void => {
          request.audit = fields;
        };
        const now = ctx.now();
        const binding = proof === undefined ? {} : { proofKey: proof.jkt, beforeChanges: () => useProofOnce(store, proof, now) };
        const body = await runGrant(handler, store, ctx.metrics, { client, params, now, log: request.log, audit, ...binding });
        return { body };
      }),
    );
  };
}

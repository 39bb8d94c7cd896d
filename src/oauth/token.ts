/** POST /token (RFC 6749 §3.2): parse, authenticate the client, hand over to the grant's handler. */
import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../context.js';
import { OAuthError } from '../errors.js';
import { single } from '../http/params.js';
import { authenticateClient } from './client-auth.js';
import { handleFormEndpoint } from './form-endpoint.js';
import { authorizationCodeGrant } from './grants/authorization-code.js';
import { clientCredentialsGrant } from './grants/client-credentials.js';
import { deviceCodeGrant } from './grants/device-code.js';
import { runGrant, type GrantHandler } from './grants/grant.js';
import { refreshTokenGrant } from './grants/refresh-token.js';

export const DEVICE_CODE_GRANT = deviceCodeGrant.grantType;

export type GrantTable = ReadonlyMap<string, GrantHandler<unknown>>;

export function grantTable(extra: readonly GrantHandler<unknown>[] = []): GrantTable {
  const handlers = [authorizationCodeGrant, refreshTokenGrant, clientCredentialsGrant, deviceCodeGrant, ...extra] as GrantHandler<unknown>[];
  return new Map(handlers.map((handler) => [handler.grantType, handler]));
}

export function tokenRoutes(ctx: AppContext, grants: GrantTable = grantTable()): FastifyPluginAsync {
  return async (app) => {
    app.post('/token', { config: { cors: 'clients' } }, async (request, reply) =>
      handleFormEndpoint(ctx, request, reply, async (params, presented) => {
        const grantType = single(params, 'grant_type');
        if (grantType === undefined) throw new OAuthError('invalid_request', 'grant_type is required');
        const handler = grants.get(grantType);
        if (handler === undefined) throw new OAuthError('unsupported_grant_type', `grant_type "${grantType}" is not supported`);
        const client = authenticateClient(presented, ctx.config.clients);
        const body = await runGrant(handler, ctx, { client, params, now: ctx.now(), log: request.log });
        return { body };
      }),
    );
  };
}

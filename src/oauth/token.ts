/** POST /token (RFC 6749 §3.2): parse, authenticate the client, hand over to the grant's handler. */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { AppContext } from '../context.js';
import { OAuthError } from '../errors.js';
import { checkLimits, EMPTY_PARAMS, repeatedParameter, single, type Params } from '../http/params.js';
import { sendJsonError, toOAuthError } from '../http/render-error.js';
import { countFailure, tooManyFailures } from '../http/failure-limit.js';
import { authenticateClient, claimedClientId } from './client-auth.js';
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

/** The common front of the form-posting OAuth endpoints: content type, limits, repeats, rate limits. */
export async function handleFormEndpoint(
  ctx: AppContext,
  request: FastifyRequest,
  reply: FastifyReply,
  handle: (params: Params) => Promise<{ status?: number; body: unknown }>,
): Promise<FastifyReply> {
  const params = (request.body as Params | undefined) ?? EMPTY_PARAMS;
  const clientId = claimedClientId(request.headers.authorization, params);
  request.clientId = clientId;
  try {
    const limited = tooManyFailures(ctx, request, clientId);
    if (limited !== undefined) throw limited;
    if (request.headers['content-type'] === undefined && request.body === undefined) {
      throw new OAuthError('invalid_request', 'the body must be application/x-www-form-urlencoded', 415);
    }
    const limitError = checkLimits(params);
    if (limitError !== undefined) throw limitError;
    // DESIGN.md §4: every parameter at most once; `resource` repeats are the policy's to judge (§5).
    const repeated = repeatedParameter(params, ['resource']);
    if (repeated !== undefined) throw new OAuthError('invalid_request', `${repeated} appears more than once`);
    const { status, body } = await handle(params);
    request.outcome = 'ok';
    return reply.code(status ?? 200).header('Cache-Control', 'no-store').header('Pragma', 'no-cache').send(body);
  } catch (error) {
    const oauthError = toOAuthError(error, request);
    // RFC 8628 §3.5: authorization_pending and slow_down are how polling waits, not failed requests.
    if (oauthError.code !== 'authorization_pending' && oauthError.code !== 'slow_down') {
      countFailure(ctx, request, clientId, oauthError.status);
    }
    return sendJsonError(reply, oauthError);
  }
}

export function tokenRoutes(ctx: AppContext, grants: GrantTable = grantTable()): FastifyPluginAsync {
  return async (app) => {
    app.post('/token', { config: { cors: 'clients' } }, async (request, reply) =>
      handleFormEndpoint(ctx, request, reply, async (params) => {
        const grantType = single(params, 'grant_type');
        if (grantType === undefined) throw new OAuthError('invalid_request', 'grant_type is required');
        const handler = grants.get(grantType);
        if (handler === undefined) throw new OAuthError('unsupported_grant_type', `grant_type "${grantType}" is not supported`);
        const client = authenticateClient(request.headers.authorization, params, ctx.config.clients);
        const body = await runGrant(handler, ctx, { client, params, now: ctx.now(), log: request.log });
        return { body };
      }),
    );
  };
}

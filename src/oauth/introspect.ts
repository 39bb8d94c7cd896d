/**
 * POST /introspect (RFC 7662, DESIGN.md §8). A resource server learns about an access token only when its label is
 * in the token's `aud` (a token narrowed to another server is inactive for it); a client only about its own tokens;
 * a resource server never about refresh tokens. An access token costs a jose verification (once per token: see
 * VerifiedAccessTokens) and one lookup (tokens/access-token-state.ts: a revoked grant's tokens are inactive at once, on
 * every instance sharing the store).
 */
import type { FastifyPluginAsync } from 'fastify';
import type { JWTPayload } from 'jose';
import type { AppContext } from '../context.js';
import { refreshTokenKey } from '../crypto/refresh-token.js';
import { single } from '../http/params.js';
import { invalidRequest } from '../policy/oauth-error.js';
import { audienceClaim, grantAudience } from '../policy/resource.js';
import type { GrantStore, RefreshTokenStore, ReplayStore, RevokedTokenStore } from '../store/types.js';
import { assertionVerifier, authenticateIntrospectionCaller, claimedClient, type IntrospectionCaller } from '../clients/authentication.js';
import { handleFormEndpoint } from './form-endpoint.js';
import { accessTokenStands } from '../tokens/access-token-state.js';
import { epochSeconds } from '../tokens/claims.js';

export type IntrospectionStores = GrantStore & RefreshTokenStore & RevokedTokenStore & ReplayStore;

const INACTIVE = Object.freeze({ active: false });

/** A compact JWS has two dots; our refresh tokens have one. */
const looksLikeJwt = (token: string): boolean => token.split('.').length === 3;

export function introspectionRoutes(ctx: AppContext, store: IntrospectionStores): FastifyPluginAsync {
  const verified = ctx.verifiedAccessTokens;
  const verifyAssertion = assertionVerifier(ctx, store, '/introspect');

  async function accessToken(caller: IntrospectionCaller, token: string): Promise<Record<string, unknown>> {
    let payload: JWTPayload;
    try {
      payload = await verified.verify(ctx.keys, token, ctx.issuer, ctx.now());
    } catch {
      return INACTIVE;
    }
    const { aud, jti, client_id: clientId, sub } = payload as JWTPayload & { client_id?: unknown };
    if (typeof jti !== 'string' || typeof clientId !== 'string' || typeof sub !== 'string' || aud === undefined) return INACTIVE;
    const audience = typeof aud === 'string' ? [aud] : aud;
    const allowed = caller.kind === 'resource_server' ? audience.includes(caller.label) : clientId === caller.client.clientId;
    if (!allowed) return INACTIVE;
    const { act, cnf } = payload as JWTPayload & { cnf?: unknown };
    if (!(await accessTokenStands(ctx.tokenState, { jti, clientId, exchanged: act !== undefined }))) return INACTIVE;
    // RFC 9449 §6.2: a DPoP-bound token says which key it is bound to.
    const tokenType = cnf === undefined ? 'Bearer' : 'DPoP';
    const answer = { active: true, scope: payload.scope, client_id: clientId, sub, aud, iss: payload.iss, exp: payload.exp, iat: payload.iat, jti, token_type: tokenType, token_use: 'access_token', ...(cnf !== undefined && { cnf }) };
    // RFC 8693 §4.1, DESIGN.md §12: an exchanged token says who acts for the subject.
    return act === undefined ? answer : { ...answer, act };
  }

  async function refreshToken(caller: IntrospectionCaller, token: string): Promise<Record<string, unknown>> {
    // DESIGN.md §8: a resource server never learns about refresh tokens.
    if (caller.kind !== 'client') return INACTIVE;
    const key = refreshTokenKey(token);
    if (key === undefined) return INACTIVE;
    const lookup = await store.findRefreshToken(key.grantId, key.digest, ctx.now());
    if (lookup.status !== 'active' || lookup.grant.clientId !== caller.client.clientId || !ctx.isKnownSubject(lookup.grant.subject)) return INACTIVE;
    const { grant, token: record } = lookup;
    return {
      active: true,
      scope: grant.scope.join(' '),
      client_id: grant.clientId,
      sub: grant.subject,
      // What an access token of this grant names when no resource is asked (DESIGN.md §8, §5 provider scopes included).
      aud: audienceClaim(grantAudience({ client: caller.client, issuer: ctx.issuer, scope: grant.scope, resources: grant.resources })),
      iss: ctx.issuer,
      exp: epochSeconds(record.expiresAt),
      iat: epochSeconds(record.issuedAt),
      jti: record.digest.slice(0, 32),
      token_use: 'refresh_token',
    };
  }

  return async (app) => {
    app.post('/introspect', async (request, reply) =>
      handleFormEndpoint(ctx, request, reply, async (params, presented) => {
        const caller = await authenticateIntrospectionCaller(presented, await claimedClient(ctx.clients, presented), ctx.config.resourceServers, verifyAssertion);
        request.clientId = caller.kind === 'client' ? caller.client.clientId : caller.label;
        const token = single(params, 'token');
        if (token === undefined) throw invalidRequest('token is required');
        // token_type_hint only orders the attempts (RFC 7662 §2.1); the shape tells them apart anyway.
        const body = looksLikeJwt(token) ? await accessToken(caller, token) : await refreshToken(caller, token);
        return { body };
      }),
    );
  };
}

/** GET/POST /userinfo (OIDC Core §5.3) for tokens addressed to the provider (DESIGN.md §4). */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { JWTPayload } from 'jose';
import type { AppContext } from '../context.js';
import { isAddressedToProvider, type Audience } from '../policy/resource.js';
import { verifyAccessToken } from '../crypto/jwt.js';
import type { GrantStore, RevokedTokenStore, SubjectClaims, SubjectClaimsStore } from '../store/types.js';
import { accessTokenStands } from '../tokens/access-token-state.js';
import { releasedClaims } from '../tokens/claims.js';

/** RFC 6750 §3: the challenge says why. */
function refuse(request: FastifyRequest, reply: FastifyReply, error: 'invalid_token' | 'invalid_request', description: string): FastifyReply {
  request.outcome = error;
  return reply
    .code(error === 'invalid_token' ? 401 : 400)
    .header('WWW-Authenticate', `Bearer error="${error}", error_description="${description}"`)
    .header('Cache-Control', 'no-store')
    .send({ error, error_description: description });
}

export function userinfoRoutes(ctx: AppContext, store: SubjectClaimsStore & GrantStore & RevokedTokenStore): FastifyPluginAsync {
  async function claimsOf(subject: string): Promise<SubjectClaims> {
    const user = ctx.config.users.get(subject);
    if (user !== undefined) return { email: user.email, name: user.name };
    return (await store.findSubjectClaims(subject, ctx.now())) ?? {};
  }

  async function handle(request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
    const header = request.headers.authorization;
    const match = header === undefined ? null : /^Bearer ([A-Za-z0-9._~+/-]+=*)$/i.exec(header.trim());
    if (match === null) {
      request.outcome = 'no_token';
      return reply.code(401).header('WWW-Authenticate', 'Bearer realm="pinpoint"').header('Cache-Control', 'no-store').send();
    }
    let payload: JWTPayload;
    try {
      payload = await verifyAccessToken(ctx.keys, match[1] as string, ctx.issuer, ctx.now());
    } catch {
      return refuse(request, reply, 'invalid_token', 'the access token is invalid or expired');
    }
    const clientId = typeof payload.client_id === 'string' ? payload.client_id : undefined;
    request.clientId = clientId;
    const client = await ctx.clients.find(clientId);
    const scope = typeof payload.scope === 'string' ? payload.scope.split(' ') : [];
    if (client === undefined || payload.aud === undefined || typeof payload.sub !== 'string' || typeof payload.jti !== 'string') {
      return refuse(request, reply, 'invalid_token', 'the access token is invalid or expired');
    }
    // DESIGN.md §6, §8: a token of a revoked grant, or of a person or client no longer configured, has no claims here.
    if (!(await accessTokenStands(ctx.tokenState, { jti: payload.jti, clientId: client.clientId }))) {
      return refuse(request, reply, 'invalid_token', 'the access token is no longer valid');
    }
    if (!scope.includes('openid')) return refuse(request, reply, 'invalid_token', 'the access token does not carry the openid scope');
    // DESIGN.md §7: a client_credentials token names no person (its sub is the client), so it has no claims here; only tokens a person signed in for carry auth_time.
    if (typeof payload.auth_time !== 'number') return refuse(request, reply, 'invalid_token', 'the access token was issued to a client, not for a person');
    if (!isAddressedToProvider(payload.aud as Audience, ctx.issuer, client.audience)) {
      return refuse(request, reply, 'invalid_token', 'the access token is addressed to another resource server');
    }
    request.outcome = 'ok';
    return reply
      .header('Cache-Control', 'no-store')
      .send({ sub: payload.sub, ...releasedClaims(scope, await claimsOf(payload.sub)) });
  }

  return async (app) => {
    app.get('/userinfo', handle);
    app.post('/userinfo', handle);
  };
}

/**
 * GET/POST /userinfo (OIDC Core §5.3) for tokens addressed to the provider (DESIGN.md §4): a Bearer token, or a
 * DPoP-bound one as `Authorization: DPoP <token>` with a proof of its key naming it (RFC 9449 §7, DESIGN.md §13).
 */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { JWTPayload } from 'jose';
import type { AppContext } from '../context.js';
import { DPOP_ALGS, type DpopProof } from '../crypto/dpop.js';
import { OAuthError } from '../policy/oauth-error.js';
import { isAddressedToProvider, type Audience } from '../policy/resource.js';
import { verifyAccessToken } from '../crypto/jwt.js';
import type { GrantStore, ReplayStore, RevokedTokenStore, SubjectClaims, SubjectClaimsStore } from '../store/types.js';
import { accessTokenStands } from '../tokens/access-token-state.js';
import { releasedClaims } from '../tokens/claims.js';
import { proofOf, useProofOnce } from './dpop-request.js';

type Scheme = 'Bearer' | 'DPoP';

/** RFC 6750 §3, RFC 9449 §7.1: the challenge of the scheme the token came with says why. */
function refuse(request: FastifyRequest, reply: FastifyReply, error: 'invalid_token' | 'invalid_request' | 'invalid_dpop_proof', description: string, scheme: Scheme = 'Bearer'): FastifyReply {
  request.outcome = error;
  const algs = scheme === 'DPoP' ? `, algs="${DPOP_ALGS.join(' ')}"` : '';
  return reply
    .code(error === 'invalid_request' ? 400 : 401)
    // RFC 6750 §3: a quoted-string description holds no '"'.
    .header('WWW-Authenticate', `${scheme} error="${error}", error_description="${description.replaceAll('"', "'")}"${algs}`)
    .header('Cache-Control', 'no-store')
    .send({ error, error_description: description });
}

/** The `cnf.jkt` of a verified access token (RFC 9449 §6.1), when it is DPoP-bound. */
function boundKeyOf(payload: JWTPayload): string | undefined {
  const { cnf } = payload as { cnf?: { jkt?: unknown } };
  return typeof cnf?.jkt === 'string' ? cnf.jkt : undefined;
}

export function userinfoRoutes(ctx: AppContext, store: SubjectClaimsStore & GrantStore & RevokedTokenStore & ReplayStore): FastifyPluginAsync {
  async function claimsOf(subject: string): Promise<SubjectClaims> {
    const user = ctx.config.users.get(subject);
    if (user !== undefined) return { email: user.email, name: user.name };
    return (await store.findSubjectClaims(subject, ctx.now())) ?? {};
  }

  async function handle(request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
    const header = request.headers.authorization;
    const match = header === undefined ? null : /^(Bearer|DPoP) ([A-Za-z0-9._~+/-]+=*)$/i.exec(header.trim());
    if (match === null) {
      request.outcome = 'no_token';
      return reply.code(401).header('WWW-Authenticate', 'Bearer realm="pinpoint"').header('Cache-Control', 'no-store').send();
    }
    const scheme: Scheme = (match[1] as string).toLowerCase() === 'dpop' ? 'DPoP' : 'Bearer';
    const token = match[2] as string;
    let payload: JWTPayload;
    try {
      payload = await verifyAccessToken(ctx.keys, token, ctx.issuer, ctx.now());
    } catch {
      return refuse(request, reply, 'invalid_token', 'the access token is invalid or expired', scheme);
    }
    // RFC 9449 §7.1-7.2: a bound token only with its proof, under the DPoP scheme; a Bearer token never under it.
    const boundKey = boundKeyOf(payload);
    let proof: DpopProof | undefined;
    if (scheme === 'Bearer' && boundKey !== undefined) {
      return refuse(request, reply, 'invalid_token', 'the access token is DPoP-bound; send it as Authorization: DPoP with a DPoP proof', 'DPoP');
    }
    if (scheme === 'DPoP') {
      try {
        proof = await proofOf(ctx, request, token, 401);
      } catch (error) {
        if (error instanceof OAuthError) return refuse(request, reply, 'invalid_dpop_proof', error.description, 'DPoP');
        throw error;
      }
      if (proof === undefined) return refuse(request, reply, 'invalid_dpop_proof', 'the DPoP scheme needs a DPoP proof header', 'DPoP');
      if (boundKey === undefined) return refuse(request, reply, 'invalid_token', 'the access token is not DPoP-bound; send it as Authorization: Bearer', 'DPoP');
      if (boundKey !== proof.jkt) return refuse(request, reply, 'invalid_token', "the access token is bound to another key than the DPoP proof's", 'DPoP');
    }
    const clientId = typeof payload.client_id === 'string' ? payload.client_id : undefined;
    request.clientId = clientId;
    const client = await ctx.clients.find(clientId);
    const scope = typeof payload.scope === 'string' ? payload.scope.split(' ') : [];
    if (client === undefined || payload.aud === undefined || typeof payload.sub !== 'string' || typeof payload.jti !== 'string') {
      return refuse(request, reply, 'invalid_token', 'the access token is invalid or expired', scheme);
    }
    // DESIGN.md §6, §8: a token of a revoked grant, or of a person or client no longer configured, has no claims here.
    if (!(await accessTokenStands(ctx.tokenState, { jti: payload.jti, clientId: client.clientId }))) {
      return refuse(request, reply, 'invalid_token', 'the access token is no longer valid', scheme);
    }
    if (!scope.includes('openid')) return refuse(request, reply, 'invalid_token', 'the access token does not carry the openid scope', scheme);
    // DESIGN.md §7: a client_credentials token names no person (its sub is the client), so it has no claims here; only tokens a person signed in for carry auth_time.
    if (typeof payload.auth_time !== 'number') return refuse(request, reply, 'invalid_token', 'the access token was issued to a client, not for a person', scheme);
    if (!isAddressedToProvider(payload.aud as Audience, ctx.issuer, client.audience)) {
      return refuse(request, reply, 'invalid_token', 'the access token is addressed to another resource server', scheme);
    }
    if (proof !== undefined) {
      try {
        await useProofOnce(store, proof, ctx.now(), 401);
      } catch (error) {
        if (error instanceof OAuthError) return refuse(request, reply, 'invalid_dpop_proof', error.description, 'DPoP');
        throw error;
      }
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

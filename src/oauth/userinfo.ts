/**
 * GET/POST /userinfo (OIDC Core §5.3) for tokens addressed to the provider (DESIGN.md §4): a Bearer token, or a
 * DPoP-bound one as `Authorization: DPoP <token>` with a proof of its key naming it (RFC 9449 §7, DESIGN.md §13).
 */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { JWTPayload } from 'jose';
import type { ClientDirectory } from '../clients/directory.js';
import type { ClientRecord, UserRecord } from '../config/types.js';
import { DPOP_ALGS, type DpopProof } from '../crypto/dpop.js';
import { OAuthError } from '../policy/oauth-error.js';
import { isAddressedToProvider, type Audience } from '../policy/resource.js';
import { verifyAccessToken } from '../crypto/jwt.js';
import type { SigningKeys } from '../crypto/keys.js';
import type { ReplayStore, SubjectClaims, SubjectClaimsStore } from '../store/types.js';
import { accessTokenStands, type AccessTokenStateSources } from '../tokens/access-token-state.js';
import { releasedClaims } from '../tokens/claims.js';
import { proofOf } from './dpop-request.js';
import { useCredentialsOnce } from './one-time-credentials.js';
import { exposeToRedirectOrigin } from '../http/cors.js';
import { admitRequest, type PageAdmission } from '../http/failure-limit.js';
import { sendJsonError } from '../http/render-error.js';

type Scheme = 'Bearer' | 'DPoP';

/** What /userinfo uses, wired by buildApp. */
export interface UserinfoRouteDeps extends PageAdmission {
  /** Claims of upstream subjects, and the DPoP proofs used (grants and revocations are read through tokenState). */
  readonly store: SubjectClaimsStore & ReplayStore;
  /** Local users, whose claims come from the config. */
  readonly users: ReadonlyMap<string, UserRecord>;
  readonly clients: Pick<ClientDirectory, 'find' | 'fetchesToResolve'>;
  readonly issuer: string;
  /** The keys in use now, read at each use: keys rotate while the server runs. */
  readonly keys: () => SigningKeys;
  readonly tokenState: AccessTokenStateSources;
}

/** Why a request gets no claims: the error, its description, and the scheme whose challenge answers it. */
interface Refusal {
  readonly error: 'invalid_token' | 'invalid_request' | 'invalid_dpop_proof';
  readonly description: string;
  readonly scheme: Scheme;
}

/** RFC 6750 §3, RFC 9449 §7.1: the challenge of the scheme the token came with says why. */
function refuse(request: FastifyRequest, reply: FastifyReply, { error, description, scheme }: Refusal): FastifyReply {
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

/** RFC 6750 §2.1, RFC 9449 §7.1: the access token of the Authorization header and the scheme it came with. */
function presentedToken(header: string | undefined): { scheme: Scheme; token: string } | undefined {
  const match = header === undefined ? null : /^(Bearer|DPoP) ([A-Za-z0-9._~+/-]+=*)$/i.exec(header.trim());
  if (match === null) return undefined;
  return { scheme: (match[1] as string).toLowerCase() === 'dpop' ? 'DPoP' : 'Bearer', token: match[2] as string };
}

/** The proof a DPoP-scheme request carries for its token's key; a refusal when the scheme, token and proof disagree. */
async function proofForToken(deps: UserinfoRouteDeps, request: FastifyRequest, scheme: Scheme, token: string, payload: JWTPayload): Promise<{ proof?: DpopProof } | Refusal> {
  // RFC 9449 §7.1-7.2: a bound token only with its proof, under the DPoP scheme; a Bearer token never under it.
  const boundKey = boundKeyOf(payload);
  const refusal = (error: Refusal['error'], description: string): Refusal => ({ error, description, scheme: 'DPoP' });
  if (scheme === 'Bearer' && boundKey !== undefined) {
    return refusal('invalid_token', 'the access token is DPoP-bound; send it as Authorization: DPoP with a DPoP proof');
  }
  if (scheme === 'Bearer') return {};
  let proof: DpopProof | undefined;
  try {
    proof = await proofOf(deps, request, token, 401);
  } catch (error) {
    if (error instanceof OAuthError) return refusal('invalid_dpop_proof', error.description);
    throw error;
  }
  if (proof === undefined) return refusal('invalid_dpop_proof', 'the DPoP scheme needs a DPoP proof header');
  if (boundKey === undefined) return refusal('invalid_token', 'the access token is not DPoP-bound; send it as Authorization: Bearer');
  if (boundKey !== proof.jkt) return refusal('invalid_token', "the access token is bound to another key than the DPoP proof's");
  return { proof };
}

/** Why a verified token of `client` gets no claims here (DESIGN.md §4, §6-8); undefined when it does. */
async function tokenRefusal(deps: UserinfoRouteDeps, payload: JWTPayload, client: ClientRecord | undefined, scope: readonly string[]): Promise<string | undefined> {
  if (client === undefined || payload.aud === undefined || typeof payload.sub !== 'string' || typeof payload.jti !== 'string') {
    return 'the access token is invalid or expired';
  }
  // DESIGN.md §12: an exchanged token is for the one resource server it names, and can be revoked on its own (its
  // jti), which the grant-holder check below would not see when the exchanging client holds the grant too.
  if (payload.act !== undefined) return 'the access token was made by token exchange: it is for the resource server it names, not for /userinfo';
  // DESIGN.md §6, §8: a token of a revoked grant, or of a person or client no longer configured, has no claims here.
  if (!(await accessTokenStands(deps.tokenState, { jti: payload.jti, clientId: client.clientId, subject: payload.sub }))) return 'the access token is no longer valid';
  if (!scope.includes('openid')) return 'the access token does not carry the openid scope';
  // DESIGN.md §7: a client_credentials token names no person (its sub is the client), so it has no claims here; only tokens a person signed in for carry auth_time.
  if (typeof payload.auth_time !== 'number') return 'the access token was issued to a client, not for a person';
  if (!isAddressedToProvider(payload.aud as Audience, deps.issuer, client.audience)) return 'the access token is addressed to another resource server';
  return undefined;
}

/** RFC 9449 §11.1: the proof's jti is recorded last, once everything else passed; a refusal when it was seen before. */
async function useProof(deps: UserinfoRouteDeps, proof: DpopProof | undefined): Promise<Refusal | undefined> {
  if (proof === undefined) return undefined;
  try {
    await useCredentialsOnce(deps.store, { assertion: undefined, proof: proof.replay }, deps.now(), 401);
    return undefined;
  } catch (error) {
    if (error instanceof OAuthError) return { error: 'invalid_dpop_proof', description: error.description, scheme: 'DPoP' };
    throw error;
  }
}

async function claimsOf(deps: UserinfoRouteDeps, subject: string): Promise<SubjectClaims> {
  const user = deps.users.get(subject);
  if (user !== undefined) return { email: user.email, name: user.name };
  return (await deps.store.findSubjectClaims(subject, deps.now())) ?? {};
}

async function answer(deps: UserinfoRouteDeps, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const presented = presentedToken(request.headers.authorization);
  if (presented === undefined) {
    request.outcome = 'no_token';
    return reply.code(401).header('WWW-Authenticate', 'Bearer realm="pinpoint"').header('Cache-Control', 'no-store').send();
  }
  const { scheme, token } = presented;
  const invalidToken = (description: string): FastifyReply => refuse(request, reply, { error: 'invalid_token', description, scheme });
  let payload: JWTPayload;
  try {
    payload = await verifyAccessToken(deps.keys(), token, deps.issuer, deps.now());
  } catch {
    return invalidToken('the access token is invalid or expired');
  }
  const binding = await proofForToken(deps, request, scheme, token, payload);
  if ('error' in binding) return refuse(request, reply, binding);
  const clientId = typeof payload.client_id === 'string' ? payload.client_id : undefined;
  request.clientId = clientId;
  const found = await clientOfToken(deps, request, clientId);
  if ('error' in found) return sendJsonError(reply, found.error);
  const { client } = found;
  if (client !== undefined) exposeToRedirectOrigin(request, reply, client);
  const scope = typeof payload.scope === 'string' ? payload.scope.split(' ') : [];
  const refused = await tokenRefusal(deps, payload, client, scope);
  if (refused !== undefined) return invalidToken(refused);
  const unusedProof = await useProof(deps, binding.proof);
  if (unusedProof !== undefined) return refuse(request, reply, unusedProof);
  request.outcome = 'ok';
  return reply
    .header('Cache-Control', 'no-store')
    .send({ sub: payload.sub, ...releasedClaims(scope, await claimsOf(deps, payload.sub as string)) });
}

/**
 * The token's client. Resolving a metadata-document client that is not cached (its document sends `no-store`) fetches
 * it: that fetch counts against the address, as at every endpoint (DESIGN.md §9), or the 429 when its budget is spent.
 */
async function clientOfToken(deps: UserinfoRouteDeps, request: FastifyRequest, clientId: string | undefined): Promise<{ client: ClientRecord | undefined } | { error: OAuthError }> {
  if (clientId === undefined || deps.clients.fetchesToResolve(clientId) === 0) return { client: await deps.clients.find(clientId) };
  const fetches = (): number => deps.clients.fetchesToResolve(clientId);
  const admitting = admitRequest(deps.failures, deps.inFlight, deps.limits, { address: request.ip, clientId: undefined, fetches }, deps.now);
  const admission = admitting instanceof Promise ? await admitting : admitting;
  if (!admission.ok) return { error: admission.error };
  try {
    return { client: await deps.clients.find(clientId) };
  } finally {
    admission.settle('done', deps.now());
  }
}

export function userinfoRoutes(deps: UserinfoRouteDeps): FastifyPluginAsync {
  const handle = (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> => answer(deps, request, reply);
  return async (app) => {
    app.get('/userinfo', handle);
    app.post('/userinfo', handle);
  };
}

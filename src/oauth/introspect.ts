/**
 * POST /introspect (RFC 7662, DESIGN.md §8). A resource server learns about an access token only when its label is
 * in the token's `aud` (a token narrowed to another server is inactive for it); a client only about its own tokens;
 * a resource server never about refresh tokens. An access token costs a jose verification (once per token: see
 * VerifiedAccessTokens) and one lookup (tokens/access-token-state.ts: a revoked grant's tokens are inactive at once, on
 * every instance sharing the store).
 */
import type { FastifyPluginAsync } from 'fastify';
import type { JWTPayload } from 'jose';
import type { ClientDirectory } from '../clients/directory.js';
import type { ResourceServerRecord } from '../config/types.js';
import type { VerifiedAccessTokens } from '../crypto/jwt.js';
import type { SigningKeys } from '../crypto/keys.js';
import { refreshTokenKey } from '../crypto/refresh-token.js';
import { single } from '../http/params.js';
import { invalidRequest } from '../policy/oauth-error.js';
import { audienceClaim, grantAudience } from '../policy/resource.js';
import { narrowGrant } from '../policy/token-requests.js';
import type { RefreshTokenStore, ReplayStore } from '../store/types.js';
import { assertionVerifier, authenticateIntrospectionCaller, claimedClient, type IntrospectionCaller } from '../clients/authentication.js';
import { handleFormEndpoint, type FormEndpointDeps } from './form-endpoint.js';
import { useCredentialsOnce } from './one-time-credentials.js';
import { accessTokenStands, type AccessTokenStateSources } from '../tokens/access-token-state.js';
import { epochSeconds } from '../tokens/claims.js';

/** The state /introspect reads itself; an access token's grant and revocation it reads through tokenState. */
export type IntrospectionStores = RefreshTokenStore & ReplayStore;

const INACTIVE = Object.freeze({ active: false });

/** A compact JWS has two dots; our refresh tokens have one. */
const looksLikeJwt = (token: string): boolean => token.split('.').length === 3;

/** What /introspect uses, wired by buildApp. */
export interface IntrospectionRouteDeps extends FormEndpointDeps {
  readonly store: IntrospectionStores;
  /** Clients by client_id, and the keys a private_key_jwt client's assertion is checked with (DESIGN.md §13). */
  readonly clients: Pick<ClientDirectory, 'find' | 'assertionKeysOf' | 'refetchedAssertionKeysOf'>;
  /** The configured resource servers, by label: they introspect with their secret (DESIGN.md §8). */
  readonly resourceServers: ReadonlyMap<string, ResourceServerRecord>;
  readonly issuer: string;
  /** The keys in use now, read at each use: keys rotate while the server runs. */
  readonly keys: () => SigningKeys;
  readonly verifiedAccessTokens: VerifiedAccessTokens;
  readonly tokenState: AccessTokenStateSources;
  /** Whether a grant's subject is still a user, or comes from a configured upstream (DESIGN.md §6). */
  readonly isKnownSubject: (subject: string) => boolean;
}

/** The clients a request naming a resource server may be: none. */
const NO_CLIENT = { get: (): undefined => undefined };

export function introspectionRoutes(deps: IntrospectionRouteDeps): FastifyPluginAsync {
  const { store } = deps;
  const verified = deps.verifiedAccessTokens;
  // RFC 7523 §3: the token endpoint's URL may name the server too (clients that reuse one audience for every call).
  const verifyAssertion = assertionVerifier(deps, '/introspect', '/token');

  async function accessToken(caller: IntrospectionCaller, token: string): Promise<Record<string, unknown>> {
    let payload: JWTPayload;
    try {
      payload = await verified.verify(deps.keys(), token, deps.issuer, deps.now());
    } catch {
      return INACTIVE;
    }
    const { aud, jti, client_id: clientId, sub } = payload as JWTPayload & { client_id?: unknown };
    if (typeof jti !== 'string' || typeof clientId !== 'string' || typeof sub !== 'string' || aud === undefined) return INACTIVE;
    const audience = typeof aud === 'string' ? [aud] : aud;
    const allowed = caller.kind === 'resource_server' ? audience.includes(caller.label) : clientId === caller.client.clientId;
    if (!allowed) return INACTIVE;
    const { act, cnf } = payload as JWTPayload & { cnf?: unknown };
    if (!(await accessTokenStands(deps.tokenState, { jti, clientId, subject: sub, exchanged: act !== undefined }))) return INACTIVE;
    // RFC 9449 §6.2: a DPoP-bound token says which key it is bound to.
    const tokenType = cnf === undefined ? 'Bearer' : 'DPoP';
    // RFC 8693 §4.1, DESIGN.md §12: an exchanged token says who acts for the subject (act).
    return { active: true, scope: payload.scope, client_id: clientId, sub, aud, iss: payload.iss, exp: payload.exp, iat: payload.iat, jti, token_type: tokenType, token_use: 'access_token', ...(cnf !== undefined && { cnf }), ...(act !== undefined && { act }) };
  }

  async function refreshToken(caller: IntrospectionCaller, token: string): Promise<Record<string, unknown>> {
    // DESIGN.md §8: a resource server never learns about refresh tokens.
    if (caller.kind !== 'client') return INACTIVE;
    const key = refreshTokenKey(token);
    if (key === undefined) return INACTIVE;
    const lookup = await store.findRefreshToken(key.grantId, key.digest, deps.now());
    if (lookup.status !== 'active' || lookup.grant.clientId !== caller.client.clientId || !deps.isKnownSubject(lookup.grant.subject)) return INACTIVE;
    const { token: record } = lookup;
    // What a refresh would use now (DESIGN.md §6): the grant as the configuration narrows it, or nothing.
    const narrowed = narrowGrant(lookup.grant, caller.client, deps.issuer, true);
    if (!narrowed.ok) return INACTIVE;
    const grant = narrowed.value;
    return {
      active: true,
      scope: grant.scope.join(' '),
      client_id: grant.clientId,
      sub: grant.subject,
      // What an access token of this grant names when no resource is asked (DESIGN.md §8, §5 provider scopes included).
      aud: audienceClaim(grantAudience({ client: caller.client, issuer: deps.issuer, scope: grant.scope, resources: grant.resources })),
      iss: deps.issuer,
      exp: epochSeconds(record.expiresAt),
      iat: epochSeconds(record.issuedAt),
      jti: record.digest.slice(0, 32),
      token_use: 'refresh_token',
    };
  }

  return async (app) => {
    app.post('/introspect', async (request, reply) =>
      handleFormEndpoint(deps, request, reply, async (params, presented) => {
        // A resource server's label may be an https URL: it names that resource server, never a document to fetch.
        const claimsResourceServer = presented.claimedClientId !== undefined && deps.resourceServers.has(presented.claimedClientId);
        const clients = claimsResourceServer ? NO_CLIENT : await claimedClient(deps.clients, presented);
        const { caller, assertionReplay } = await authenticateIntrospectionCaller(presented, clients, deps.resourceServers, verifyAssertion);
        request.clientId = caller.kind === 'client' ? caller.client.clientId : caller.label;
        const token = single(params, 'token');
        if (token === undefined) throw invalidRequest('token is required');
        await useCredentialsOnce(store, { assertion: assertionReplay, proof: undefined }, deps.now());
        // token_type_hint only orders the attempts (RFC 7662 §2.1); the shape tells them apart anyway.
        const body = looksLikeJwt(token) ? await accessToken(caller, token) : await refreshToken(caller, token);
        return { body };
      }),
    );
  };
}

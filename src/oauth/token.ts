/** POST /token (RFC 6749 §3.2): parse, authenticate the client, hand over to the grant's handler. */
import type { FastifyPluginAsync } from 'fastify';
import type { ClientDirectory } from '../clients/directory.js';
import type { VerifiedAccessTokens } from '../crypto/jwt.js';
import type { SigningKeys } from '../crypto/keys.js';
import type { Metrics } from '../http/metrics.js';
import { single } from '../http/params.js';
import { OAuthError } from '../policy/oauth-error.js';
import { proofRequirement } from '../policy/sender-constraint.js';
import type { AuthorizationCodeStore, DeviceCodeStore, GrantStore, RefreshTokenStore, ReplayStore } from '../store/types.js';
import { assertionVerifier, authenticateClient, claimedClient } from '../clients/authentication.js';
import type { AccessTokenStateSources } from '../tokens/access-token-state.js';
import type { TokenSigner } from '../tokens/response.js';
import { proofOf } from './dpop-request.js';
import { handleFormEndpoint, type FormEndpointDeps } from './form-endpoint.js';
import { refuseSpentAssertion, useCredentialsOnce } from './one-time-credentials.js';
import { authorizationCodeGrant } from './grants/authorization-code.js';
import { clientCredentialsGrant } from './grants/client-credentials.js';
import { deviceCodeGrant } from './grants/device-code.js';
import { runGrant, type GrantHandler } from './grants/grant.js';
import { refreshTokenGrant } from './grants/refresh-token.js';
import { tokenExchangeGrant } from './grants/token-exchange.js';
import { exposeToRedirectOrigin } from '../http/cors.js';

/** The state /token reads and changes (token exchange reads grants and revocations through tokenState). */
export type TokenStores = GrantStore & AuthorizationCodeStore & RefreshTokenStore & DeviceCodeStore & ReplayStore;

export type GrantTable = ReadonlyMap<string, GrantHandler<unknown>>;

/** What /token uses, wired by buildApp: its own front and client authentication, and what its grants are given. */
export interface TokenRouteDeps extends FormEndpointDeps {
  readonly store: TokenStores;
  /** Clients by client_id, and the keys a private_key_jwt client's assertion is checked with (DESIGN.md §13). */
  readonly clients: Pick<ClientDirectory, 'find' | 'assertionKeysOf' | 'refetchedAssertionKeysOf' | 'rememberOrigins'>;
  readonly issuer: string;
  /** The keys in use now, read at each use: keys rotate while the server runs. */
  readonly keys: () => SigningKeys;
  readonly signer: TokenSigner;
  readonly tokenState: AccessTokenStateSources;
  readonly verifiedAccessTokens: VerifiedAccessTokens;
  /** Whether a grant's subject is still a user, or comes from a configured upstream (DESIGN.md §6). */
  readonly isKnownSubject: (subject: string) => boolean;
  readonly metrics: Pick<Metrics, 'tokensIssued' | 'refreshReuse'>;
}

/** One handler per grant_type, each given the narrow stores and services it uses (after fosite's compose/). */
export function grantTable(deps: TokenRouteDeps): GrantTable {
  const { store, issuer, signer, isKnownSubject, metrics } = deps;
  const handlers = [
    authorizationCodeGrant({ store, issuer, isKnownSubject, signer, metrics }),
    refreshTokenGrant({ store, issuer, isKnownSubject, signer, metrics }),
    clientCredentialsGrant({ issuer, signer }),
    deviceCodeGrant({ store, issuer, signer }),
    tokenExchangeGrant({ issuer, keys: deps.keys, verifiedAccessTokens: deps.verifiedAccessTokens, tokenState: deps.tokenState, signer }),
  ] as GrantHandler<unknown>[];
  return new Map(handlers.map((handler) => [handler.grantType, handler]));
}

export function tokenRoutes(deps: TokenRouteDeps): FastifyPluginAsync {
  const { store } = deps;
  const grants = grantTable(deps);
  const verifyAssertion = assertionVerifier(deps, '/token');
  return async (app) => {
    app.post('/token', async (request, reply) =>
      handleFormEndpoint(deps, request, reply, async (params, presented) => {
        const grantType = single(params, 'grant_type');
        if (grantType === undefined) throw new OAuthError('invalid_request', 'grant_type is required');
        const handler = grants.get(grantType);
        if (handler === undefined) throw new OAuthError('unsupported_grant_type', `grant_type "${grantType}" is not supported`);
        // RFC 9449 §5: a proof is judged before the client; neither records its jti until the grant has judged the request.
        const proof = await proofOf(deps, request);
        const { client, assertionReplay } = await authenticateClient(presented, await claimedClient(deps.clients, presented), verifyAssertion);
        exposeToRedirectOrigin(request, reply, client);
        // Only an assertion has something to look up: no promise is awaited for a secret or a public client.
        if (assertionReplay !== undefined) await refuseSpentAssertion(store, assertionReplay, deps.now());
        const unproven = proofRequirement(client, proof !== undefined);
        if (unproven !== undefined) throw unproven;
        const audit = (fields: Record<string, unknown>): void => {
          request.audit = fields;
        };
        const now = deps.now();
        // The request's one-time credentials are used up, all or none, before it changes state (a replay's revocation included).
        const beforeChanges = (): Promise<void> => useCredentialsOnce(store, { assertion: assertionReplay, proof: proof?.replay }, now);
        const body = await runGrant(handler, store, deps.metrics, { client, params, now, log: request.log, audit, beforeChanges, ...(proof !== undefined && { proofKey: proof.jkt }) });
        // A client that used a grant here is in use: its origins stay known to this process (another worker's, a restart's).
        deps.clients.rememberOrigins(client);
        return { body };
      }),
    );
  };
}

/**
 * POST /par (RFC 9126, DESIGN.md §13): a client pushes its authorization request, authenticated as at /token, and
 * gets a request_uri that /authorize takes once, for that client, within 60 s. The request is checked by the same
 * validation /authorize runs, its refusals answered as JSON.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ClientDirectory } from '../clients/directory.js';
import { newSecret } from '../crypto/random.js';
import { digestOf, isBase64url32Bytes } from '../crypto/digest.js';
import type { Params } from '../http/params.js';
import { OAuthError } from '../policy/oauth-error.js';
import type { PushedRequestRecord, PushedRequestStore, ReplayStore } from '../store/types.js';
import { AUTHORIZATION_PARAMETERS, validateAuthorizationRequest } from './authorization-request.js';
import { assertionVerifier, authenticateClient, claimedClient } from '../clients/authentication.js';
import { proofOf } from './dpop-request.js';
import { handleFormEndpoint, type FormEndpointDeps } from './form-endpoint.js';
import { useCredentialsOnce } from './one-time-credentials.js';
import { exposeToRedirectOrigin } from '../http/cors.js';

/** RFC 9126 §2.2: the request_uri is this URN and a random value. */
export const REQUEST_URI_PREFIX = 'urn:ietf:params:oauth:request_uri:';

/** DESIGN.md §13: a pushed request lives 60 s. */
export const PUSHED_REQUEST_LIFETIME_MS = 60_000;


/** The SHA-256 the store keeps of a request_uri of ours, or undefined when `requestUri` is not shaped like one. */
export function pushedRequestDigest(requestUri: string): string | undefined {
  if (!requestUri.startsWith(REQUEST_URI_PREFIX)) return undefined;
  const value = requestUri.slice(REQUEST_URI_PREFIX.length);
  return isBase64url32Bytes(value) ? digestOf(value) : undefined;
}

/**
 * The parameters /authorize will run with: those of the push it reads (neither client authentication, RFC 9126 §2.1,
 * nor a stranger's unknown parameters: an audit stored 64 KiB of junk per push), its client_id the authenticated
 * client's, and the key of the push's DPoP proof as dpop_jkt (RFC 9449 §10.1: the code will be bound to it).
 */
function authorizationParameters(params: Params, clientId: string, proofKey: string | undefined): Params {
  const kept = new Map<string, readonly string[]>([...params].filter(([name]) => AUTHORIZATION_PARAMETERS.has(name)));
  kept.set('client_id', [clientId]);
  if (proofKey === undefined) return kept;
  // RFC 9449 §10.1: dpop_jkt and a proof that disagree are refused; a repeated dpop_jkt was refused before.
  const named = params.get('dpop_jkt')?.[0];
  if (named !== undefined && named !== proofKey) throw new OAuthError('invalid_request', 'dpop_jkt names another key than the one of the DPoP proof');
  kept.set('dpop_jkt', [proofKey]);
  return kept;
}

/** What /par uses, wired by buildApp. */
export interface ParRouteDeps extends FormEndpointDeps {
  readonly store: PushedRequestStore & ReplayStore;
  /** Clients by client_id, and the keys a private_key_jwt client's assertion is checked with (DESIGN.md §13). */
  readonly clients: Pick<ClientDirectory, 'find' | 'assertionKeysOf' | 'refetchedAssertionKeysOf'>;
  readonly issuer: string;
}

export function parRoutes(deps: ParRouteDeps): FastifyPluginAsync {
  const { store } = deps;
  // RFC 9126 §2: a pushed request's assertion may name the token endpoint too (clients reuse their /token assertion code).
  const verifyAssertion = assertionVerifier(deps, '/par', '/token');
  return async (app) => {
    app.post('/par', async (request, reply) =>
      handleFormEndpoint(deps, request, reply, async (params, presented) => {
        // RFC 9449 §10.1: a DPoP proof at /par binds the code to its key; judged before the client, as at /token.
        const proof = await proofOf(deps, request);
        const { client, assertionReplay } = await authenticateClient(presented, await claimedClient(deps.clients, presented), verifyAssertion);
        exposeToRedirectOrigin(request, reply, client);
        request.clientId = client.clientId;
        const pushed = authorizationParameters(params, client.clientId, proof?.jkt);
        const validation = validateAuthorizationRequest(pushed, { found: true, client }, deps.issuer, 'par');
        // One validation, two renderings: what /authorize shows on a page or sends back to the client is JSON here.
        if (!validation.ok) {
          const error = 'page' in validation ? validation.page : validation.redirect.error;
          throw new OAuthError(error.code, error.description, 400);
        }
        const now = deps.now();
        const secret = newSecret();
        // Last, all or none: a push refused for one credential leaves the other usable (DESIGN.md §1).
        await useCredentialsOnce(store, { assertion: assertionReplay, proof: proof?.replay }, now);
        const record: PushedRequestRecord = { digest: secret.digest, clientId: client.clientId, parameters: [...pushed], expiresAt: now + PUSHED_REQUEST_LIFETIME_MS };
        await store.savePushedRequest(record);
        // Each push is kept on the server: it counts against the address like a login request (DESIGN.md §4).
        return { status: 201, kept: true, body: { request_uri: `${REQUEST_URI_PREFIX}${secret.value}`, expires_in: PUSHED_REQUEST_LIFETIME_MS / 1000 } };
      }),
    );
  };
}

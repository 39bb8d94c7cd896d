/** Validation of an authorization request (RFC 6749 §4.1.1, RFC 7636, RFC 8707, DESIGN.md §4). No I/O. */
import type { ClientRecord } from '../config/types.js';
import { isBase64url32Bytes } from '../crypto/digest.js';
import { askableScopes } from '../policy/grant-eligibility.js';
import { OAuthError } from '../policy/oauth-error.js';
import { all, checkLimits, LIMITS, repeatedParameter, single, type Params } from '../http/params.js';
import { decideAuthorizeResources } from '../policy/resource.js';
import { isUsableRedirectUri, redirectUriMatches, type LoopbackPorts } from '../policy/redirect-uri.js';
import { decideRequestedScope, parseScope } from '../policy/scope.js';
import type { ClientResolution } from '../clients/directory.js';
import { bounded } from '../log.js';
import type { PendingAuthorization } from '../store/types.js';

/** A validated request is what the store keeps while the person signs in. */
export type AuthorizationRequest = PendingAuthorization;

export type AuthorizationValidation =
  | { readonly ok: true; readonly request: AuthorizationRequest }
  /** Client or redirect URI not trusted: an error page, never a redirect. */
  | { readonly ok: false; readonly page: OAuthError }
  /** Everything else: back to the client with error, error_description, iss and state. */
  | { readonly ok: false; readonly redirect: { readonly error: OAuthError; readonly redirectUri: string; readonly state?: string } };

/**
 * Where the parameters come from: /authorize's query or form, a request pushed to /par and now used at /authorize
 * (RFC 9126 §4), or /par itself (RFC 9126 §2.1), which answers the same refusals as JSON.
 */
export type AuthorizationRequestSource = 'authorize' | 'pushed' | 'par';

/** DESIGN.md §3: configured clients get any loopback port only where they registered none; dynamic clients always. */
export const loopbackPortsOf = (client: ClientRecord): LoopbackPorts => (client.dynamic === undefined ? 'when-registered-without-port' : 'always');

/** The client and where it may be sent back: what must be trusted before any error may go back to the client. */
interface Target {
  readonly clientId: string;
  readonly client: ClientRecord;
  readonly redirectUri: string;
  readonly state?: string;
}

/** The client, its redirect URI and state; an error for the page (never a redirect) when any of them cannot be trusted. */
function trustedTarget(params: Params, resolution: ClientResolution, source: AuthorizationRequestSource): Target | OAuthError {
  const repeated = repeatedParameter(params, ['resource']);
  if (repeated !== undefined) return new OAuthError('invalid_request', `${repeated} appears more than once`);
  const clientId = single(params, 'client_id');
  if (clientId === undefined) return new OAuthError('invalid_request', 'client_id is required');
  if (!resolution.found) {
    const shown = bounded(clientId);
    const why = resolution.reason === undefined ? `unknown client "${shown}"` : `the client "${shown}" cannot be used: ${resolution.reason}`;
    return new OAuthError('invalid_client', why);
  }
  const client = resolution.client;
  // DESIGN.md §13 require_par: such a client's requests come through /par only.
  if (source === 'authorize' && client.requirePar === true) {
    return new OAuthError('invalid_request', 'this client must push its authorization requests to /par and send the request_uri it got (require_par)');
  }
  const redirectUri = single(params, 'redirect_uri');
  if (redirectUri === undefined) return new OAuthError('invalid_request', 'redirect_uri is required');
  // DESIGN.md §7: a URI no browser can be sent to is the error page, never a redirect that fails.
  if (!isUsableRedirectUri(redirectUri)) return new OAuthError('invalid_request', 'redirect_uri is not a valid URI (a port must be 1 to 65535)');
  if (!redirectUriMatches(client.redirectUris, redirectUri, loopbackPortsOf(client))) return new OAuthError('invalid_request', 'redirect_uri is not registered for this client');
  // RFC 6749 §4.1.2.1: state goes back exactly as sent, an empty one too; one too long to send back gets no redirect (DESIGN.md §7).
  const state = params.get('state')?.[0];
  if (state !== undefined && state.length > LIMITS.valueLength) return new OAuthError('invalid_request', `state is longer than ${LIMITS.valueLength} characters`);
  return { clientId, client, redirectUri, state };
}

/** What is wrong with the request's form (sizes, request objects, response type and mode), or undefined. */
function formError(params: Params, source: AuthorizationRequestSource): OAuthError | undefined {
  const limitError = checkLimits(params);
  if (limitError !== undefined) return limitError;
  // RFC 9126 §2.1: a pushed request cannot itself name a request_uri.
  if (source === 'par' && params.has('request_uri')) return new OAuthError('invalid_request', 'request_uri cannot be pushed to /par');
  if (params.has('request') || params.has('request_uri')) return new OAuthError('request_not_supported', 'request objects are not supported');
  const responseType = single(params, 'response_type');
  if (responseType === undefined) return new OAuthError('invalid_request', 'response_type is required');
  if (responseType !== 'code') return new OAuthError('unsupported_response_type', 'only response_type=code is supported');
  const responseMode = single(params, 'response_mode');
  if (responseMode !== undefined && responseMode !== 'query') return new OAuthError('invalid_request', 'only response_mode=query is supported');
  return undefined;
}

/** RFC 9700 §2.1.1: PKCE with S256 is required of every client. */
function codeChallengeOf(params: Params): string | OAuthError {
  const codeChallenge = single(params, 'code_challenge');
  if (codeChallenge === undefined) return new OAuthError('invalid_request', 'code_challenge is required (PKCE with S256)');
  if (single(params, 'code_challenge_method') !== 'S256') return new OAuthError('invalid_request', 'code_challenge_method must be S256');
  if (!isBase64url32Bytes(codeChallenge)) return new OAuthError('invalid_request', 'code_challenge must be a base64url SHA-256 value');
  return codeChallenge;
}

/** RFC 9449 §10: the key the code is to be bound to, when the request names one. */
function dpopJktOf(params: Params): string | undefined | OAuthError {
  if (!params.has('dpop_jkt')) return undefined;
  const jkt = single(params, 'dpop_jkt');
  // RFC 9449 §10: a JWK SHA-256 thumbprint (RFC 7638).
  if (jkt === undefined || !isBase64url32Bytes(jkt)) return new OAuthError('invalid_request', 'dpop_jkt must be the base64url SHA-256 JWK thumbprint of a DPoP key (RFC 9449 §10)');
  return jkt;
}

/** The scope the request asks, within what the client may ask. */
function scopeOf(params: Params, client: ClientRecord): readonly string[] | OAuthError {
  // DESIGN.md §4 seed rule: configured clients must send scope; a dynamic client without one gets its default (§9).
  const sentScope = single(params, 'scope');
  if (sentScope === undefined && client.defaultScope === undefined) return new OAuthError('invalid_request', 'scope is required');
  const scope = sentScope === undefined ? [...(client.defaultScope ?? [])] : parseScope(sentScope);
  if (scope === undefined) return new OAuthError('invalid_scope', 'scope is malformed');
  const scopeDecision = decideRequestedScope(scope, askableScopes(client));
  return scopeDecision.ok ? scopeDecision.value : scopeDecision.error;
}

/** OIDC Core §3.1.2.1: prompt and max_age, which decide whether the session will do. */
function interactionOf(params: Params): Pick<AuthorizationRequest, 'prompt' | 'maxAge'> | OAuthError {
  const prompt = single(params, 'prompt');
  if (prompt !== undefined && prompt !== 'none' && prompt !== 'login' && prompt !== 'consent') return new OAuthError('invalid_request', 'prompt must be none, login or consent');
  const maxAgeText = single(params, 'max_age');
  if (maxAgeText !== undefined && !/^\d{1,9}$/.test(maxAgeText)) return new OAuthError('invalid_request', 'max_age must be a number of seconds');
  return { prompt, maxAge: maxAgeText === undefined ? undefined : Number(maxAgeText) };
}

/**
 * Every parameter validateAuthorizationRequest reads: RFC 6749 §3.1 has /authorize ignore the rest, so /par keeps only
 * these (request and request_uri are read to be refused, and kept so that /authorize refuses them too).
 */
export const AUTHORIZATION_PARAMETERS: ReadonlySet<string> = new Set([
  'response_type', 'response_mode', 'client_id', 'redirect_uri', 'state', 'nonce', 'scope', 'resource',
  'code_challenge', 'code_challenge_method', 'dpop_jkt', 'prompt', 'max_age', 'request', 'request_uri',
]);

export function validateAuthorizationRequest(
  params: Params,
  /** What the request's client_id names, resolved beforehand (dynamic clients need I/O). */
  resolution: ClientResolution,
  issuer: string,
  source: AuthorizationRequestSource = 'authorize',
): AuthorizationValidation {
  const target = trustedTarget(params, resolution, source);
  if (target instanceof OAuthError) return { ok: false, page: target };
  const { clientId, client, redirectUri, state } = target;
  const back = (error: OAuthError): AuthorizationValidation => ({ ok: false, redirect: { error, redirectUri, state } });

  const wrongForm = formError(params, source);
  if (wrongForm !== undefined) return back(wrongForm);
  const codeChallenge = codeChallengeOf(params);
  if (codeChallenge instanceof OAuthError) return back(codeChallenge);
  const dpopJkt = dpopJktOf(params);
  if (dpopJkt instanceof OAuthError) return back(dpopJkt);
  const scope = scopeOf(params, client);
  if (scope instanceof OAuthError) return back(scope);
  const interaction = interactionOf(params);
  if (interaction instanceof OAuthError) return back(interaction);
  const resourceDecision = decideAuthorizeResources({ client, issuer, scope, resources: all(params, 'resource') });
  if (!resourceDecision.ok) return back(resourceDecision.error);

  return {
    ok: true,
    request: {
      clientId,
      redirectUri,
      state,
      nonce: single(params, 'nonce'),
      codeChallenge,
      scope,
      resources: resourceDecision.value,
      prompt: interaction.prompt,
      maxAge: interaction.maxAge,
      ...(dpopJkt !== undefined && { dpopJkt }),
    },
  };
}

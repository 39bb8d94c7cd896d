/** Validation of an authorization request (RFC 6749 §4.1.1, RFC 7636, RFC 8707, DESIGN.md §4). No I/O. */
import type { ClientRecord } from '../config/types.js';
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

const CODE_CHALLENGE = /^[A-Za-z0-9_-]{43}$/;

/**
 * Where the parameters come from: /authorize's query or form, a request pushed to /par and now used at /authorize
 * (RFC 9126 §4), or /par itself (RFC 9126 §2.1), which answers the same refusals as JSON.
 */
export type AuthorizationRequestSource = 'authorize' | 'pushed' | 'par';

/** DESIGN.md §3: configured clients get any loopback port only where they registered none; dynamic clients always. */
export const loopbackPortsOf = (client: ClientRecord): LoopbackPorts => (client.dynamic === undefined ? 'when-registered-without-port' : 'always');

export function validateAuthorizationRequest(
  params: Params,
  /** What the request's client_id names, resolved beforehand (dynamic clients need I/O). */
  resolution: ClientResolution,
  issuer: string,
  source: AuthorizationRequestSource = 'authorize',
): AuthorizationValidation {
  const repeated = repeatedParameter(params, ['resource']);
  if (repeated !== undefined) return { ok: false, page: new OAuthError('invalid_request', `${repeated} appears more than once`) };

  const clientId = single(params, 'client_id');
  if (clientId === undefined) return { ok: false, page: new OAuthError('invalid_request', 'client_id is required') };
  if (!resolution.found) {
    const shown = bounded(clientId);
    const why = resolution.reason === undefined ? `unknown client "${shown}"` : `the client "${shown}" cannot be used: ${resolution.reason}`;
    return { ok: false, page: new OAuthError('invalid_client', why) };
  }
  const client = resolution.client;
  // DESIGN.md §13 require_par: such a client's requests come through /par only.
  if (source === 'authorize' && client.requirePar === true) {
    return { ok: false, page: new OAuthError('invalid_request', 'this client must push its authorization requests to /par and send the request_uri it got (require_par)') };
  }
  const redirectUri = single(params, 'redirect_uri');
  if (redirectUri === undefined) return { ok: false, page: new OAuthError('invalid_request', 'redirect_uri is required') };
  // DESIGN.md §7: a URI no browser can be sent to is the error page, never a redirect that fails.
  if (!isUsableRedirectUri(redirectUri)) {
    return { ok: false, page: new OAuthError('invalid_request', 'redirect_uri is not a valid URI (a port must be 1 to 65535)') };
  }
  if (!redirectUriMatches(client.redirectUris, redirectUri, loopbackPortsOf(client))) {
    return { ok: false, page: new OAuthError('invalid_request', 'redirect_uri is not registered for this client') };
  }

  // RFC 6749 §4.1.2.1: state goes back exactly as sent, an empty one too; one too long to send back gets no redirect (DESIGN.md §7).
  const state = params.get('state')?.[0];
  if (state !== undefined && state.length > LIMITS.valueLength) {
    return { ok: false, page: new OAuthError('invalid_request', `state is longer than ${LIMITS.valueLength} characters`) };
  }
  const back = (error: OAuthError): AuthorizationValidation => ({ ok: false, redirect: { error, redirectUri, state } });

  const limitError = checkLimits(params);
  if (limitError !== undefined) return back(limitError);
  // RFC 9126 §2.1: a pushed request cannot itself name a request_uri.
  if (source === 'par' && params.has('request_uri')) return back(new OAuthError('invalid_request', 'request_uri cannot be pushed to /par'));
  if (params.has('request') || params.has('request_uri')) {
    return back(new OAuthError('request_not_supported', 'request objects are not supported'));
  }
  const responseType = single(params, 'response_type');
  if (responseType === undefined) return back(new OAuthError('invalid_request', 'response_type is required'));
  if (responseType !== 'code') return back(new OAuthError('unsupported_response_type', 'only response_type=code is supported'));
  const responseMode = single(params, 'response_mode');
  if (responseMode !== undefined && responseMode !== 'query') {
    return back(new OAuthError('invalid_request', 'only response_mode=query is supported'));
  }

  // RFC 9700 §2.1.1: PKCE with S256 is required of every client.
  const codeChallenge = single(params, 'code_challenge');
  if (codeChallenge === undefined) return back(new OAuthError('invalid_request', 'code_challenge is required (PKCE with S256)'));
  if (single(params, 'code_challenge_method') !== 'S256') {
    return back(new OAuthError('invalid_request', 'code_challenge_method must be S256'));
  }
  if (!CODE_CHALLENGE.test(codeChallenge)) {
    return back(new OAuthError('invalid_request', 'code_challenge must be a base64url SHA-256 value'));
  }

  // DESIGN.md §4 seed rule: configured clients must send scope; a dynamic client without one gets its default (§9).
  const sentScope = single(params, 'scope');
  if (sentScope === undefined && client.defaultScope === undefined) return back(new OAuthError('invalid_request', 'scope is required'));
  const scope = sentScope === undefined ? [...(client.defaultScope ?? [])] : parseScope(sentScope);
  if (scope === undefined) return back(new OAuthError('invalid_scope', 'scope is malformed'));
  // DESIGN.md §9: offline_access asks for nothing more than refresh_lifetime gives, so clients that refresh may send it.
  const askable = client.refreshLifetimeMs === undefined ? client.scopes : [...client.scopes, 'offline_access'];
  const scopeDecision = decideRequestedScope(scope, askable);
  if (!scopeDecision.ok) return back(scopeDecision.error);

  const prompt = single(params, 'prompt');
  if (prompt !== undefined && prompt !== 'none' && prompt !== 'login' && prompt !== 'consent') {
    return back(new OAuthError('invalid_request', 'prompt must be none, login or consent'));
  }
  const maxAgeText = single(params, 'max_age');
  if (maxAgeText !== undefined && !/^\d{1,9}$/.test(maxAgeText)) {
    return back(new OAuthError('invalid_request', 'max_age must be a number of seconds'));
  }

  const resourceDecision = decideAuthorizeResources({ client, issuer, scope: scopeDecision.value, resources: all(params, 'resource') });
  if (!resourceDecision.ok) return back(resourceDecision.error);

  return {
    ok: true,
    request: {
      clientId,
      redirectUri,
      state,
      nonce: single(params, 'nonce'),
      codeChallenge,
      scope: scopeDecision.value,
      resources: resourceDecision.value,
      prompt: prompt === 'none' || prompt === 'login' || prompt === 'consent' ? prompt : undefined,
      maxAge: maxAgeText === undefined ? undefined : Number(maxAgeText),
    },
  };
}

/**
 * The order in which each grant checks a token request, one function per grant (DESIGN.md §5, §6).
 * Pure like the rest of policy/: the handler parses the request and reads the state the request names,
 * these functions decide, and only then does the handler change state. A refusal carries `revokeGrant`
 * only in the one case DESIGN.md §1 allows: a used code or a rotated refresh token presented again by
 * the client it was issued to, in an otherwise valid request.
 */
import { askableScopes, DEVICE_CODE_GRANT, grantRefusal, type GrantEligibleClient } from './grant-eligibility.js';
import { allow, refuse, type Decision } from './decision.js';
import { OAuthError, invalidGrant } from './oauth-error.js';
import { decideResourceParameter, decideTokenAudience, isNameable, providerScopeOf, type Audience } from './resource.js';
import { decideRefreshScope, decideRequestedScope } from './scope.js';

/** What the policy needs to know of a client (a ClientRecord fits); which grants it may use is grant-eligibility.ts's. */
export interface PolicyClient extends GrantEligibleClient {
  readonly clientId: string;
  readonly audience: readonly string[];
  readonly scopes: readonly string[];
}

/** What bounds every token of a grant (DESIGN.md §5 "grant bound"). */
export interface GrantBounds {
  readonly id: string;
  readonly clientId: string;
  readonly scope: readonly string[];
  readonly resources: readonly string[];
}

export interface IssuedCode {
  readonly grantId: string;
  readonly clientId: string;
  readonly redirectUri: string;
  readonly codeChallenge: string;
}

export type CodeState =
  | { readonly status: 'active'; readonly code: IssuedCode; readonly grant: GrantBounds }
  | { readonly status: 'used'; readonly code: IssuedCode }
  | { readonly status: 'unknown' };

export type RefreshState =
  | { readonly status: 'active'; readonly grant: GrantBounds }
  /** A rotated token its own client presents again within its refresh_reuse_grace (DESIGN.md §6): a sibling, no revocation. */
  | { readonly status: 'within-grace'; readonly grant: GrantBounds }
  | { readonly status: 'rotated'; readonly grantId: string; readonly clientId: string; readonly rotatedAt?: number }
  | { readonly status: 'unknown' };

/** DESIGN.md §6: within `graceMs` after its rotation, a rotated token may be presented again by the same client. */
export function withinReuseGrace(rotatedAt: number, graceMs: number, now: number): boolean {
  return graceMs > 0 && now - rotatedAt <= graceMs;
}


export const badCode = (): OAuthError => invalidGrant('the authorization code is invalid, expired or already used');
export const badRefreshToken = (): OAuthError => invalidGrant('the refresh token is invalid, expired or revoked');

/** RFC 7636 §4.1: 43 to 128 unreserved characters. */
const VERIFIER = /^[A-Za-z0-9._~-]{43,128}$/;

const missing = (name: string): OAuthError => new OAuthError('invalid_request', `${name} is required`);

/** The parameters of a code exchange as sent (undefined when absent). */
export interface CodeExchangeParameters {
  readonly code?: string;
  readonly redirectUri?: string;
  readonly verifier?: string;
}

/** The request-only checks of a code exchange, before the code is looked up (DESIGN.md §5: grant type, then resource shape). */
export function checkCodeExchangeRequest(
  client: PolicyClient,
  requested: readonly string[],
  sent: CodeExchangeParameters,
): Decision<Required<CodeExchangeParameters>> {
  const ineligible = grantRefusal(client, 'authorization_code');
  if (ineligible !== undefined) return refuse(ineligible);
  const shape = decideResourceParameter('authorization_code', requested);
  if (!shape.ok) return shape;
  const { code, redirectUri, verifier } = sent;
  if (code === undefined) return refuse(missing('code'));
  if (redirectUri === undefined) return refuse(missing('redirect_uri'));
  if (verifier === undefined) return refuse(missing('code_verifier'));
  if (!VERIFIER.test(verifier)) return refuse(new OAuthError('invalid_request', 'code_verifier is malformed (RFC 7636 §4.1)'));
  return allow({ code, redirectUri, verifier });
}

/**
 * authorization_code (RFC 6749 §4.1.3, RFC 7636 §4.6, RFC 8707 §2.2), after the code is looked up: the code is the
 * client's, then redirect_uri and PKCE match; only then does a used code revoke its grant; then the audience.
 */
export function decideCodeExchange(input: {
  readonly client: PolicyClient;
  readonly issuer: string;
  readonly state: CodeState;
  readonly redirectUri: string;
  /** BASE64URL(SHA256(code_verifier)) of the request. */
  readonly verifierChallenge: string;
  readonly requested: readonly string[];
  /** Whether the grant's subject is still a user (or an upstream's) of the configuration. */
  readonly subjectExists: boolean;
}): Decision<Audience> {
  const { client, state } = input;
  if (state.status === 'unknown' || state.code.clientId !== client.clientId) return refuse(badCode());
  if (state.code.redirectUri !== input.redirectUri) return refuse(invalidGrant('redirect_uri does not match the authorization request'));
  if (state.code.codeChallenge !== input.verifierChallenge) return refuse(invalidGrant('code_verifier does not match the code_challenge'));
  // RFC 6749 §4.1.2: a replayed code revokes what it issued, once its own client has proven itself.
  if (state.status === 'used') return refuse(badCode(), state.code.grantId);
  const grant = narrowGrant(state.grant, client, input.issuer, input.subjectExists);
  if (!grant.ok) return grant;
  return decideTokenAudience({
    grantType: 'authorization_code',
    client,
    issuer: input.issuer,
    grantScope: grant.value.scope,
    tokenScope: grant.value.scope,
    grantResources: grant.value.resources,
    requested: input.requested,
  });
}

/** The request-only checks of a refresh, before the token is looked up (DESIGN.md §5 order). */
export function checkRefreshRequest(
  client: PolicyClient,
  requested: readonly string[],
  presented: string | undefined,
  requestedScope: readonly string[] | undefined,
): Decision<{ readonly presented: string; readonly requestedScope: readonly string[]; readonly lifetimeMs: number }> {
  const shape = decideResourceParameter('refresh_token', requested);
  if (!shape.ok) return shape;
  if (presented === undefined) return refuse(missing('refresh_token'));
  if (requestedScope === undefined) return refuse(new OAuthError('invalid_scope', 'scope is malformed'));
  const ineligible = grantRefusal(client, 'refresh_token');
  if (ineligible !== undefined) return refuse(ineligible);
  // grantRefusal allows refresh_token only to a client with a refresh lifetime.
  return allow({ presented, requestedScope, lifetimeMs: client.refreshLifetimeMs as number });
}

/**
 * DESIGN.md §6: every refresh checks the grant against the configuration as it is now. Scopes and resources the
 * client may no longer have are dropped (so an `aud` never names a server the client's audience no longer holds);
 * a grant that named resources and has none left, or was for the provider alone and has no provider scope left, is
 * refused, so narrowing never widens it.
 */
export function narrowGrant<G extends GrantBounds>(grant: G, client: PolicyClient, issuer: string, subjectExists: boolean): Decision<G> {
  if (!subjectExists) return refuse(invalidGrant('the person this grant was made for is no longer known'));
  // offline_access stays while the client still gets refresh tokens (DESIGN.md §9), so a client may send it back.
  const askable = askableScopes(client);
  const scope = grant.scope.filter((value) => askable.includes(value));
  // The issuer stays nameable while a provider scope does (DESIGN.md §5 provider scopes).
  const providerScoped = providerScopeOf(scope) !== undefined;
  const resources = grant.resources.filter((resource) => isNameable(client, resource) || (providerScoped && resource === issuer));
  // A grant for the provider alone (a provider scope) that lost every provider scope would become one for the client's
  // whole audience: refused like a grant whose named resources are all gone.
  const lostProvider = !providerScoped && providerScopeOf(grant.scope) !== undefined;
  if ((grant.resources.length > 0 && resources.length === 0) || lostProvider) {
    return refuse(invalidGrant('none of the resources of this grant may still be asked for by this client'));
  }
  // Nothing dropped (the usual case): the grant itself, not a copy made on every refresh.
  if (scope.length === grant.scope.length && resources.length === grant.resources.length) return allow(grant);
  return allow({ ...grant, scope, resources });
}

/**
 * refresh_token (RFC 6749 §6) after the token is looked up: a token of another client changes nothing; a rotated
 * token of this client is reuse and revokes its grant (RFC 9700 §4.14.2); then scope and audience (DESIGN.md §5).
 */
export function decideRefresh(input: {
  readonly client: PolicyClient;
  readonly issuer: string;
  readonly state: RefreshState;
  readonly requestedScope: readonly string[];
  readonly requested: readonly string[];
  /** Whether the grant's subject is still a user (or an upstream's) of the configuration. */
  readonly subjectExists: boolean;
}): Decision<{ readonly scope: string[]; readonly audience: Audience }> {
  const { client, state } = input;
  if (state.status === 'unknown') return refuse(badRefreshToken());
  if (state.status === 'rotated') return refuse(badRefreshToken(), state.clientId === client.clientId ? state.grantId : undefined);
  // A grant found through the grace is the client's own (the caller checked), and is judged like an active token's.
  if (state.grant.clientId !== client.clientId) return refuse(badRefreshToken());
  const grant = narrowGrant(state.grant, client, input.issuer, input.subjectExists);
  if (!grant.ok) return grant;
  const scope = decideRefreshScope(input.requestedScope, grant.value.scope);
  if (!scope.ok) return scope;
  const audience = decideTokenAudience({
    grantType: 'refresh_token',
    client,
    issuer: input.issuer,
    grantScope: grant.value.scope,
    tokenScope: scope.value,
    grantResources: grant.value.resources,
    requested: input.requested,
  });
  if (!audience.ok) return audience;
  return allow({ scope: scope.value, audience: audience.value });
}

/** client_credentials (RFC 6749 §4.4): confidential clients, tokens for the whole audience, scope within the client's. */
export function decideClientCredentials(input: {
  readonly client: PolicyClient;
  readonly issuer: string;
  readonly requestedScope: readonly string[] | undefined;
  readonly requested: readonly string[];
}): Decision<{ readonly scope: string[]; readonly audience: Audience }> {
  const { client, requestedScope } = input;
  const ineligible = grantRefusal(client, 'client_credentials');
  if (ineligible !== undefined) return refuse(ineligible);
  // DESIGN.md §5 order: the grant type that refuses resource comes first, before the scope, as at /device_authorization.
  const shape = decideResourceParameter('client_credentials', input.requested);
  if (!shape.ok) return shape;
  if (requestedScope === undefined) return refuse(new OAuthError('invalid_scope', 'scope is malformed'));
  const audience = decideTokenAudience({
    grantType: 'client_credentials',
    client,
    issuer: input.issuer,
    grantScope: requestedScope,
    tokenScope: requestedScope,
    grantResources: [],
    requested: input.requested,
  });
  if (!audience.ok) return audience;
  const scope = decideRequestedScope(requestedScope, client.scopes);
  if (!scope.ok) return scope;
  return allow({ scope: scope.value, audience: audience.value });
}

/** The request-only checks of a device-code poll (DESIGN.md §5: a `resource` is refused before anything else). */
export function checkDevicePollRequest(client: PolicyClient, requested: readonly string[], deviceCode: string | undefined): Decision<string> {
  const shape = decideResourceParameter('device_code', requested);
  if (!shape.ok) return shape;
  const ineligible = grantRefusal(client, DEVICE_CODE_GRANT);
  if (ineligible !== undefined) return refuse(ineligible);
  if (deviceCode === undefined) return refuse(missing('device_code'));
  return allow(deviceCode);
}

export interface DeviceState {
  readonly clientId: string;
  readonly status: 'pending' | 'approved' | 'denied' | 'redeemed';
  readonly scope: readonly string[];
  readonly intervalSeconds: number;
  readonly lastPolledAt?: number;
  readonly subject?: string;
  readonly expiresAt: number;
}

export type DevicePoll =
  | { readonly outcome: 'approved'; readonly audience: Audience }
  | { readonly outcome: 'waiting'; readonly tooFast: boolean }
  | { readonly outcome: 'closed'; readonly error: OAuthError };

export const badDeviceCode = (): OAuthError => invalidGrant('the device code is invalid or was already used');

/**
 * A device-code poll (RFC 8628 §3.4-3.5) after the device code is looked up. Only `approved` gives tokens;
 * `waiting` and `closed` are answers the handler gives after recording the poll (the interval rule needs it).
 */
export function decideDevicePoll(input: {
  readonly client: PolicyClient;
  readonly issuer: string;
  readonly state: DeviceState | undefined;
  readonly now: number;
}): Decision<DevicePoll> {
  const { client, state, now } = input;
  if (state === undefined || state.clientId !== client.clientId || state.status === 'redeemed') return refuse(badDeviceCode());
  if (state.expiresAt <= now) return allow({ outcome: 'closed', error: new OAuthError('expired_token', 'the device code has expired; start again') });
  if (state.status === 'denied') return allow({ outcome: 'closed', error: new OAuthError('access_denied', 'the person denied the request') });
  if (state.status === 'pending') {
    // RFC 8628 §3.5: polling faster than the interval earns slow_down.
    const tooFast = state.lastPolledAt !== undefined && now - state.lastPolledAt < state.intervalSeconds * 1000;
    return allow({ outcome: 'waiting', tooFast });
  }
  if (state.subject === undefined) return refuse(badDeviceCode());
  // DESIGN.md §5 "device flow": tokens always for the whole audience (no resources bound the grant).
  const audience = decideTokenAudience({
    grantType: 'device_code',
    client,
    issuer: input.issuer,
    grantScope: state.scope,
    tokenScope: state.scope,
    grantResources: [],
    requested: [],
  });
  if (!audience.ok) return audience;
  return allow({ outcome: 'approved', audience: audience.value });
}

/**
 * THE resource policy (RFC 8707 as DESIGN.md §5 applies it). Pure: no Fastify, no store, no clock.
 * Every function takes what it needs as values and returns a decision; a refused decision is an
 * OAuthError value, so callers have nothing to undo.
 */
import { allow, refuse, type Decision } from './decision.js';
import { OAuthError } from './oauth-error.js';
import { requestableReason } from './requestable.js';

/** Scopes whose tokens are for the provider alone (DESIGN.md §5 "provider scopes"). */
export const PROVIDER_SCOPES: readonly string[] = ['ssh', 'nfs', 'app_password', 'wireguard', 'wireguard_peers'];

/**
 * The token requests the resource rules know (DESIGN.md §5, §12): client_credentials and the device grant refuse
 * `resource`; code exchange, refresh and token exchange take it at most once.
 */
export type GrantType = 'authorization_code' | 'refresh_token' | 'client_credentials' | 'device_code' | 'token_exchange';

export interface ResourceClient {
  readonly clientId: string;
  /** In config order. */
  readonly audience: readonly string[];
}


/** A token's `aud`: a string when it has one value, an array otherwise (DESIGN.md §4). */
export type Audience = string | readonly string[];


export const notRequestable = (resource: string): OAuthError =>
  new OAuthError('invalid_target', `resource "${resource}" is not one this client may ask a token for`);

export const notInAuthorization = (resource: string): OAuthError =>
  new OAuthError('invalid_target', `resource "${resource}" was not part of the authorization`);

export const resourceRefusedByGrant = (): OAuthError =>
  new OAuthError('invalid_target', 'resource indicators are taken with the authorization_code and refresh_token grants');

export const resourceRepeated = (): OAuthError => new OAuthError('invalid_request', 'resource appears more than once');

export const providerOnly = (resource: string, scope: string): OAuthError =>
  new OAuthError('invalid_target', `resource "${resource}" cannot be named with scope "${scope}": its tokens are for the provider alone`);

/** The first provider scope among `scopes`, in their order, or undefined. */
export function providerScopeOf(scopes: readonly string[]): string | undefined {
  return scopes.find((scope) => PROVIDER_SCOPES.includes(scope));
}

/** True when `resource` may be named by this client: requestable and, character for character, an audience entry. */
export function isNameable(client: ResourceClient, resource: string): boolean {
  return requestableReason(resource) === undefined && client.audience.includes(resource);
}

/** Collapses repeats, keeping the order of first appearance (DESIGN.md §5, /authorize row). */
export function firstAppearances(values: readonly string[]): string[] {
  return [...new Set(values)];
}

/**
 * /authorize: every `resource` value is checked; one refused fails the whole request. Returns the
 * resources that bound the grant, repeats counted once, in first-appearance order.
 */
export function decideAuthorizeResources(input: {
  readonly client: ResourceClient;
  readonly issuer: string;
  readonly scope: readonly string[];
  readonly resources: readonly string[];
}): Decision<string[]> {
  const unique = firstAppearances(input.resources);
  const providerScope = providerScopeOf(input.scope);
  for (const resource of unique) {
    if (providerScope !== undefined) {
      if (resource !== input.issuer) return refuse(providerOnly(resource, providerScope));
    } else if (!isNameable(input.client, resource)) {
      return refuse(notRequestable(resource));
    }
  }
  return allow(unique);
}

/**
 * /token, the checks that need nothing but the request (DESIGN.md §5 order: grant type, then repeats),
 * so a handler can refuse before it reads any state. Returns the one named resource, if any.
 */
export function decideResourceParameter(grantType: GrantType, requested: readonly string[]): Decision<string | undefined> {
  if (requested.length > 0 && (grantType === 'client_credentials' || grantType === 'device_code')) {
    return refuse(resourceRefusedByGrant());
  }
  if (requested.length > 1) return refuse(resourceRepeated());
  return allow(requested[0]);
}

/**
 * /token: which `aud` the access token carries, or why the request is refused. Checks in the order
 * DESIGN.md §5 gives: grant type -> repeats -> requestable/audience -> authorization's resources;
 * with a provider scope in the token's or the grant's scope, the provider check replaces the last two.
 */
export function decideTokenAudience(input: {
  readonly grantType: GrantType;
  readonly client: ResourceClient;
  readonly issuer: string;
  /** The scope of the grant (for client_credentials: of the request). */
  readonly grantScope: readonly string[];
  /** The scope the token will carry (a refresh may narrow it). */
  readonly tokenScope: readonly string[];
  /** Resources named at /authorize; empty when none were, or for grants without an authorization request. */
  readonly grantResources: readonly string[];
  /** Raw `resource` values of the token request, repeats included. */
  readonly requested: readonly string[];
}): Decision<Audience> {
  const shape = decideResourceParameter(input.grantType, input.requested);
  if (!shape.ok) return shape;
  const named = shape.value;
  // The first provider scope of the token's scope, then of the grant's: no joined list is made on the usual path.
  const providerScope = providerScopeOf(input.tokenScope) ?? providerScopeOf(input.grantScope);
  if (providerScope !== undefined) {
    // Naming the issuer asks for what naming nothing gives: the provider alone.
    if (named !== undefined && named !== input.issuer) return refuse(providerOnly(named, providerScope));
  } else if (named !== undefined) {
    if (!isNameable(input.client, named)) return refuse(notRequestable(named));
    if (input.grantResources.length > 0 && !input.grantResources.includes(named)) return refuse(notInAuthorization(named));
    return allow(named);
  }
  const scope = [...input.tokenScope, ...input.grantScope];
  return allow(audienceClaim(grantAudience({ client: input.client, issuer: input.issuer, scope, resources: input.grantResources })));
}

/**
 * THE answer to "whom is this grant for when no resource is named?" (DESIGN.md §5 `aud`, after oidc-provider's
 * resolve_resource.js): the issuer alone with a provider scope; else the resources named at /authorize, in order;
 * else the client's whole audience, in config order (so also device flow tokens). The token endpoint, /introspect of
 * a refresh token and the consent page all ask this, so they cannot disagree.
 */
export function grantAudience(grant: {
  readonly client: ResourceClient;
  readonly issuer: string;
  /** The grant's scope (or, at /token, the token's and the grant's together). */
  readonly scope: readonly string[];
  /** Resources named at /authorize; empty when none were. */
  readonly resources: readonly string[];
}): readonly string[] {
  if (providerScopeOf(grant.scope) !== undefined) return [grant.issuer];
  return grant.resources.length > 0 ? grant.resources : grant.client.audience;
}

/** `aud` as RFC 9068 / DESIGN.md §4 writes it: a string for one value. */
export function audienceClaim(values: readonly string[]): Audience {
  return values.length === 1 ? (values[0] as string) : [...values];
}

/**
 * /userinfo (DESIGN.md §4): a token is ours when its `aud` holds the issuer or is the client's
 * whole audience, i.e. it was not narrowed to another server.
 */
export function isAddressedToProvider(aud: Audience, issuer: string, clientAudience: readonly string[]): boolean {
  const values = typeof aud === 'string' ? [aud] : aud;
  if (values.includes(issuer)) return true;
  // The whole audience as a set: /authorize may have named every entry in another order.
  const distinct = new Set(values);
  return distinct.size === new Set(clientAudience).size && clientAudience.every((entry) => distinct.has(entry));
}

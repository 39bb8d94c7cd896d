/**
 * Which grants a client may use (DESIGN.md §7, rules after the third outside review): the one place that decides it.
 * Every grant's request check, /device_authorization, and whoever issues a refresh token asks this module, so a
 * client never gets a grant by a path that forgot to look (a registered client minting client_credentials tokens).
 */
import { OAuthError } from './oauth-error.js';

/** RFC 8628 §3.4. */
export const DEVICE_CODE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code';
/** RFC 8693 §2.1. */
export const TOKEN_EXCHANGE_GRANT = 'urn:ietf:params:oauth:grant-type:token-exchange';

/** The grant_type values of /token, as sent on the wire. */
export type TokenGrantType = 'authorization_code' | 'refresh_token' | 'client_credentials' | typeof DEVICE_CODE_GRANT | typeof TOKEN_EXCHANGE_GRANT;

/** What the decision needs to know of a client (a ClientRecord fits). */
export interface GrantEligibleClient {
  readonly kind: 'confidential' | 'public' | 'device';
  readonly redirectUris: readonly string[];
  /** Present when the client gets refresh tokens at all (configured `refresh_lifetime`, or the dynamic block's). */
  readonly refreshLifetimeMs?: number;
  /** Present when the configuration gives the client a `token_exchange` block (DESIGN.md §12). */
  readonly tokenExchange?: unknown;
  /** Present for a client that is not in the config (DESIGN.md §9): registered, or named by a metadata document. */
  readonly dynamic?: {
    /** The grant_types it registered or its document lists; absent: the default of both. */
    readonly grantTypes?: readonly string[];
  };
}

/** Whether a dynamic client's registration (or document) names `grantType`; no grant_types at all names the default. */
export function dynamicClientDeclared(grantTypes: readonly string[] | undefined, grantType: 'authorization_code' | 'refresh_token'): boolean {
  return grantTypes === undefined || grantTypes.includes(grantType);
}

/**
 * Why `client` may not use `grantType` (`unauthorized_client`, RFC 6749 §5.2), or undefined when it may.
 * client_credentials: configured confidential clients only; a dynamic client (§9): authorization_code, plus
 * refresh_token when it declared it; the device grant: configured device clients; token exchange: configured
 * confidential clients with a `token_exchange` block.
 */
export function grantRefusal(client: GrantEligibleClient, grantType: TokenGrantType): OAuthError | undefined {
  const dynamic = client.dynamic !== undefined;
  switch (grantType) {
    case 'authorization_code':
      if (client.kind === 'device' || client.redirectUris.length === 0) return unauthorized('this client may not use the authorization_code grant');
      return undefined;
    case 'refresh_token':
      if (client.refreshLifetimeMs === undefined || (dynamic && !dynamicClientDeclared(client.dynamic?.grantTypes, 'refresh_token'))) {
        return unauthorized('this client does not get refresh tokens');
      }
      return undefined;
    case 'client_credentials':
      if (client.kind !== 'confidential') return unauthorized('client_credentials is for confidential clients');
      // A registration is open to anyone: its secret proves who registered, never that the operator trusts it.
      if (dynamic) return unauthorized('client_credentials is for confidential clients of the configuration, not for dynamic clients');
      return undefined;
    case DEVICE_CODE_GRANT:
      if (client.kind !== 'device' || dynamic) return unauthorized('this client may not use the device_code grant');
      return undefined;
    case TOKEN_EXCHANGE_GRANT:
      if (client.kind !== 'confidential' || dynamic || client.tokenExchange === undefined) {
        return unauthorized('this client may not use token exchange; it needs a token_exchange block in the configuration');
      }
      return undefined;
  }
}

/** Whether `client` may use `grantType`; grantRefusal says why not. */
export function mayUseGrant(client: GrantEligibleClient, grantType: TokenGrantType): boolean {
  return grantRefusal(client, grantType) === undefined;
}

/** How long a new refresh token of `client` lives, or undefined when it gets none (DESIGN.md §4 token response, §9). */
export function refreshLifetimeOf(client: GrantEligibleClient): number | undefined {
  return mayUseGrant(client, 'refresh_token') ? client.refreshLifetimeMs : undefined;
}

/** OpenID Connect's scope for refresh tokens (DESIGN.md §9). */
export const OFFLINE_ACCESS = 'offline_access';

/**
 * The scopes `client` may ask for and keep: its own, plus offline_access when it gets refresh tokens (DESIGN.md §9:
 * it asks for nothing more than `refresh_lifetime` gives), at /authorize, /device_authorization and every refresh.
 */
export function askableScopes(client: GrantEligibleClient & { readonly scopes: readonly string[] }): readonly string[] {
  return refreshLifetimeOf(client) === undefined ? client.scopes : [...client.scopes, OFFLINE_ACCESS];
}

const unauthorized = (description: string): OAuthError => new OAuthError('unauthorized_client', description);

/** Redirects back to a client (RFC 6749 §4.1.2, RFC 9207): shared by /authorize, its resume step, consent and logout. */
import type { OAuthError } from '../policy/oauth-error.js';

/** The client's redirect URI with response parameters added to its query. */
export function redirectWith(redirectUri: string, values: Record<string, string | undefined>): string {
  const url = new URL(redirectUri);
  for (const [name, value] of Object.entries(values)) if (value !== undefined) url.searchParams.append(name, value);
  return url.toString();
}

/** An error answer to an authorization request: error, error_description, state and iss (RFC 9207). */
export function errorRedirect(issuer: string, redirectUri: string, error: OAuthError, state: string | undefined): string {
  return redirectWith(redirectUri, { error: error.code, error_description: error.description, state, iss: issuer });
}

/**
 * Every error code Pinpoint answers with: RFC 6749 §4.1.2.1 and §5.2, RFC 8628 §3.5, RFC 7591 §3.2.2, OpenID Connect
 * Core §3.1.2.6, RFC 9449 §5, RFC 9101 §6.2 (request_uri, for RFC 9126), plus `not_found` and `server_error` for the HTTP surface. A misspelt code does not compile.
 */
export type OAuthErrorCode =
  | 'invalid_request'
  | 'invalid_client'
  | 'invalid_grant'
  | 'unauthorized_client'
  | 'unsupported_grant_type'
  | 'unsupported_response_type'
  | 'invalid_scope'
  | 'invalid_target'
  | 'access_denied'
  | 'consent_required'
  | 'login_required'
  | 'request_not_supported'
  | 'invalid_request_uri'
  | 'authorization_pending'
  | 'slow_down'
  | 'expired_token'
  | 'invalid_client_metadata'
  | 'invalid_redirect_uri'
  | 'invalid_dpop_proof'
  | 'invalid_token'
  | 'temporarily_unavailable'
  | 'server_error'
  | 'not_found';

/** The one error type of the HTTP surface: an OAuth error code, its description and HTTP status. */
export class OAuthError extends Error {
  readonly code: OAuthErrorCode;
  readonly description: string;
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;

  constructor(code: OAuthErrorCode, description: string, status = 400, headers: Record<string, string> = {}) {
    super(`${code}: ${description}`);
    this.name = 'OAuthError';
    this.code = code;
    this.description = description;
    this.status = status;
    this.headers = headers;
  }
}

export const invalidRequest = (description: string): OAuthError => new OAuthError('invalid_request', description);

/** RFC 6749 §5.2: 401 invalid_client carries a Basic challenge. */
export const invalidClient = (description = 'client authentication failed'): OAuthError =>
  new OAuthError('invalid_client', description, 401, { 'WWW-Authenticate': 'Basic realm="pinpoint"' });

export const invalidGrant = (description: string): OAuthError => new OAuthError('invalid_grant', description);

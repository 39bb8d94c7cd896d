/** The one error type of the HTTP surface: an OAuth error code, its description and HTTP status. */
export class OAuthError extends Error {
  readonly code: string;
  readonly description: string;
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;

  constructor(code: string, description: string, status = 400, headers: Record<string, string> = {}) {
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

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

/** A store outage: DESIGN.md §7 says 503 temporarily_unavailable, and the server recovers by itself. */
export const storeUnavailable = (): OAuthError =>
  new OAuthError('temporarily_unavailable', 'the state store is unreachable; try again shortly', 503, { 'Retry-After': '5' });

/** Raised when the store cannot be reached, so routes can answer 503 instead of 500. */
export class StoreUnavailableError extends Error {
  constructor(cause: unknown) {
    super('state store unavailable', { cause });
    this.name = 'StoreUnavailableError';
  }
}

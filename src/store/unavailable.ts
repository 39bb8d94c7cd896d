/**
 * Raised by every store when its backend cannot be reached: an OAuthError (503 temporarily_unavailable, DESIGN.md §7)
 * with the backend's error as its cause, so any route renders it like every other refusal and the server recovers
 * by itself when the store returns.
 */
import { OAuthError } from '../policy/oauth-error.js';

export class StoreUnavailableError extends OAuthError {
  constructor(cause: unknown) {
    super('temporarily_unavailable', 'the state store is unreachable; try again shortly', 503, { 'Retry-After': '5' });
    this.name = 'StoreUnavailableError';
    this.cause = cause;
  }
}

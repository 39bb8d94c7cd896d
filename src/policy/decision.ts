/** What every policy function answers: a value, or the refusal (DESIGN.md §1: errors are values of one OAuthError type). */
import type { OAuthError } from './oauth-error.js';

/** `revokeGrant` names the grant to revoke when the refusal is a detected replay (DESIGN.md §6), and only then. */
export type Decision<T> =
  | { readonly ok: true; readonly value: T }
  | { readonly ok: false; readonly error: OAuthError; readonly revokeGrant?: string };

export const allow = <T>(value: T): Decision<T> => ({ ok: true, value });

export const refuse = <T>(error: OAuthError, revokeGrant?: string): Decision<T> =>
  revokeGrant === undefined ? { ok: false, error } : { ok: false, error, revokeGrant };

/** Decisions every store makes alike, memory and SQL: written once here, applied by memory.ts and by the SQL of sql.ts. */
import type { RefreshTokenRecord, StoredKey } from './types.js';

/** How long a grant outlives its last refresh token: the grant's row is rewritten at most once per this, per grant. */
export const GRANT_EXPIRY_SLACK_MS = 24 * 3_600_000;

/** Device records stay this long after expiry so polling still answers expired_token (RFC 8628 §3.5). */
export const DEVICE_EXPIRY_SLACK_MS = 10 * 60_000;

/** What a new refresh token does to its grant: a grant that would expire before `before` now expires at `expiresAt`. */
export interface GrantExtension {
  readonly grantId: string;
  readonly before: number;
  readonly expiresAt: number;
}

/** The grant-expiry rule (types.ts Grant.expiresAt): a grant outlives each of its refresh tokens by GRANT_EXPIRY_SLACK_MS. */
export const grantExtension = (token: RefreshTokenRecord): GrantExtension => ({
  grantId: token.grantId,
  before: token.expiresAt,
  expiresAt: token.expiresAt + GRANT_EXPIRY_SLACK_MS,
});

/** The order loadOrCreateKeys answers in: oldest first, then by kid (code unit order). */
export const oldestKeyFirst = (a: StoredKey, b: StoredKey): number =>
  a.createdAt - b.createdAt || (a.kid < b.kid ? -1 : a.kid > b.kid ? 1 : 0);

/** Decisions every store makes alike, memory and SQL: written once here, applied by memory.ts and by the SQL of sql.ts. */
import type { Grant, GrantFilter, RefreshTokenRecord, StoredKey } from './types.js';

/** How long a grant outlives its last refresh token: the grant's row is rewritten at most once per this, per grant. */
export const GRANT_EXPIRY_SLACK_MS = 24 * 3_600_000;

/**
 * Sessions one person may hold at once; signing in again beyond it ends their oldest (by expiry). A person uses a few
 * browsers, never hundreds: without it, anyone with an account (an upstream's included) could fill the store by
 * signing in again and again.
 */
export const MAX_SESSIONS_PER_SUBJECT = 100;

/** Device records stay this long after expiry so polling still answers expired_token (RFC 8628 §3.5). */
export const DEVICE_EXPIRY_SLACK_MS = 10 * 60_000;

/** What a write does to its grant's expiry: a grant that would expire before `before` now expires at `expiresAt`. */
export interface GrantExtension {
  readonly before: number;
  readonly expiresAt: number;
}

/** The grant-expiry rule (types.ts Grant.expiresAt): a grant outlives each of its refresh tokens by GRANT_EXPIRY_SLACK_MS. */
export const grantExtension = (token: RefreshTokenRecord): GrantExtension => ({
  before: token.expiresAt,
  expiresAt: token.expiresAt + GRANT_EXPIRY_SLACK_MS,
});

/**
 * Whether a grant whose expiry was read as `knownExpiresAt` (undefined: not read) may still need `extension`. An
 * expiry only grows until the grant is deleted, so one that already reached `before` needs no write.
 */
export const mayNeedExtension = (knownExpiresAt: number | undefined, extension: GrantExtension): boolean =>
  knownExpiresAt === undefined || knownExpiresAt < extension.before;

/** A code exchange keeps its grant at least until its access token expires, so /introspect finds it (DESIGN.md §8). */
export const grantKeptUntil = (grantUntil: number): GrantExtension => ({ before: grantUntil, expiresAt: grantUntil });

/** A grant's expiry after `extension`: extended or left alone, never shortened (the SQL: `expires_at < before`). */
export const extendedExpiry = (expiresAt: number, extension: GrantExtension): number =>
  expiresAt < extension.before ? extension.expiresAt : expiresAt;

/** The grant-liveness rule: a grant lives while `now` is before its expiry (the SQL: `expires_at > now`). */
export const grantLives = (grant: Pick<Grant, 'expiresAt'>, now: number): boolean => grant.expiresAt > now;

/** Whether `grant` is one of those `filter` names (the SQL: sql.ts GRANT_FILTERS). */
export const grantMatches = (grant: Grant, filter: GrantFilter): boolean =>
  (filter.subject === undefined || grant.subject === filter.subject) && (filter.clientId === undefined || grant.clientId === filter.clientId);

/** Code unit order, the same in every store (a database's collation may differ). */
const byCodeUnits = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/** The order listKeys and loadOrCreateKeys answer in: oldest first, then by kid. */
export const oldestKeyFirst = (a: StoredKey, b: StoredKey): number => a.createdAt - b.createdAt || byCodeUnits(a.kid, b.kid);

/** The order listGrants answers in: oldest first, then by id. */
export const oldestGrantFirst = (a: Grant, b: Grant): number => a.createdAt - b.createdAt || byCodeUnits(a.id, b.id);

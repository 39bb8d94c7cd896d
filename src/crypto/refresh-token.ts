/** The refresh token format: `<grant id>.<secret>`, so the store finds a token by its grant in one indexed read. */
import { digestOf } from './digest.js';
import { randomText } from './random.js';

/** A refresh token as the store keeps it: its SHA-256, never the token. */
export interface RefreshTokenRecord {
  readonly digest: string;
  readonly grantId: string;
  readonly issuedAt: number;
  readonly expiresAt: number;
  /** RFC 9449 §5: the JWK thumbprint (RFC 7638) of the DPoP key a public client's refresh token is bound to. */
  readonly boundKey?: string;
}

const SEPARATOR = '.';
/** Grant ids are UUIDs; anything else before the separator is not one of our tokens. */
const GRANT_ID_SHAPE = /^[0-9A-Za-z-]{1,64}$/;

/**
 * A fresh refresh token of `grantId` living `lifetimeMs` from `issuedAt`, bound to `boundKey` when given: the value for
 * the client and the record the store keeps.
 */
export function newRefreshToken(grantId: string, issuedAt: number, lifetimeMs: number, boundKey?: string): { value: string; record: RefreshTokenRecord } {
  const value = `${grantId}${SEPARATOR}${randomText(32)}`;
  // The key's spread last: a literal that starts with an object spread takes V8's slow path.
  return { value, record: { digest: digestOf(value), grantId, issuedAt, expiresAt: issuedAt + lifetimeMs, ...(boundKey !== undefined && { boundKey }) } };
}

/** The grant a presented refresh token names and the token's digest; undefined when it is not shaped like one of ours. */
export function refreshTokenKey(presented: string): { grantId: string; digest: string } | undefined {
  const separator = presented.indexOf(SEPARATOR);
  if (separator <= 0) return undefined;
  const grantId = presented.slice(0, separator);
  if (!GRANT_ID_SHAPE.test(grantId)) return undefined;
  return { grantId, digest: digestOf(presented) };
}

/** SHA-256 digests: what the store keeps of every secret, and the hashes PKCE and at_hash need. */
import { hash, timingSafeEqual } from 'node:crypto';

/** crypto.hash (Node 20.12+) makes no Hash object per digest, which /token pays for on every request. */
export const sha256 = (data: string): Buffer => hash('sha256', data, 'buffer');

/** The hex SHA-256 the store keeps of a code, refresh token, device code or session id (hex straight from the hash: no Buffer between). */
export const digestOf = (secret: string): string => hash('sha256', secret, 'hex');

/** True when `presented` hashes to `expected` (a SHA-256); compares digests, so the time does not depend on the lengths. */
export function matchesDigest(presented: string, expected: Buffer): boolean {
  const digest = sha256(presented);
  return digest.length === expected.length && timingSafeEqual(digest, expected);
}

/** 32 bytes in base64url without padding: a SHA-256 as sent (PKCE challenge, JWK thumbprint) or one of our random secrets. */
export const isBase64url32Bytes = (text: string): boolean => /^[A-Za-z0-9_-]{43}$/.test(text);

/** RFC 7636 §4.6: BASE64URL(SHA256(code_verifier)). */
export const pkceChallengeOf = (verifier: string): string => hash('sha256', verifier, 'base64url');

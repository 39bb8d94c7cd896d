/** PKCE (RFC 7636) pairs for seeded codes, S256 only as Pinpoint requires. */
import { createHash, randomBytes } from 'node:crypto';

/** 43 characters of the unreserved set (RFC 7636 §4.1). */
export const newVerifier = (): string => randomBytes(32).toString('base64url');

export const challengeOf = (verifier: string): string => createHash('sha256').update(verifier, 'ascii').digest('base64url');

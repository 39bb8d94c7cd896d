/** What a JWT used once (a DPoP proof, a client assertion) leaves to record, and the jti shape both accept (RFC 7519 §4.1.7). */

/** A jti longer than this is no random identifier; refused so the store never keys on attacker-sized text. */
export const MAX_JTI_LENGTH = 256;

/** True for a jti the store may key on: a string of 1 to MAX_JTI_LENGTH characters. */
export const isUsableJti = (jti: unknown): jti is string => typeof jti === 'string' && jti.length > 0 && jti.length <= MAX_JTI_LENGTH;

/** Recorded as used (ReplayStore.markAllUsedOnce) under a fixed-length id, until the JWT could no longer be accepted. */
export interface UsedOnce {
  readonly id: string;
  readonly expiresAt: number;
}

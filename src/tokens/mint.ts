/** Minting of access tokens (RFC 9068 JWTs) and ID tokens (OIDC Core §2). */
import { randomFillSync, sign } from 'node:crypto';
import { SignJWT } from 'jose';
import type { Audience } from '../policy/resource.js';
import type { RefreshTokenRecord, SubjectClaims } from '../store/types.js';
import type { SigningKey, SigningKeys } from './keys.js';
import { sha256 } from './sha256.js';

export interface AccessTokenInput {
  readonly issuer: string;
  readonly subject: string;
  readonly clientId: string;
  readonly audience: Audience;
  readonly scope: readonly string[];
  readonly lifetimeSeconds: number;
  readonly authTime?: number;
}

/** Seconds since the epoch, as JWT NumericDate wants. */
export const epochSeconds = (ms: number): number => Math.floor(ms / 1000);

export async function mintAccessToken(keys: SigningKeys, input: AccessTokenInput, now: number): Promise<string> {
  const iat = epochSeconds(now);
  const claims: Record<string, unknown> = {
    iss: input.issuer,
    sub: input.subject,
    aud: input.audience,
    exp: iat + input.lifetimeSeconds,
    iat,
    jti: randomText(16),
    client_id: input.clientId,
    scope: input.scope.join(' '),
  };
  if (input.authTime !== undefined) claims.auth_time = epochSeconds(input.authTime);
  return signEs256(accessTokenHeader(keys.accessToken), claims, keys.accessToken);
}

/** The encoded protected header of access tokens (RFC 9068 §2.1), once per key. */
const accessTokenHeaders = new WeakMap<SigningKey, string>();

function accessTokenHeader(key: SigningKey): string {
  let encoded = accessTokenHeaders.get(key);
  if (encoded === undefined) {
    encoded = Buffer.from(JSON.stringify({ alg: 'ES256', typ: 'at+jwt', kid: key.kid })).toString('base64url');
    accessTokenHeaders.set(key, encoded);
  }
  return encoded;
}

/**
 * The compact JWS jose's SignJWT would make (RFC 7515 §7.1; ES256 signature as R || S, RFC 7518 §3.4),
 * signed synchronously with node:crypto: jose signs through WebCrypto, a thread-pool job that costs about
 * twice the CPU per token on one core (bench/RESULTS.md). jose still makes, exports and verifies the keys.
 */
function signEs256(encodedHeader: string, claims: Record<string, unknown>, key: SigningKey): string {
  if (key.alg !== 'ES256') throw new Error(`access tokens are signed with ES256, not ${key.alg}`);
  const signingInput = `${encodedHeader}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}`;
  const signature = sign('sha256', Buffer.from(signingInput), { key: key.privateKey, dsaEncoding: 'ieee-p1363' });
  return `${signingInput}.${signature.toString('base64url')}`;
}

/** OIDC Core §3.1.3.6: left half of SHA-256 of the access token, base64url. */
export function accessTokenHash(accessToken: string): string {
  const digest = sha256(accessToken);
  return digest.subarray(0, digest.length / 2).toString('base64url');
}

export interface IdTokenInput {
  readonly issuer: string;
  readonly subject: string;
  readonly clientId: string;
  readonly scope: readonly string[];
  readonly claims: SubjectClaims;
  readonly authTime: number;
  readonly nonce?: string;
  readonly accessToken: string;
  readonly lifetimeSeconds: number;
}

/** The profile claims a scope releases (OIDC Core §5.4). */
export function releasedClaims(scope: readonly string[], claims: SubjectClaims): Record<string, string> {
  const released: Record<string, string> = {};
  if (scope.includes('email') && claims.email !== undefined) released.email = claims.email;
  if (scope.includes('profile') && claims.name !== undefined) released.name = claims.name;
  return released;
}

export async function mintIdToken(keys: SigningKeys, input: IdTokenInput, now: number): Promise<string> {
  const iat = epochSeconds(now);
  const claims: Record<string, unknown> = {
    iss: input.issuer,
    sub: input.subject,
    aud: input.clientId,
    exp: iat + input.lifetimeSeconds,
    iat,
    auth_time: epochSeconds(input.authTime),
    at_hash: accessTokenHash(input.accessToken),
    ...releasedClaims(input.scope, input.claims),
  };
  if (input.nonce !== undefined) claims.nonce = input.nonce;
  return new SignJWT(claims).setProtectedHeader({ alg: 'RS256', typ: 'JWT', kid: keys.idToken.kid }).sign(keys.idToken.privateKey);
}

/** A fresh opaque secret (authorization code, device code, session id) and the SHA-256 digest the store keeps. */
export function newSecret(): { value: string; digest: string } {
  const value = randomText(32);
  return { value, digest: digestOf(value) };
}

const REFRESH_TOKEN_SEPARATOR = '.';
/** Grant ids are UUIDs; anything else before the separator is not one of our tokens. */
const GRANT_ID_SHAPE = /^[0-9A-Za-z-]{1,64}$/;

/**
 * A fresh refresh token of `grantId`, `<grant id>.<secret>`, living `lifetimeMs` from `issuedAt`: the value for
 * the client and the record the store keeps. The store keys refresh tokens by grant and digest, so a rotation
 * writes the one index page the grant's tokens share, not pages spread over the whole table (bench/RESULTS.md).
 * The grant id is a random handle; the secret makes the token unguessable.
 */
export function newRefreshToken(grantId: string, issuedAt: number, lifetimeMs: number): { value: string; record: RefreshTokenRecord } {
  const value = `${grantId}${REFRESH_TOKEN_SEPARATOR}${randomText(32)}`;
  return { value, record: { digest: digestOf(value), grantId, issuedAt, expiresAt: issuedAt + lifetimeMs } };
}

/** The grant a presented refresh token names and the token's digest; undefined when it is not shaped like one of ours. */
export function refreshTokenKey(presented: string): { grantId: string; digest: string } | undefined {
  const separator = presented.indexOf(REFRESH_TOKEN_SEPARATOR);
  if (separator <= 0) return undefined;
  const grantId = presented.slice(0, separator);
  if (!GRANT_ID_SHAPE.test(grantId)) return undefined;
  return { grantId, digest: digestOf(presented) };
}

/** The hex SHA-256 the store keeps of a code, refresh token, device code or session id. */
export const digestOf = (secret: string): string => sha256(secret).toString('hex');

/** CSPRNG bytes drawn 4 KiB at a time: one randomBytes() call per token costs several times the bytes themselves. */
const randomPool = Buffer.allocUnsafe(4096);
let randomOffset = randomPool.length;

/** `bytes` fresh random bytes, each used once, as base64url. */
function randomText(bytes: number): string {
  if (randomOffset + bytes > randomPool.length) {
    randomFillSync(randomPool);
    randomOffset = 0;
  }
  const text = randomPool.toString('base64url', randomOffset, randomOffset + bytes);
  randomOffset += bytes;
  return text;
}

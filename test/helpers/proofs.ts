/** DPoP proofs (RFC 9449) and client assertions (RFC 7523) as a client makes them, signed by jose; and bad ones on purpose. */
import { createHash, randomUUID } from 'node:crypto';
import { calculateJwkThumbprint, exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK, type JWTPayload } from 'jose';

export type ProofAlg = 'ES256' | 'EdDSA' | 'RS256' | 'PS256';

export interface ClientKey {
  readonly alg: ProofAlg;
  readonly privateKey: CryptoKey;
  readonly publicJwk: JWK;
  /** RFC 7638 SHA-256 thumbprint of the public key. */
  readonly jkt: string;
}

export async function newKey(alg: ProofAlg = 'ES256'): Promise<ClientKey> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
  const publicJwk = await exportJWK(publicKey);
  return { alg, privateKey, publicJwk, jkt: await calculateJwkThumbprint(publicJwk, 'sha256') };
}

/** The private JWK of a key (for a proof that wrongly carries it). */
export async function privateJwkOf(key: ClientKey): Promise<JWK> {
  return exportJWK(key.privateKey);
}

/** RFC 9449 §4.2 ath. */
export const athOf = (accessToken: string): string => createHash('sha256').update(accessToken).digest('base64url');

export interface ProofOptions {
  readonly htm?: string;
  readonly htu: string;
  /** Seconds since the epoch; default now. */
  readonly iat?: number;
  readonly jti?: string | null;
  readonly ath?: string;
  /** Header members replacing the usual ones (typ, alg, jwk); `undefined` removes one. */
  readonly header?: Record<string, unknown>;
  /** Claims replacing the usual ones; `undefined` removes one. */
  readonly claims?: Record<string, unknown>;
  /** Signs with this key while the header names `key` (a forged proof). */
  readonly signWith?: ClientKey;
}

function withoutUndefined(record: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(record).filter(([, value]) => value !== undefined));
}

/** A DPoP proof by `key` for a request to `options.htu` (POST unless told). */
export async function proof(key: ClientKey, options: ProofOptions): Promise<string> {
  const claims = withoutUndefined({
    htm: options.htm ?? 'POST',
    htu: options.htu,
    iat: options.iat ?? Math.floor(Date.now() / 1000),
    jti: options.jti === null ? undefined : (options.jti ?? randomUUID()),
    ...(options.ath !== undefined && { ath: options.ath }),
    ...options.claims,
  });
  const header = withoutUndefined({ typ: 'dpop+jwt', alg: key.alg, jwk: key.publicJwk, ...options.header });
  return new SignJWT(claims as JWTPayload).setProtectedHeader(header as { alg: string }).sign((options.signWith ?? key).privateKey);
}

export interface AssertionOptions {
  readonly clientId: string;
  readonly audience: string | string[];
  /** Seconds from now; default 60. `null` leaves exp out. */
  readonly expiresIn?: number | null;
  readonly jti?: string | null;
  readonly header?: Record<string, unknown>;
  readonly claims?: Record<string, unknown>;
}

/** A private_key_jwt client assertion (RFC 7523 §3) signed by `key`. */
export async function assertion(key: ClientKey | { alg: string; privateKey: CryptoKey | Uint8Array }, options: AssertionOptions): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  const claims = withoutUndefined({
    iss: options.clientId,
    sub: options.clientId,
    aud: options.audience,
    iat: now,
    exp: options.expiresIn === null ? undefined : now + (options.expiresIn ?? 60),
    jti: options.jti === null ? undefined : (options.jti ?? randomUUID()),
    ...options.claims,
  });
  const header = withoutUndefined({ alg: key.alg, ...options.header });
  return new SignJWT(claims as JWTPayload).setProtectedHeader(header as { alg: string }).sign(key.privateKey);
}

export const JWT_BEARER = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer';

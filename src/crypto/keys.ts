/** Signing keys: ES256 for access tokens, RS256 for ID tokens (the OIDC default every RP accepts). */
import { calculateJwkThumbprint, exportJWK, generateKeyPair, importJWK, type JWK } from 'jose';
import type { KeyStore, StoredKey } from '../store/types.js';

export type SigningAlgorithm = 'ES256' | 'RS256';

export interface SigningKey {
  readonly kid: string;
  readonly alg: SigningAlgorithm;
  /** Imported once as a CryptoKey: jose converts a KeyObject on every signature (about 40% slower, bench/sign.ts). */
  readonly privateKey: CryptoKey;
  readonly publicKey: CryptoKey;
  readonly publicJwk: JWK;
}

export interface SigningKeys {
  readonly accessToken: SigningKey;
  readonly idToken: SigningKey;
  /** Every stored key by kid, for verification. */
  readonly byKid: ReadonlyMap<string, SigningKey>;
  readonly jwks: { readonly keys: readonly JWK[] };
}

/** JWK members that are private (RFC 7518 §6.2.2, §6.3.2). */
const PRIVATE_MEMBERS = new Set(['d', 'p', 'q', 'dp', 'dq', 'qi', 'oth']);

async function makeStoredKey(alg: SigningAlgorithm, now: number): Promise<StoredKey> {
  const { privateKey } = await generateKeyPair(alg, { extractable: true, modulusLength: 2048 });
  const jwk = await exportJWK(privateKey);
  const kid = await calculateJwkThumbprint(jwk);
  return { kid, alg, privateJwk: JSON.stringify({ ...jwk, kid, alg }), createdAt: now };
}

async function importStoredKey(stored: StoredKey): Promise<SigningKey> {
  const jwk = JSON.parse(stored.privateJwk) as JWK;
  const publicMembers = Object.fromEntries(Object.entries(jwk).filter(([name]) => !PRIVATE_MEMBERS.has(name) && name !== 'key_ops' && name !== 'ext'));
  const publicJwk: JWK = { ...publicMembers, kid: stored.kid, alg: stored.alg, use: 'sig' };
  const privateKey = (await importJWK(jwk, stored.alg)) as CryptoKey;
  const publicKey = (await importJWK(publicJwk, stored.alg)) as CryptoKey;
  return { kid: stored.kid, alg: stored.alg, privateKey, publicKey, publicJwk };
}

/** Loads the keys from the store, creating them on the first start (the first instance's keys win). */
export async function loadSigningKeys(store: KeyStore, now = Date.now()): Promise<SigningKeys> {
  const candidates = [await makeStoredKey('ES256', now), await makeStoredKey('RS256', now)];
  const stored = await store.loadOrCreateKeys(candidates);
  const all = await Promise.all(stored.map(importStoredKey));
  const newest = (alg: SigningAlgorithm): SigningKey => {
    const index = stored.reduce((best, key, i) => (key.alg === alg && (best === -1 || key.createdAt > (stored[best] as StoredKey).createdAt) ? i : best), -1);
    if (index === -1) throw new Error(`no ${alg} signing key in the store`);
    return all[index] as SigningKey;
  };
  return {
    accessToken: newest('ES256'),
    idToken: newest('RS256'),
    byKid: new Map(all.map((key) => [key.kid, key])),
    jwks: { keys: all.map((key) => key.publicJwk) },
  };
}

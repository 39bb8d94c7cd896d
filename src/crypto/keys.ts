/** Signing keys: ES256 for access tokens, RS256 for ID tokens (the OIDC default every RP accepts). */
import { createPrivateKey, createPublicKey, type KeyObject } from 'node:crypto';
import { calculateJwkThumbprint, exportJWK, generateKeyPair, type JWK } from 'jose';
import type { KeyStore, StoredKey } from '../store/types.js';

export interface SigningKey {
  readonly kid: string;
  readonly alg: 'ES256' | 'RS256';
  /** Imported once at start, so no request pays for key parsing. */
  readonly privateKey: KeyObject;
  readonly publicKey: KeyObject;
  readonly publicJwk: JWK;
}

export interface SigningKeys {
  readonly accessToken: SigningKey;
  readonly idToken: SigningKey;
  readonly jwks: { readonly keys: readonly JWK[] };
}

async function makeStoredKey(alg: 'ES256' | 'RS256', now: number): Promise<StoredKey> {
  const { privateKey } = await generateKeyPair(alg, { extractable: true, modulusLength: 2048 });
  const jwk = await exportJWK(privateKey);
  const kid = await calculateJwkThumbprint(jwk);
  return { kid, alg, privateJwk: JSON.stringify({ ...jwk, kid, alg }), createdAt: now };
}

function importStoredKey(stored: StoredKey): SigningKey {
  const jwk = JSON.parse(stored.privateJwk) as JWK;
  const privateKey = createPrivateKey({ key: jwk as import('node:crypto').JsonWebKey, format: 'jwk' });
  const publicKey = createPublicKey(privateKey);
  const exported = publicKey.export({ format: 'jwk' }) as JWK;
  const publicJwk: JWK = { ...exported, kid: stored.kid, alg: stored.alg, use: 'sig' };
  return { kid: stored.kid, alg: stored.alg, privateKey, publicKey, publicJwk };
}

/** Loads the keys from the store, creating them on the first start (the first instance's keys win). */
export async function loadSigningKeys(store: KeyStore, now = Date.now()): Promise<SigningKeys> {
  const candidates = [await makeStoredKey('ES256', now), await makeStoredKey('RS256', now)];
  const stored = await store.loadOrCreateKeys(candidates);
  const newest = (alg: 'ES256' | 'RS256'): StoredKey => {
    const match = stored.filter((key) => key.alg === alg).sort((a, b) => b.createdAt - a.createdAt)[0];
    if (match === undefined) throw new Error(`no ${alg} signing key in the store`);
    return match;
  };
  const accessToken = importStoredKey(newest('ES256'));
  const idToken = importStoredKey(newest('RS256'));
  const all = stored.map(importStoredKey);
  return { accessToken, idToken, jwks: { keys: all.map((key) => key.publicJwk) } };
}

/** Signing keys for tests that need no reloading: the KeyRing's keys of one moment. */
import { KeyRing, type SigningKeys } from '../../src/crypto/keys.js';
import type { KeyStore } from '../../src/store/types.js';

export async function loadSigningKeys(store: KeyStore, now = Date.now()): Promise<SigningKeys> {
  return (await KeyRing.open(store, { now: () => now })).current;
}

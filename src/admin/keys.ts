/** `pinpoint keys list | rotate | retire KID` (DESIGN.md §2): signing keys in the store, as every instance sees them. */
import { KEY_TIMING, keyStates, retireKey, rotateKeys } from '../crypto/keys.js';
import type { KeyStore } from '../store/types.js';

export interface Output {
  write(text: string): void;
}

export async function listKeys(store: KeyStore, out: Output, json: boolean, now = Date.now()): Promise<number> {
  const stored = await store.listKeys();
  const states = keyStates(stored, now, KEY_TIMING.leadMs);
  const rows = stored.map((key) => ({ kid: key.kid, alg: key.alg, created: new Date(key.createdAt).toISOString(), state: states.get(key.kid) ?? 'retired' }));
  if (json) out.write(`${JSON.stringify(rows, null, 2)}\n`);
  else for (const row of rows) out.write(`${row.kid}  ${row.alg}  ${row.created}  ${row.state}\n`);
  return 0;
}

export async function rotate(store: KeyStore, out: Output, now = Date.now()): Promise<number> {
  const keys = await rotateKeys(store, now);
  for (const key of keys) out.write(`${key.kid}  ${key.alg}  new\n`);
  const published = KEY_TIMING.reloadMs / 1000;
  const signing = (KEY_TIMING.reloadMs + KEY_TIMING.leadMs) / 1000;
  out.write(`every instance publishes the new keys within ${published} s and signs with them within ${signing} s; the old keys stay published until retired\n`);
  return 0;
}

export async function retire(store: KeyStore, kid: string, out: Output, err: Output, now = Date.now()): Promise<number> {
  const result = await retireKey(store, kid, now);
  if (!result.ok) {
    err.write(`pinpoint: ${result.reason}\n`);
    return 1;
  }
  out.write(`${kid} retired: every instance stops publishing it within ${KEY_TIMING.reloadMs / 1000} s, and tokens it signed no longer verify\n`);
  return 0;
}

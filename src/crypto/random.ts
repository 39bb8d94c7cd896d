/** Fresh random values: opaque secrets, user codes, identifiers. */
import { randomFillSync, randomInt } from 'node:crypto';
import { digestOf } from './digest.js';

/** CSPRNG bytes drawn 4 KiB at a time: one randomBytes() call per token costs several times the bytes themselves. */
const pool = Buffer.allocUnsafe(4096);
let offset = pool.length;

/** `bytes` fresh random bytes, each used once, as base64url. */
export function randomText(bytes: number): string {
  if (offset + bytes > pool.length) {
    randomFillSync(pool);
    offset = 0;
  }
  const text = pool.toString('base64url', offset, offset + bytes);
  offset += bytes;
  return text;
}

/** A fresh opaque secret (authorization code, device code, session id) and the SHA-256 digest the store keeps. */
export function newSecret(): { value: string; digest: string } {
  const value = randomText(32);
  return { value, digest: digestOf(value) };
}

/** `length` characters drawn uniformly from `alphabet` (RFC 8628 §6.1 user codes). */
export function randomCode(alphabet: string, length: number): string {
  let code = '';
  for (let i = 0; i < length; i++) code += alphabet[randomInt(alphabet.length)];
  return code;
}

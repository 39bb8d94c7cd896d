import { randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto';

export interface ScryptCost {
  readonly N: number;
  readonly r: number;
  readonly p: number;
}

/** Cost parameters written into every new hash (OWASP: N = 2^17, r = 8, p = 1); old hashes keep theirs, so these can be raised. */
export const DEFAULT_COST: ScryptCost = { N: 2 ** 17, r: 8, p: 1 };
const SALT_BYTES = 16;
const KEY_BYTES = 32;

/** Bounds for parameters read from a stored hash, so a hostile hash cannot exhaust memory or CPU. */
const MAX_N = 2 ** 20;
const MAX_R = 32;
const MAX_P = 16;

const HASH_PATTERN = /^scrypt\$N=(\d{1,8}),r=(\d{1,3}),p=(\d{1,3})\$([A-Za-z0-9_-]{16,88})\$([A-Za-z0-9_-]{22,88})$/;

/**
 * One password check as plain data, so it can be posted to a hashing thread (crypto/password-pool.ts): the password
 * and what a stored hash says. Never logged.
 */
export interface PasswordCheck {
  readonly password: string;
  readonly cost: ScryptCost;
  readonly salt: Uint8Array;
  readonly key: Uint8Array;
}

/** Hashes a password with scrypt and a random salt: `scrypt$N=..,r=..,p=..$<salt>$<key>` (base64url). */
export async function hashPassword(password: string, cost: ScryptCost = DEFAULT_COST): Promise<string> {
  const salt = randomBytes(SALT_BYTES);
  const key = await deriveKey(password, salt, KEY_BYTES, cost);
  const { N, r, p } = cost;
  return `scrypt$N=${N},r=${r},p=${p}$${salt.toString('base64url')}$${key.toString('base64url')}`;
}

/**
 * True when the password matches the hash; a malformed hash gives false, never an exception. The check a hashing
 * thread runs, on libuv's thread pool beside WebCrypto's signatures: the server checks sign-ins through its
 * PasswordPool instead (DESIGN.md §11); this is for the CLI and tests.
 */
export async function verifyPassword(password: string, hash: string): Promise<boolean> {
  const check = passwordCheckOf(password, hash);
  if (!check) return false;
  return timingSafeEqual(await deriveKey(check.password, check.salt, check.key.length, check.cost), check.key);
}

/** True when the text has the shape of a `hashPassword` result with parameters this code accepts. */
export function isPasswordHash(text: string): boolean {
  return passwordCheckOf('', text) !== undefined;
}

/** The check of `password` against a stored hash, or undefined when the hash is malformed or out of bounds. */
export function passwordCheckOf(password: string, hash: string): PasswordCheck | undefined {
  const match = HASH_PATTERN.exec(hash);
  if (!match) return undefined;
  const [, n, r, p, salt, key] = match as unknown as [string, string, string, string, string, string];
  const cost = { N: Number(n), r: Number(r), p: Number(p) };
  const powerOfTwo = cost.N > 1 && (cost.N & (cost.N - 1)) === 0;
  if (!powerOfTwo || cost.N > MAX_N || cost.r < 1 || cost.r > MAX_R || cost.p < 1 || cost.p > MAX_P) return undefined;
  const saltBytes = Buffer.from(salt, 'base64url');
  const keyBytes = Buffer.from(key, 'base64url');
  if (saltBytes.length < 8 || keyBytes.length < 16 || keyBytes.length > 64) return undefined;
  return { password, cost, salt: saltBytes, key: keyBytes };
}

/**
 * A check that never matches, for an unknown user, at `cost`: what the known users' checks cost (typicalCost), so
 * timing does not tell which names exist.
 */
export function decoyCheck(password: string, cost: ScryptCost = DEFAULT_COST): PasswordCheck {
  return { password, cost, salt: randomBytes(SALT_BYTES), key: randomBytes(KEY_BYTES) };
}

/**
 * The cost most of these hashes have (the dearer on a tie; DEFAULT_COST for none): an unknown user's decoy check costs
 * that, since hashes made before N = 2^17 (0.2.0 wrote 2^15) still verify and answer four times sooner.
 */
export function typicalCost(hashes: Iterable<string>): ScryptCost {
  const counts = new Map<string, { cost: ScryptCost; count: number }>();
  for (const hash of hashes) {
    const cost = passwordCheckOf('', hash)?.cost;
    if (cost === undefined) continue;
    const key = `${cost.N}:${cost.r}:${cost.p}`;
    counts.set(key, { cost, count: (counts.get(key)?.count ?? 0) + 1 });
  }
  const work = (cost: ScryptCost): number => cost.N * cost.r * cost.p;
  let typical: { cost: ScryptCost; count: number } | undefined;
  for (const entry of counts.values()) {
    if (typical === undefined || entry.count > typical.count || (entry.count === typical.count && work(entry.cost) > work(typical.cost))) typical = entry;
  }
  return typical?.cost ?? DEFAULT_COST;
}

/** What a hashing thread gets for one check: scrypt's inputs, ready to run (the pool's thread code stays plain JavaScript). */
export interface HashingJob {
  readonly password: string;
  readonly salt: Uint8Array;
  readonly key: Uint8Array;
  readonly options: ScryptOptions;
}

export function hashingJob(check: PasswordCheck): HashingJob {
  return { ...scryptInputs(check.password, check.salt, check.cost), key: check.key };
}

/** The one scrypt derivation on this thread (libuv's pool); a hashing thread runs the same inputs with scryptSync. */
function deriveKey(password: string, salt: Uint8Array, length: number, cost: ScryptCost): Promise<Buffer> {
  const inputs = scryptInputs(password, salt, cost);
  return new Promise((resolve, reject) => {
    scrypt(inputs.password, inputs.salt, length, inputs.options, (error, derived) => (error ? reject(error) : resolve(derived)));
  });
}

/** scrypt's inputs for a password: what hashPassword, verifyPassword and the pool's threads all derive from. */
function scryptInputs(password: string, salt: Uint8Array, cost: ScryptCost): Omit<HashingJob, 'key'> {
  return { password: password.normalize('NFC'), salt, options: scryptOptions(cost) };
}

// scrypt needs about 128 * N * r * p bytes; Node's default cap (32 MiB) is too low for N=2^17, r=8 (128 MiB).
const scryptOptions = (cost: ScryptCost): ScryptOptions => ({ N: cost.N, r: cost.r, p: cost.p, maxmem: 256 * cost.N * cost.r * cost.p + 1024 * 1024 });

/**
 * A client's public JWK Set for private_key_jwt (RFC 7517 §5, RFC 7523 §2.2, DESIGN.md §13): from a `jwks_file`, a
 * metadata document's `jwks` or what its `jwks_uri` serves. Checked the same way wherever it comes from.
 */
import { importJWK, type JSONWebKeySet, type JWK } from 'jose';

/** The algorithms a client may sign assertions and DPoP proofs with (DESIGN.md §13): asymmetric only. */
export const ASYMMETRIC_ALGS = ['ES256', 'EdDSA', 'RS256', 'PS256'] as const;

/**
 * What signatures are verified with: ASYMMETRIC_ALGS, and "Ed25519", RFC 9864's fully specified name for EdDSA with an
 * Ed25519 key, which openid-client v6 (oauth4webapi) writes for every Ed25519 key: the same algorithm under its new name.
 */
export const VERIFIED_ALGS: readonly string[] = [...ASYMMETRIC_ALGS, 'Ed25519'];

/** RFC 7518 §6.2.2, §6.3.2, RFC 8037 §2, and `k` of a symmetric key: members only a private (or secret) key has. */
const PRIVATE_MEMBERS = ['d', 'p', 'q', 'dp', 'dq', 'qi', 'oth', 'k'] as const;

/** The private members `jwk` holds (none for a public key). */
export function privateMembersOf(jwk: Readonly<Record<string, unknown>>): string[] {
  return PRIVATE_MEMBERS.filter((member) => member in jwk);
}

/** Key types that can verify one of ASYMMETRIC_ALGS: RSA, EC P-256 and the Ed25519 octet key pair. */
/** RSA keys up to 4,096 bits (a modulus of 683 base64url characters). */
const MAX_RSA_MODULUS_CHARS = Math.ceil((4096 / 8) * (4 / 3));
/** A public exponent of at most 32 bits (6 base64url characters; 65537 is "AQAB"): a huge one makes each check ~20x dearer. */
const MAX_RSA_EXPONENT_CHARS = 6;

/** Why an RSA public key is one Pinpoint will not verify with (a stranger may choose it: DPoP, metadata documents), or undefined. */
export function rsaKeyProblem(jwk: Readonly<Record<string, unknown>>): string | undefined {
  if (typeof jwk.n !== 'string' || typeof jwk.e !== 'string') return 'is an RSA key without "n" and "e"';
  if (jwk.n.length > MAX_RSA_MODULUS_CHARS) return 'is an RSA key over 4,096 bits';
  if (jwk.e.length > MAX_RSA_EXPONENT_CHARS) return 'is an RSA key whose exponent is over 32 bits (65537 is usual)';
  return undefined;
}

function keyProblem(jwk: Readonly<Record<string, unknown>>): string | undefined {
  const secret = privateMembersOf(jwk);
  if (secret.length > 0) return `holds private key members (${secret.join(', ')}); publish only the public key`;
  if (jwk.kty === 'RSA') return rsaKeyProblem(jwk);
  if (jwk.kty === 'EC') {
    if (jwk.crv !== 'P-256') return `is an EC key on ${JSON.stringify(jwk.crv)}; only P-256 (ES256) is accepted`;
    return typeof jwk.x === 'string' && typeof jwk.y === 'string' ? undefined : 'is an EC key without "x" and "y"';
  }
  if (jwk.kty === 'OKP') {
    if (jwk.crv !== 'Ed25519') return `is an OKP key on ${JSON.stringify(jwk.crv)}; only Ed25519 (EdDSA) is accepted`;
    return typeof jwk.x === 'string' ? undefined : 'is an OKP key without "x"';
  }
  return `has key type ${JSON.stringify(jwk.kty)}; only RSA, EC (P-256) and OKP (Ed25519) keys can verify ${ASYMMETRIC_ALGS.join(', ')}`;
}

/** At most this many keys in one set: a client rotates through a few, not hundreds. */
const MAX_KEYS = 20;

/** The JWK Set `value` is, when it is a set of public keys Pinpoint can verify with; else why not. */
export function parsePublicJwkSet(value: unknown): { readonly jwks: JSONWebKeySet } | { readonly error: string } {
  if (typeof value !== 'object' || value === null || Array.isArray(value) || !Array.isArray((value as { keys?: unknown }).keys)) {
    return { error: 'is not a JWK Set: a JSON object with a "keys" list (RFC 7517 §5)' };
  }
  const keys = (value as { keys: unknown[] }).keys;
  if (keys.length === 0) return { error: 'is a JWK Set without keys' };
  if (keys.length > MAX_KEYS) return { error: `holds more than ${MAX_KEYS} keys` };
  for (const [index, key] of keys.entries()) {
    if (typeof key !== 'object' || key === null || Array.isArray(key)) return { error: `keys[${index}] is not a JSON object` };
    const problem = keyProblem(key as Record<string, unknown>);
    if (problem !== undefined) return { error: `keys[${index}] ${problem}` };
  }
  return { jwks: { keys: keys as JWK[] } };
}

/** Parses a JWK Set from JSON text (a jwks_file), as parsePublicJwkSet judges it. */
export function parsePublicJwkSetText(text: string): { readonly jwks: JSONWebKeySet } | { readonly error: string } {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { error: 'is not valid JSON; it must hold a JWK Set (RFC 7517 §5)' };
  }
  return parsePublicJwkSet(value);
}

/** An algorithm each key type of keyProblem verifies, to try the import with. */
const IMPORT_ALG: Readonly<Record<string, string>> = { RSA: 'RS256', EC: 'ES256', OKP: 'EdDSA' };

/** Why a key of a checked set does not import (bad base64url, a point off the curve...), or undefined when all do. */
export async function unimportableKeyProblem(jwks: JSONWebKeySet): Promise<string | undefined> {
  for (const [index, key] of jwks.keys.entries()) {
    try {
      const named = (ASYMMETRIC_ALGS as readonly string[]).includes(key.alg ?? '') ? key.alg : undefined;
      await importJWK({ ...key, ext: true }, named ?? IMPORT_ALG[key.kty as string]);
    } catch {
      return `keys[${index}] is not a usable ${String(key.kty)} public key`;
    }
  }
  return undefined;
}

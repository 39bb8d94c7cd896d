/**
 * DPoP proofs (RFC 9449 §4.3, DESIGN.md §13): verified by jose with the public key the proof carries in its own
 * header (imported by jose, remembered per key), the checks named by the RFC made explicitly so each refusal says what was wrong. Pure: the
 * caller records the proof's jti as used (store), and turns a refusal into `invalid_dpop_proof`.
 */
import { calculateJwkThumbprint, decodeProtectedHeader, errors, importJWK, jwtVerify, type CryptoKey, type JWK, type JWTPayload, type KeyObject } from 'jose';
import { sha256 } from './digest.js';
import { ASYMMETRIC_ALGS, privateMembersOf, rsaKeyProblem, VERIFIED_ALGS } from './jwk-set.js';
import { isUsableJti, MAX_JTI_LENGTH, type UsedOnce } from './used-once.js';

/** DESIGN.md §13 `dpop_signing_alg_values_supported`. */
export const DPOP_ALGS = ASYMMETRIC_ALGS;

/** RFC 9449 §11.1, DESIGN.md §13: a proof's iat may be this far from the server's clock, either way. */
export const PROOF_WINDOW_SECONDS = 60;


/** A verified proof: the key it binds to, and what to record so it is accepted once. */
export interface DpopProof {
  /** RFC 7638 SHA-256 thumbprint of the proof's public key: a bound token's `cnf.jkt` (RFC 9449 §6.1). */
  readonly jkt: string;
  /** Recorded as used (kind `dpop`) until the proof's iat can no longer be accepted (RFC 9449 §11.1). */
  readonly replay: UsedOnce;
}

export type ProofCheck = { readonly ok: true; readonly proof: DpopProof } | { readonly ok: false; readonly reason: string };

/** What the request the proof came with was. */
export interface ProofExpectation {
  /** The request's method (RFC 9449 §4.3 check 8, htm). */
  readonly method: string;
  /** The request's URL as the issuer sees it (base_url + path), without query and fragment (check 9, htu). */
  readonly url: string;
  readonly now: number;
  /** At a protected resource: the access token the proof must name by hash (ath, check 11). */
  readonly accessToken?: string;
}

const refuse = (reason: string): ProofCheck => ({ ok: false, reason });

/** RFC 7638 §3.2: the members that make a public key what it is, per key type; the rest never changes the key. */
const KEY_MEMBERS: Readonly<Record<string, readonly string[]>> = { EC: ['crv', 'kty', 'x', 'y'], RSA: ['e', 'kty', 'n'], OKP: ['crv', 'kty', 'x'] };

/** Keys imported from proofs, remembered: a client sends one key with every proof. Bounded, oldest out first. */
const REMEMBERED_KEYS = 10_000;
type ImportedKey = { readonly key: CryptoKey | KeyObject | Uint8Array; readonly jkt: string };
const importedKeys = new Map<string, ImportedKey>();

/** How many proof keys are remembered now (tests: a refused proof's key is not). */
export const rememberedProofKeys = (): number => importedKeys.size;


/**
 * The proof's key, imported by jose once per key and algorithm (importing costs about as much as verifying), with its
 * RFC 7638 thumbprint; only the members that define the key are read, so the remembered key is exactly the one used.
 * `remember` keeps it, called once a proof signed by it verified: a stranger's unverified keys never fill the memory.
 */
async function proofKey(jwk: Record<string, unknown>, alg: string): Promise<ImportedKey & { readonly remember: () => void }> {
  const members = KEY_MEMBERS[String(jwk.kty)];
  if (members === undefined || members.some((member) => typeof jwk[member] !== 'string')) throw new Error('unusable jwk');
  // A huge modulus or exponent costs a stranger nothing to send and us much to import and check.
  if (jwk.kty === 'RSA' && rsaKeyProblem(jwk) !== undefined) throw new Error('unusable jwk');
  const publicJwk = Object.fromEntries(members.map((member) => [member, jwk[member]])) as JWK;
  const cacheKey = `${alg}:${JSON.stringify(publicJwk)}`;
  const known = importedKeys.get(cacheKey);
  if (known !== undefined) return { ...known, remember: () => undefined };
  const [key, jkt] = await Promise.all([importJWK(publicJwk, alg), calculateJwkThumbprint(publicJwk, 'sha256')]);
  const remember = (): void => {
    if (importedKeys.has(cacheKey)) return;
    if (importedKeys.size >= REMEMBERED_KEYS) importedKeys.delete(importedKeys.keys().next().value as string);
    importedKeys.set(cacheKey, { key, jkt });
  };
  return { key, jkt, remember };
}

/** RFC 9449 §4.3: htu is compared without query and fragment, after URL normalisation (scheme and host case, default port). */
function comparableUrl(text: string): string | undefined {
  if (!URL.canParse(text)) return undefined;
  const url = new URL(text);
  // A user name or password makes it another URI (the origin would drop them): never this request's.
  if (url.username !== '' || url.password !== '') return undefined;
  return `${url.origin}${url.pathname}`;
}

/** RFC 9449 §4.2 ath: base64url of the SHA-256 of the access token's ASCII text. */
export const accessTokenHashOf = (accessToken: string): string => sha256(accessToken).toString('base64url');

/** Why jose refused the proof, in words for the client. */
function joseReason(error: unknown): string {
  if (error instanceof errors.JWTExpired) return 'the DPoP proof has expired (exp)';
  if (error instanceof errors.JWTClaimValidationFailed) {
    return error.reason === 'missing' ? `the DPoP proof has no ${error.claim} claim` : `the DPoP proof's ${error.claim} claim is not valid`;
  }
  if (error instanceof errors.JWSSignatureVerificationFailed) return "the DPoP proof's signature does not verify with the key in its jwk header";
  if (error instanceof errors.JOSEAlgNotAllowed) return `the DPoP proof must be signed with one of ${DPOP_ALGS.join(', ')}`;
  return 'the DPoP proof is not a valid signed JWT with a usable public key in its jwk header';
}

/**
 * Checks a DPoP proof as RFC 9449 §4.3 lists, except that its jti was not seen before (the caller records it last, so a
 * refused request leaves it unrecorded): typ, alg, a public jwk, the signature, htm, htu, iat within 60 s, ath.
 */
export async function verifyDpopProof(proof: string, expected: ProofExpectation): Promise<ProofCheck> {
  let header: ReturnType<typeof decodeProtectedHeader>;
  try {
    header = decodeProtectedHeader(proof);
  } catch {
    return refuse('the DPoP proof is not a JWT');
  }
  if (header.typ !== 'dpop+jwt') return refuse('the DPoP proof must have the header typ "dpop+jwt"');
  if (typeof header.alg !== 'string' || !VERIFIED_ALGS.includes(header.alg)) {
    return refuse(`the DPoP proof must be signed with one of ${DPOP_ALGS.join(', ')}`);
  }
  const jwk = header.jwk;
  if (typeof jwk !== 'object' || jwk === null || Array.isArray(jwk)) return refuse('the DPoP proof must carry its public key in the jwk header');
  if (privateMembersOf(jwk as Record<string, unknown>).length > 0) return refuse("the DPoP proof's jwk header must hold a public key, without private key members");

  let payload: JWTPayload;
  let jkt: string;
  try {
    const { key, jkt: thumbprint, remember } = await proofKey(jwk as Record<string, unknown>, header.alg);
    jkt = thumbprint;
    ({ payload } = await jwtVerify(proof, key, {
      typ: 'dpop+jwt',
      algorithms: [...VERIFIED_ALGS],
      requiredClaims: ['jti', 'htm', 'htu', 'iat'],
      currentDate: new Date(expected.now),
    }));
    remember();
  } catch (error) {
    return refuse(joseReason(error));
  }
  const { htm, htu, iat, jti } = payload as JWTPayload & { htm?: unknown; htu?: unknown };
  if (htm !== expected.method) return refuse(`the DPoP proof's htm must be "${expected.method}", the method of this request`);
  if (typeof htu !== 'string' || comparableUrl(htu) !== comparableUrl(expected.url)) {
    return refuse(`the DPoP proof's htu must be "${expected.url}", the URL of this request`);
  }
  if (typeof iat !== 'number' || Math.abs(expected.now / 1000 - iat) > PROOF_WINDOW_SECONDS) {
    return refuse(`the DPoP proof's iat is not within ${PROOF_WINDOW_SECONDS} seconds of the server's time`);
  }
  if (!isUsableJti(jti)) {
    return refuse(`the DPoP proof's jti must be a string of 1 to ${MAX_JTI_LENGTH} characters`);
  }
  if (expected.accessToken !== undefined && (payload as { ath?: unknown }).ath !== accessTokenHashOf(expected.accessToken)) {
    return refuse("the DPoP proof's ath is not the hash of the access token presented with it");
  }
  // Keyed by the key and the jti, hashed to a fixed length; counted as used for as long as iat could still be accepted.
  const id = sha256(`${jkt}.${jti}`).toString('hex');
  return { ok: true, proof: { jkt, replay: { id, expiresAt: (iat + PROOF_WINDOW_SECONDS + 1) * 1000 } } };
}

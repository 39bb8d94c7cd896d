/**
 * private_key_jwt client authentication (RFC 7523 §2.2 and §3, OpenID Connect Core §9, DESIGN.md §13): a JWT the
 * client signs with one of its keys, verified by jose against the client's JWK Set. Pure apart from fetching a
 * metadata document's jwks_uri; the caller records the jti as used and turns a refusal into `invalid_client`.
 */
import { createLocalJWKSet, errors, jwtVerify, type CryptoKey, type JSONWebKeySet, type JWTPayload, type JWTVerifyGetKey, type JWTVerifyOptions } from 'jose';
import type { AssertionKeys } from '../config/types.js';
import { sha256 } from '../crypto/digest.js';
import { ASYMMETRIC_ALGS, VERIFIED_ALGS } from '../crypto/jwk-set.js';
import { isUsableJti, MAX_JTI_LENGTH, type UsedOnce } from '../crypto/used-once.js';

/** RFC 7523 §2.2: the one client_assertion_type. */
export const JWT_BEARER_ASSERTION = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer';

/** DESIGN.md §13: an assertion's exp is at most this far ahead, so a leaked one is short-lived and its jti record too. */
export const MAX_ASSERTION_LIFETIME_SECONDS = 300;


/** What an accepted assertion leaves to record: its jti, used once (RFC 7523 §3 item 7), until it expires. */
export interface AcceptedAssertion {
  readonly replay: UsedOnce;
}

/** A refusal says whether no key of the set verified its signature (a key set fetched again may hold its key). */
export type AssertionCheck =
  | { readonly ok: true; readonly accepted: AcceptedAssertion }
  | { readonly ok: false; readonly reason: string; readonly signerUnknown: boolean };

export interface AssertionExpectation {
  readonly clientId: string;
  readonly issuer: string;
  /** The endpoint's own URL (e.g. `<issuer>/token`), and any other URL `aud` may name instead of the issuer. */
  readonly endpointUrls: readonly string[];
  readonly now: number;
}

type KeySetCheck = { readonly ok: true; readonly jwks: JSONWebKeySet } | { readonly ok: false; readonly reason: string };

/** Fetches a metadata document's jwks_uri under the document's fetch rules and cache (metadata-document.ts). */
export interface KeySetFetcher {
  resolveKeySet(url: string): Promise<KeySetCheck>;
  /** The set fetched again for a key it lacked, or undefined when it is not fetched again now (cooldown). */
  refetchKeySet(url: string): Promise<KeySetCheck | undefined>;
}

export type ClientKeys = { readonly ok: true; readonly keys: JWTVerifyGetKey } | { readonly ok: false; readonly reason: string };

/** Why jose refused the assertion, in words for the client (never the assertion itself). */
function joseReason(error: unknown): string {
  if (error instanceof errors.JWTExpired) return 'the client assertion has expired';
  if (error instanceof errors.JWTClaimValidationFailed) {
    if (error.reason === 'missing') return `the client assertion has no ${error.claim} claim`;
    if (error.claim === 'iss' || error.claim === 'sub') return `the client assertion's ${error.claim} must be the client_id`;
    if (error.claim === 'aud') return "the client assertion's aud must name the issuer or this endpoint's URL";
    if (error.claim === 'nbf') return 'the client assertion is not valid yet (nbf)';
    return `the client assertion's ${error.claim} claim is not valid`;
  }
  if (error instanceof errors.JOSEAlgNotAllowed) return `the client assertion must be signed with one of ${ASYMMETRIC_ALGS.join(', ')}`;
  if (error instanceof errors.JWKSNoMatchingKey || error instanceof errors.JWSSignatureVerificationFailed) {
    return 'the client assertion is not signed by a key of this client';
  }
  return 'the client assertion is not a valid signed JWT';
}

/**
 * jwtVerify against a key set whose keys may not say which one signed (no kid, several keys of one type): each
 * candidate is tried (jose hands them over as the error's iterator); a claim refusal comes only after a signature verified.
 */
async function verifyWithKeySet(jwt: string, keys: JWTVerifyGetKey, options: JWTVerifyOptions): Promise<JWTPayload> {
  try {
    return (await jwtVerify(jwt, keys, options)).payload;
  } catch (error) {
    if (!(error instanceof errors.JWKSMultipleMatchingKeys)) throw error;
    for await (const key of error as errors.JWKSMultipleMatchingKeys & AsyncIterable<CryptoKey>) {
      try {
        return (await jwtVerify(jwt, key, options)).payload;
      } catch (attempt) {
        if (!(attempt instanceof errors.JWSSignatureVerificationFailed)) throw attempt;
      }
    }
    throw new errors.JWSSignatureVerificationFailed();
  }
}

/**
 * Checks a client assertion fully except that its jti was not used before: signature by one of the client's keys
 * (asymmetric algorithms only), iss = sub = client_id, aud naming the issuer or the endpoint, exp present and at most
 * 5 minutes ahead, a jti.
 */
export async function verifyClientAssertion(assertion: string, keys: JWTVerifyGetKey, expected: AssertionExpectation): Promise<AssertionCheck> {
  let payload: JWTPayload;
  try {
    payload = await verifyWithKeySet(assertion, keys, {
      algorithms: [...VERIFIED_ALGS],
      issuer: expected.clientId,
      subject: expected.clientId,
      audience: [expected.issuer, ...expected.endpointUrls],
      requiredClaims: ['iss', 'sub', 'aud', 'exp', 'jti'],
      currentDate: new Date(expected.now),
    });
  } catch (error) {
    // No kid matched, or (a key set without kids) the candidate keys did not verify it.
    const signerUnknown = error instanceof errors.JWKSNoMatchingKey || error instanceof errors.JWSSignatureVerificationFailed;
    return { ok: false, reason: joseReason(error), signerUnknown };
  }
  const { exp, jti } = payload as { exp: number; jti: unknown };
  if (exp > expected.now / 1000 + MAX_ASSERTION_LIFETIME_SECONDS) {
    return { ok: false, reason: `the client assertion's exp is more than ${MAX_ASSERTION_LIFETIME_SECONDS / 60} minutes ahead`, signerUnknown: false };
  }
  if (!isUsableJti(jti)) {
    return { ok: false, reason: `the client assertion's jti must be a string of 1 to ${MAX_JTI_LENGTH} characters`, signerUnknown: false };
  }
  const id = sha256(`${expected.clientId}\n${jti}`).toString('hex');
  return { ok: true, accepted: { replay: { id, expiresAt: (exp + 1) * 1000 } } };
}

/** jose key sets of clients, built once per JWK Set (a configured one, or the copy the document cache holds). */
export class ClientKeySets {
  readonly #built = new WeakMap<JSONWebKeySet, JWTVerifyGetKey>();
  readonly #fetcher: KeySetFetcher | undefined;

  constructor(fetcher?: KeySetFetcher) {
    this.#fetcher = fetcher;
  }

  /** The keys a client's assertions verify with, or why there are none to use now. */
  async keysOf(keys: AssertionKeys): Promise<ClientKeys> {
    if ('jwks' in keys) return { ok: true, keys: this.#verifierOf(keys.jwks) };
    if (this.#fetcher === undefined) return { ok: false, reason: "the client's jwks_uri cannot be fetched here" };
    return this.#usable(await this.#fetcher.resolveKeySet(keys.jwksUri));
  }

  /**
   * The keys fetched again, for an assertion that named none of the remembered ones: only a jwks_uri's, and only when
   * its fetch is older than the cooldown (metadata-document.ts); undefined otherwise.
   */
  async refetchedKeysOf(keys: AssertionKeys): Promise<ClientKeys | undefined> {
    if ('jwks' in keys || this.#fetcher === undefined) return undefined;
    const fetched = await this.#fetcher.refetchKeySet(keys.jwksUri);
    return fetched === undefined ? undefined : this.#usable(fetched);
  }

  #usable(fetched: KeySetCheck): ClientKeys {
    return fetched.ok ? { ok: true, keys: this.#verifierOf(fetched.jwks) } : fetched;
  }

  #verifierOf(jwks: JSONWebKeySet): JWTVerifyGetKey {
    let built = this.#built.get(jwks);
    if (built === undefined) this.#built.set(jwks, (built = createLocalJWKSet(jwks)));
    return built;
  }
}

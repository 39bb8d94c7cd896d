/** Every JWT Pinpoint signs or verifies goes through jose (DESIGN.md §1: no hand-written JWS). */
import { CompactSign, compactVerify, jwtVerify, type CompactJWSHeaderParameters, type JWTPayload } from 'jose';
import type { SigningKey, SigningKeys } from './keys.js';

/** RFC 9068 §2.1 names access tokens `at+jwt`; ID tokens keep the plain `JWT`. */
export type TokenType = 'at+jwt' | 'JWT';

const encoder = new TextEncoder();

/** The protected header of each (key, type), built once rather than per token. */
const headers = new WeakMap<SigningKey, Map<TokenType, CompactJWSHeaderParameters>>();

function headerOf(key: SigningKey, typ: TokenType): CompactJWSHeaderParameters {
  let byType = headers.get(key);
  if (byType === undefined) headers.set(key, (byType = new Map()));
  let header = byType.get(typ);
  if (header === undefined) byType.set(typ, (header = Object.freeze({ alg: key.alg, typ, kid: key.kid })));
  return header;
}

/** A compact JWS of `claims`, signed by jose with the pre-imported CryptoKey; CompactSign skips SignJWT's claim-by-claim copying. */
export function signJwt(key: SigningKey, typ: TokenType, claims: Readonly<Record<string, unknown>>): Promise<string> {
  return new CompactSign(encoder.encode(JSON.stringify(claims))).setProtectedHeader(headerOf(key, typ)).sign(key.privateKey);
}

/**
 * Verifies an access token of this issuer with jose: signature by a known ES256 key (found by `kid`), `typ`,
 * `iss`, `exp` and `iat`. Rejects with a jose error otherwise.
 */
export async function verifyAccessToken(keys: SigningKeys, token: string, issuer: string, now: number): Promise<JWTPayload> {
  return (await verifyWithKid(keys, token, issuer, now)).payload;
}

async function verifyWithKid(keys: SigningKeys, token: string, issuer: string, now: number): Promise<{ payload: JWTPayload; kid: string }> {
  const { payload, protectedHeader } = await jwtVerify(
    token,
    (header) => {
      const key = header.kid === undefined ? undefined : keys.byKid.get(header.kid);
      if (key === undefined || key.alg !== 'ES256') throw new Error('unknown signing key');
      return key.publicKey;
    },
    { issuer, typ: 'at+jwt', algorithms: ['ES256'], currentDate: new Date(now) },
  );
  return { payload, kid: protectedHeader.kid as string };
}

/**
 * Access tokens jose has verified, remembered by value: a resource server that introspects a token on each of its
 * calls pays one signature check per token, not one per call. An entry counts only while its key is still published
 * and the token unexpired (jose's own rule: `exp` after the current second); only verified tokens get in, and at most
 * `capacity` of them (the oldest leave first), so what an attacker sends cannot grow it.
 */
export class VerifiedAccessTokens {
  readonly #entries = new Map<string, { readonly payload: JWTPayload; readonly kid: string }>();

  constructor(private readonly capacity: number) {}

  /** The token's claims, verified now or remembered; rejects as verifyAccessToken does. */
  async verify(keys: SigningKeys, token: string, issuer: string, now: number): Promise<JWTPayload> {
    const remembered = this.#entries.get(token);
    if (remembered !== undefined) {
      const { payload, kid } = remembered;
      if (keys.byKid.has(kid) && typeof payload.exp === 'number' && payload.exp > Math.floor(now / 1000)) return payload;
      this.#entries.delete(token);
    }
    const verified = await verifyWithKid(keys, token, issuer, now);
    if (this.#entries.size >= this.capacity) this.#entries.delete(this.#entries.keys().next().value as string);
    this.#entries.set(token, { payload: Object.freeze(verified.payload), kid: verified.kid });
    return verified.payload;
  }
}

/**
 * Verifies an ID token of this issuer used as a hint (OpenID Connect RP-Initiated Logout 1.0 §2): signature by one of
 * our keys and `iss` only, since an expired ID token is still a hint. Rejects otherwise.
 */
export async function verifyIdTokenHint(keys: SigningKeys, token: string, issuer: string): Promise<JWTPayload> {
  const { payload, protectedHeader } = await compactVerify(token, (header) => {
    const key = header.kid === undefined ? undefined : keys.byKid.get(header.kid);
    if (key === undefined || key.alg !== header.alg) throw new Error('unknown signing key');
    return key.publicKey;
  });
  if (protectedHeader.typ !== undefined && protectedHeader.typ !== 'JWT') throw new Error('not an ID token');
  const claims = JSON.parse(new TextDecoder().decode(payload)) as JWTPayload;
  if (claims.iss !== issuer) throw new Error('an ID token of another issuer');
  return claims;
}

/**
 * The signing Pinpoint had before jose signed every JWT (src/tokens/mint.ts before 9fbb4d6): the compact JWS
 * built by hand and signed synchronously by node:crypto. bench/legacy-signing.ts puts this module in place of
 * dist/crypto/jwt.js in one benchmark server, so the "jose cost" line compares the same code with either signing.
 * Everything else dist/crypto/jwt.js exports (verification) is passed through unchanged.
 */
import { KeyObject, sign } from 'node:crypto';
import type * as joseSigning from '../src/crypto/jwt.js';
import type { TokenType } from '../src/crypto/jwt.js';
import type { SigningKey } from '../src/crypto/keys.js';

// The local signJwt below takes precedence over this module's own. dist/ has no declarations: its types are src's.
// @ts-expect-error TS7016
export * from '../dist/crypto/jwt.js';

/** What the previous code kept per key: the KeyObject (converted once) and each type's encoded header. */
interface PreparedKey {
  readonly privateKey: KeyObject;
  readonly headers: Map<TokenType, string>;
}

const prepared = new WeakMap<SigningKey, PreparedKey>();
let signatures = 0;

function prepare(key: SigningKey): PreparedKey {
  let entry = prepared.get(key);
  if (entry === undefined) prepared.set(key, (entry = { privateKey: KeyObject.from(key.privateKey), headers: new Map() }));
  return entry;
}

function encodedHeader(key: SigningKey, entry: PreparedKey, typ: TokenType): string {
  let header = entry.headers.get(typ);
  if (header === undefined) {
    header = Buffer.from(JSON.stringify({ alg: key.alg, typ, kid: key.kid })).toString('base64url');
    entry.headers.set(typ, header);
  }
  return header;
}

/**
 * The compact JWS jose would make (RFC 7515 §7.1); ES256 as R || S (RFC 7518 §3.4), RS256 as RSASSA-PKCS1-v1_5.
 * The previous code signed only access tokens so; its ID tokens (RS256) went through jose, and client_credentials signs none.
 */
export const signJwt: typeof joseSigning.signJwt = (key, typ, claims) => {
  const entry = prepare(key);
  const input = `${encodedHeader(key, entry, typ)}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}`;
  const signature =
    key.alg === 'ES256'
      ? sign('sha256', Buffer.from(input), { key: entry.privateKey, dsaEncoding: 'ieee-p1363' })
      : sign('sha256', Buffer.from(input), entry.privateKey);
  signatures += 1;
  return Promise.resolve(`${input}.${signature.toString('base64url')}`);
};

/** How many JWTs this module has signed: the benchmark's proof that the substitution took. */
export function legacySignatures(): number {
  return signatures;
}

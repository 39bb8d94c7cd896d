/**
 * Signing micro-benchmark: the same ES256 JWS through jose (KeyObject, CryptoKey) and node:crypto,
 * sequential and 16 in flight, so the cost of each path on one core is measured rather than guessed.
 * Run pinned: `taskset -c 0 node --import tsx bench/sign.ts`.
 */
import { createPrivateKey, randomBytes, sign as nodeSign, type KeyObject } from 'node:crypto';
import { CompactSign, exportJWK, generateKeyPair, SignJWT } from 'jose';

const CLAIMS = (): Record<string, unknown> => ({
  iss: 'http://127.0.0.1:8080',
  sub: 'service',
  aud: 'https://api.example.org/',
  exp: 2_000_000_000,
  iat: 1_700_000_000,
  jti: randomBytes(16).toString('base64url'),
  client_id: 'service',
  scope: 'read',
});
const HEADER = { alg: 'ES256', typ: 'at+jwt', kid: 'k1' };

async function measure(name: string, seconds: number, inFlight: number, once: () => Promise<unknown> | unknown): Promise<number> {
  const until = performance.now() + seconds * 1000;
  let count = 0;
  const worker = async (): Promise<void> => {
    while (performance.now() < until) {
      await once();
      count += 1;
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: inFlight }, worker));
  const rate = count / ((performance.now() - started) / 1000);
  process.stdout.write(`${name.padEnd(44)} ${inFlight.toString().padStart(2)} in flight  ${Math.round(rate).toString().padStart(7)} signatures/s\n`);
  return rate;
}

const { privateKey: cryptoKey } = await generateKeyPair('ES256', { extractable: true });
const keyObject: KeyObject = createPrivateKey({ key: (await exportJWK(cryptoKey)) as import('node:crypto').JsonWebKey, format: 'jwk' });
const headerPart = Buffer.from(JSON.stringify(HEADER)).toString('base64url');

const paths: [string, () => Promise<string> | string][] = [
  ['jose SignJWT, KeyObject', () => new SignJWT(CLAIMS()).setProtectedHeader(HEADER).sign(keyObject)],
  ['jose SignJWT, CryptoKey', () => new SignJWT(CLAIMS()).setProtectedHeader(HEADER).sign(cryptoKey)],
  [
    'jose CompactSign, CryptoKey, serialised payload',
    () => new CompactSign(Buffer.from(JSON.stringify(CLAIMS()))).setProtectedHeader(HEADER).sign(cryptoKey),
  ],
  [
    'crypto.subtle.sign (same JWS, no jose)',
    async () => {
      const input = `${headerPart}.${Buffer.from(JSON.stringify(CLAIMS())).toString('base64url')}`;
      const signature = await crypto.subtle.sign({ name: 'ECDSA', hash: 'SHA-256' }, cryptoKey, Buffer.from(input));
      return `${input}.${Buffer.from(signature).toString('base64url')}`;
    },
  ],
  [
    'node:crypto sign (sync, same JWS)',
    () => {
      const input = `${headerPart}.${Buffer.from(JSON.stringify(CLAIMS())).toString('base64url')}`;
      return `${input}.${nodeSign('sha256', Buffer.from(input), { key: keyObject, dsaEncoding: 'ieee-p1363' }).toString('base64url')}`;
    },
  ],
];

const seconds = Number(process.env.SIGN_SECONDS ?? 3);
for (const [name, once] of paths) await measure(name, 1, 16, once);
for (const [name, once] of paths) {
  await measure(name, seconds, 1, once);
  await measure(name, seconds, 16, once);
}

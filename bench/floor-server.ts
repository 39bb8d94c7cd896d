/**
 * The floor: a bare Fastify + @fastify/formbody route, and the same route signing one ES256 JWT with jose
 * (key imported once, as a CryptoKey: the fastest way jose offers). No logging, no state, no client auth.
 */
import { randomBytes } from 'node:crypto';
import formbody from '@fastify/formbody';
import Fastify from 'fastify';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { AUDIENCE, CLIENT_ID, freePort, SCOPE, serveRpc } from './common.js';
import { profilerCommands } from './inspector.js';

const port = await freePort();
const issuer = `http://127.0.0.1:${port}`;
const { privateKey, publicKey } = await generateKeyPair('ES256');
const jwks = { keys: [{ ...(await exportJWK(publicKey)), kid: 'floor', alg: 'ES256', use: 'sig' }] };
const app = Fastify({ logger: false });
await app.register(formbody);

app.get('/jwks', async () => jwks);

app.post('/bare', async (request) => {
  const body = request.body as Record<string, string | undefined>;
  return { grant_type: body.grant_type ?? null };
});

app.post('/jose', async (request, reply) => {
  const body = request.body as Record<string, string | undefined>;
  if (body.grant_type === undefined) return reply.code(400).send({ error: 'invalid_request' });
  const iat = Math.floor(Date.now() / 1000);
  const accessToken = await new SignJWT({
    iss: issuer,
    sub: CLIENT_ID,
    aud: [...AUDIENCE],
    exp: iat + 3600,
    iat,
    jti: randomBytes(16).toString('base64url'),
    client_id: CLIENT_ID,
    scope: SCOPE,
  })
    .setProtectedHeader({ alg: 'ES256', typ: 'at+jwt', kid: 'floor' })
    .sign(privateKey);
  return { access_token: accessToken, token_type: 'Bearer', expires_in: 3600, scope: SCOPE };
});

serveRpc({
  ...profilerCommands(),
  memory: () => process.memoryUsage(),
  async stop() {
    await app.close();
    setImmediate(() => process.exit(0));
    return true;
  },
});

await app.listen({ host: '127.0.0.1', port });
process.send?.({ ready: true, port, issuer, state: 'none' });

/**
 * CORS (DESIGN.md §4) through @fastify/cors: metadata and JWKS for any origin; the token-ish endpoints for the
 * origins of clients' redirect URIs (no credentials mode); /authorize and the pages for none.
 */
import cors, { type FastifyCorsOptions } from '@fastify/cors';
import type { FastifyInstance, FastifyRequest } from 'fastify';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Errors on this route render as an HTML page instead of JSON. */
    page?: boolean;
  }
}

export type CorsPolicy = 'any' | 'clients';

/** Endpoints under the issuer's path and who may call them from a script. */
const POLICIES: Readonly<Record<string, CorsPolicy>> = {
  '/token': 'clients',
  '/userinfo': 'clients',
  '/device_authorization': 'clients',
  '/revoke': 'clients',
  // DESIGN.md §9: browser-based MCP clients (the MCP Inspector) register from a page.
  '/register': 'any',
  '/jwks': 'any',
};

/** Scripts may read these (RFC 6750 challenges, 429 back-off); nothing else beyond the CORS-safelisted ones. */
const EXPOSED = ['WWW-Authenticate', 'Retry-After'];
const COMMON: FastifyCorsOptions = {
  methods: ['GET', 'POST'],
  // Only the request headers Pinpoint reads (no DPoP: it does not support it).
  allowedHeaders: ['Authorization', 'Content-Type'],
  exposedHeaders: EXPOSED,
  credentials: false,
  maxAge: 600,
  strictPreflight: false,
};

const NO_CORS: FastifyCorsOptions = Object.freeze({ origin: false });
const ANY_ORIGIN: FastifyCorsOptions = Object.freeze({ ...COMMON, origin: '*' });

export function policyOf(path: string, basePath: string): CorsPolicy | undefined {
  // RFC 8414 §3.1 copies of the metadata live outside the issuer's path.
  if (path.startsWith('/.well-known/')) return 'any';
  if (basePath !== '' && !path.startsWith(`${basePath}/`)) return undefined;
  const rest = path.slice(basePath.length);
  if (rest.startsWith('/.well-known/')) return 'any';
  return POLICIES[rest];
}

/** Registers CORS for the whole server; `isClientOrigin` is asked on every request, so the set may grow (dynamic clients). */
export async function registerCors(app: FastifyInstance, basePath: string, isClientOrigin: (origin: string) => boolean): Promise<void> {
  await app.register(cors, {
    hook: 'onRequest',
    delegator: (request: FastifyRequest, callback: (error: Error | null, options?: FastifyCorsOptions) => void) => {
      const origin = request.headers.origin;
      // Most requests (servers, not browsers) send no Origin: answered before any path is looked at.
      if (origin === undefined) return callback(null, NO_CORS);
      const policy = policyOf(request.url.split('?')[0] ?? '', basePath);
      if (policy === undefined) return callback(null, NO_CORS);
      if (policy === 'any') return callback(null, ANY_ORIGIN);
      // An origin that is not a client's gets no CORS headers at all (and its preflight finds no route).
      return callback(null, isClientOrigin(origin) ? { ...COMMON, origin } : NO_CORS);
    },
  });
}

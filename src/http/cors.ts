/**
 * CORS (DESIGN.md §4) through @fastify/cors: metadata and JWKS for any origin; the token-ish endpoints for the
 * origins of clients' redirect URIs (no credentials mode); /authorize and the pages for none.
 */
import cors, { type FastifyCorsOptions } from '@fastify/cors';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { pathOf } from './params.js';
import { httpsRedirectOrigins } from '../policy/redirect-uri.js';

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
  '/par': 'clients',
  // DESIGN.md §9: browser-based MCP clients (the MCP Inspector) register from a page.
  '/register': 'any',
  '/jwks': 'any',
};

/** Scripts may read these (RFC 6750 challenges, 429 back-off); nothing else beyond the CORS-safelisted ones. */
const EXPOSED = ['WWW-Authenticate', 'Retry-After'];
const EXPOSED_HEADER = EXPOSED.join(', ');
const COMMON: FastifyCorsOptions = {
  methods: ['GET', 'POST'],
  // Only the request headers Pinpoint reads (DPoP: RFC 9449 proofs at /token and /userinfo).
  allowedHeaders: ['Authorization', 'Content-Type', 'DPoP'],
  exposedHeaders: EXPOSED,
  credentials: false,
  maxAge: 600,
  strictPreflight: false,
};

const NO_CORS: FastifyCorsOptions = Object.freeze({ origin: false });
// Public documents and /register take any request header: the MCP SDK sends MCP-Protocol-Version to the metadata,
// and a refused preflight costs a browser host a console error and a second request.
const { allowedHeaders: _clientHeaders, ...ANY_HEADERS } = COMMON;
const ANY_ORIGIN: FastifyCorsOptions = Object.freeze({ ...ANY_HEADERS, origin: '*' });

export function policyOf(path: string, basePath: string): CorsPolicy | undefined {
  // RFC 8414 §3.1 copies of the metadata live outside the issuer's path.
  if (path.startsWith('/.well-known/')) return 'any';
  if (basePath !== '' && !path.startsWith(`${basePath}/`)) return undefined;
  const rest = path.slice(basePath.length);
  if (rest.startsWith('/.well-known/')) return 'any';
  return POLICIES[rest];
}

type OnRequestHook = (request: FastifyRequest, reply: FastifyReply, done: (error?: Error) => void) => void;

/**
 * @fastify/cors with our per-path policy (the delegator), returned as its onRequest hook for buildApp to call only for
 * requests that carry an Origin: browsers send one on every cross-origin request and preflight, while servers calling
 * /token send none and would pay the library's per-request option building for nothing. The plugin is
 * registered on a facade that hands its hook back instead of adding it; its OPTIONS route and request decorator go to
 * `app` as usual. `isClientOrigin` is asked on every request, so the set may grow (dynamic clients).
 */
export async function corsHook(app: FastifyInstance, basePath: string, isClientOrigin: (origin: string) => boolean): Promise<OnRequestHook> {
  let hook: OnRequestHook | undefined;
  const facade = {
    decorateRequest: app.decorateRequest.bind(app),
    options: app.options.bind(app),
    addHook(name: string, added: OnRequestHook) {
      // buildApp calls it with `done`: a library version with another kind of hook fails here, at start, not by hanging requests.
      if (name !== 'onRequest' || added.length !== 3) throw new Error(`@fastify/cors added a ${name} hook of ${added.length} parameters; expected onRequest (request, reply, done)`);
      hook = added;
    },
  } as unknown as FastifyInstance;
  const options: FastifyCorsOptions = {
    hook: 'onRequest',
    delegator: (request: FastifyRequest, callback: (error: Error | null, options?: FastifyCorsOptions) => void) => {
      const policy = policyOf(pathOf(request.url), basePath);
      const origin = request.headers.origin;
      if (policy === undefined || origin === undefined) return callback(null, NO_CORS);
      if (policy === 'any') return callback(null, ANY_ORIGIN);
      // An origin that is not a client's gets no CORS headers at all (and its preflight finds no route).
      return callback(null, isClientOrigin(origin) ? { ...COMMON, origin } : NO_CORS);
    },
  };
  await new Promise<void>((resolve, reject) => {
    (cors as unknown as (instance: FastifyInstance, opts: FastifyCorsOptions, next: (error?: Error) => void) => void)(facade, options, (error) =>
      error === undefined || error === null ? resolve() : reject(error),
    );
  });
  if (hook === undefined) throw new Error('@fastify/cors added no onRequest hook');
  return hook;
}

/**
 * The answer to a dynamic client's request is readable from its own https redirect origins (DESIGN.md §9), whether or
 * not this process knew that origin when the request came in: the origins a process remembers are its own, so a
 * code exchanged at another worker, or a refresh after a restart, was answered without CORS (the browser then kept
 * the rotated token from the host, which lost its grant). Only the Origin of the request is echoed, and only when the
 * client it names redirects there: that page could name the client anyway.
 */
export function exposeToRedirectOrigin(request: FastifyRequest, reply: FastifyReply, client: { readonly dynamic?: unknown; readonly redirectUris: readonly string[] }): void {
  const origin = request.headers.origin;
  if (origin === undefined || client.dynamic === undefined || reply.hasHeader('access-control-allow-origin')) return;
  if (!httpsRedirectOrigins(client.redirectUris).includes(origin)) return;
  reply.header('Access-Control-Allow-Origin', origin);
  reply.header('Access-Control-Expose-Headers', EXPOSED_HEADER);
  if (!reply.hasHeader('vary')) reply.header('Vary', 'Origin');
}

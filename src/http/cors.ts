/** CORS (DESIGN.md §4): metadata and JWKS for any origin; token-ish endpoints for the clients' origins. */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

export type CorsPolicy = 'any' | 'clients' | 'none';

declare module 'fastify' {
  interface FastifyContextConfig {
    cors?: CorsPolicy;
    /** Errors on this route render as an HTML page instead of JSON. */
    page?: boolean;
  }
}

function allowedOrigin(policy: CorsPolicy, origin: string | undefined, clientOrigins: ReadonlySet<string>): string | undefined {
  if (origin === undefined || policy === 'none') return undefined;
  if (policy === 'any') return '*';
  return clientOrigins.has(origin) ? origin : undefined;
}

function applyCors(request: FastifyRequest, reply: FastifyReply, clientOrigins: ReadonlySet<string>): string | undefined {
  const policy = request.routeOptions.config.cors ?? 'none';
  const allowed = allowedOrigin(policy, request.headers.origin, clientOrigins);
  if (policy === 'clients') reply.header('Vary', 'Origin');
  if (allowed !== undefined) reply.header('Access-Control-Allow-Origin', allowed);
  return allowed;
}

export function registerCors(app: FastifyInstance, clientOrigins: ReadonlySet<string>, paths: Record<string, CorsPolicy>): void {
  app.addHook('onRequest', async (request, reply) => {
    applyCors(request, reply, clientOrigins);
  });
  for (const [path, policy] of Object.entries(paths)) {
    app.options(path, { config: { cors: policy } }, async (request, reply) => {
      const allowed = applyCors(request, reply, clientOrigins);
      if (allowed !== undefined) {
        reply
          .header('Access-Control-Allow-Methods', 'GET, POST, OPTIONS')
          .header('Access-Control-Allow-Headers', 'Authorization, Content-Type, DPoP')
          .header('Access-Control-Max-Age', '600');
      }
      return reply.code(204).send();
    });
  }
}

/** Liveness and readiness (readiness asks the store). */
import type { FastifyPluginAsync } from 'fastify';
import type { Store } from '../store/types.js';

/** What the health routes use, wired by buildApp. */
export interface HealthRouteDeps {
  readonly store: Pick<Store, 'ping'>;
}

export function healthRoutes(deps: HealthRouteDeps): FastifyPluginAsync {
  const { store } = deps;
  return async (app) => {
    app.get('/healthz', async (_request, reply) => reply.header('Cache-Control', 'no-store').send({ status: 'ok' }));
    app.get('/readyz', async (request, reply) => {
      try {
        await store.ping();
        return reply.header('Cache-Control', 'no-store').send({ status: 'ready' });
      } catch {
        request.outcome = 'store_unavailable';
        return reply.code(503).header('Cache-Control', 'no-store').send({ status: 'unavailable', reason: 'state store unreachable' });
      }
    });
  };
}

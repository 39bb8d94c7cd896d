/** Liveness and readiness (readiness asks the store). */
import type { FastifyPluginAsync } from 'fastify';
import type { Store } from '../store/types.js';

export function healthRoutes(store: Pick<Store, 'ping'>): FastifyPluginAsync {
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

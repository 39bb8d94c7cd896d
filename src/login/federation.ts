import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../context.js';

export function federationRoutes(_ctx: AppContext): FastifyPluginAsync {
  return async () => {};
}

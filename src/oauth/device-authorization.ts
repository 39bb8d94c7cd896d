import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../context.js';

export function deviceAuthorizationRoutes(_ctx: AppContext): FastifyPluginAsync {
  return async () => {};
}

import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../context.js';

export function devicePageRoutes(_ctx: AppContext): FastifyPluginAsync {
  return async () => {};
}

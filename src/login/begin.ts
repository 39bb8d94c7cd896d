/** Starting a sign-in: keep the intent on the server, then show the sign-in page (or go to the only upstream). */
import type { FastifyReply } from 'fastify';
import type { AppContext } from '../context.js';
import { loginPageUrl, saveLoginIntent, type LoginIntent } from './intent.js';
import { pageHeaders } from './pages.js';

export async function beginSignIn(ctx: AppContext, reply: FastifyReply, intent: LoginIntent): Promise<FastifyReply> {
  const id = await saveLoginIntent(ctx, intent);
  return pageHeaders(reply).redirect(signInUrl(ctx, id), 303);
}

/** With no local users and exactly one upstream, a page offering one button is skipped. */
function signInUrl(ctx: AppContext, id: string): string {
  const [only, ...others] = [...ctx.config.federations.keys()];
  if (ctx.config.users.size === 0 && only !== undefined && others.length === 0) {
    return `${ctx.config.basePath}/federation/start?login=${id}&upstream=${encodeURIComponent(only)}`;
  }
  return loginPageUrl(ctx, id);
}

/** Starting a sign-in: keep the intent on the server, then show the sign-in page. */
import type { FastifyReply } from 'fastify';
import type { AppContext } from '../context.js';
import { loginPageUrl, saveLoginIntent, type LoginIntent } from './intent.js';
import { pageHeaders } from './pages.js';

export async function beginSignIn(ctx: AppContext, reply: FastifyReply, intent: LoginIntent): Promise<FastifyReply> {
  const id = await saveLoginIntent(ctx, intent);
  return pageHeaders(reply).redirect(loginPageUrl(ctx, id), 303);
}

/** After any sign-in (local or upstream): continue what the sign-in was for. */
import type { FastifyReply } from 'fastify';
import type { AppContext } from '../context.js';
import { OAuthError } from '../errors.js';
import { sendErrorPage } from '../http/render-error.js';
import { completeAuthorization } from '../oauth/complete-authorization.js';
import type { SessionRecord } from '../store/types.js';
import { takeLoginIntent } from './intent.js';
import { pageHeaders } from './pages.js';

export const expiredSignIn = (): OAuthError =>
  new OAuthError('invalid_request', 'this sign-in has expired or was already used; start again from the application');

export async function finishSignIn(ctx: AppContext, reply: FastifyReply, intentId: string, session: SessionRecord): Promise<FastifyReply> {
  const intent = await takeLoginIntent(ctx, intentId);
  if (intent === undefined) return sendErrorPage(reply, expiredSignIn());
  if (intent.kind === 'authorize') {
    reply.request.clientId = intent.request.clientId;
    reply.request.outcome = 'ok';
    return pageHeaders(reply).redirect(await completeAuthorization(ctx, intent.request, session), 303);
  }
  return pageHeaders(reply).redirect(`${ctx.config.basePath}/device?user_code=${encodeURIComponent(intent.userCode)}`, 303);
}

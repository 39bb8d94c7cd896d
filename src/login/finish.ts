/** After any sign-in (local or upstream): send the browser back to what the sign-in was for. Never calls protocol code. */
import type { FastifyReply } from 'fastify';
import { expiredSignIn } from '../session/login-request.js';
import { pageHeaders } from '../http/pages.js';
import { sendErrorPage } from '../http/render-error.js';
import type { LoginRequestRecord, LoginRequestStore } from '../store/types.js';

export async function finishSignIn(
  store: LoginRequestStore,
  reply: FastifyReply,
  basePath: string,
  pending: LoginRequestRecord,
  now: number,
): Promise<FastifyReply> {
  reply.request.outcome = 'ok';
  if (pending.purpose.kind === 'authorize') {
    reply.request.clientId = pending.purpose.authorization.clientId;
    // /authorize/resume takes the login request once and issues the code (the way oidc-provider resumes an interaction).
    return pageHeaders(reply).redirect(`${basePath}/authorize/resume?login=${pending.id}`, 303);
  }
  if ((await store.takeLoginRequest(pending.id, now)) === undefined) return sendErrorPage(reply, expiredSignIn());
  return pageHeaders(reply).redirect(`${basePath}/device?user_code=${encodeURIComponent(pending.purpose.userCode)}`, 303);
}

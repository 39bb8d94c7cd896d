/** The sign-in session: a random cookie whose SHA-256 is kept in the store. */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AppContext } from '../context.js';
import { readCookie, serializeCookie } from '../http/cookies.js';
import type { SessionRecord, SubjectClaims } from '../store/types.js';
import { digestOf, newSecret } from '../tokens/mint.js';

export const SESSION_COOKIE = 'pinpoint_session';

export async function currentSession(ctx: AppContext, request: FastifyRequest): Promise<SessionRecord | undefined> {
  const value = readCookie(request.headers.cookie, SESSION_COOKIE);
  if (value === undefined || value.length === 0 || value.length > 100) return undefined;
  return ctx.store.findSession(digestOf(value), ctx.now());
}

export async function startSession(
  ctx: AppContext,
  reply: FastifyReply,
  subject: string,
  claims: SubjectClaims,
): Promise<SessionRecord> {
  const now = ctx.now();
  const secret = newSecret();
  const session: SessionRecord = { digest: secret.digest, subject, claims, authTime: now, expiresAt: now + ctx.sessionLifetimeMs };
  await ctx.store.createSession(session);
  reply.header(
    'Set-Cookie',
    serializeCookie(SESSION_COOKIE, secret.value, { path: ctx.cookiePath, secure: ctx.secureCookies }),
  );
  return session;
}

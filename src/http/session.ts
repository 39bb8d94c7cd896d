/** The sign-in session: a random cookie whose SHA-256 is kept in the store. */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { digestOf } from '../crypto/digest.js';
import { newSecret } from '../crypto/random.js';
import type { SessionRecord, SessionStore, SubjectClaims } from '../store/types.js';
import { readCookie, serializeCookie, type CookieSettings } from './cookies.js';

export const SESSION_COOKIE = 'pinpoint_session';

export async function currentSession(
  sessions: SessionStore,
  cookies: CookieSettings,
  request: FastifyRequest,
  now: number,
): Promise<SessionRecord | undefined> {
  const value = readCookie(request.headers.cookie, cookies, SESSION_COOKIE);
  if (value === undefined || value.length === 0 || value.length > 100) return undefined;
  return sessions.findSession(digestOf(value), now);
}

export async function startSession(
  sessions: SessionStore,
  reply: FastifyReply,
  settings: { readonly cookies: CookieSettings; readonly lifetimeMs: number; readonly now: number },
  subject: string,
  claims: SubjectClaims,
): Promise<SessionRecord> {
  const { now } = settings;
  const secret = newSecret();
  const session: SessionRecord = { digest: secret.digest, subject, claims, authTime: now, expiresAt: now + settings.lifetimeMs };
  await sessions.createSession(session);
  reply.header('Set-Cookie', serializeCookie(SESSION_COOKIE, secret.value, settings.cookies));
  return session;
}

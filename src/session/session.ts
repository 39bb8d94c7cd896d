/** The sign-in session: a random cookie whose SHA-256 is kept in the store. */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { digestOf } from '../crypto/digest.js';
import { newSecret } from '../crypto/random.js';
import type { SessionRecord, SessionStore, SubjectClaims } from '../store/types.js';
import { readCookie, serializeCookie, type CookieSettings } from '../http/cookies.js';

export const SESSION_COOKIE = 'pinpoint_session';

/** What finding the session needs: the store, the cookie settings, and whether a subject is still known (DESIGN.md §6). */
export interface SessionLookup {
  readonly store: SessionStore;
  readonly cookies: CookieSettings;
  readonly isKnownSubject: (subject: string) => boolean;
}

/** The browser's session; none when its cookie is unknown or expired, or its person has left the configuration. */
export async function currentSession(lookup: SessionLookup, request: FastifyRequest, now: number): Promise<SessionRecord | undefined> {
  const value = readCookie(request.headers.cookie, lookup.cookies, SESSION_COOKIE);
  if (value === undefined || value.length === 0 || value.length > 100) return undefined;
  const session = await lookup.store.findSession(digestOf(value), now);
  return session !== undefined && lookup.isKnownSubject(session.subject) ? session : undefined;
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

/** Ends the browser's session: deletes its row and clears the cookie. Nothing when it has none. */
export async function endSession(sessions: SessionStore, cookies: CookieSettings, request: FastifyRequest, reply: FastifyReply): Promise<void> {
  const value = readCookie(request.headers.cookie, cookies, SESSION_COOKIE);
  if (value !== undefined && value.length > 0 && value.length <= 100) await sessions.deleteSession(digestOf(value));
  reply.header('Set-Cookie', serializeCookie(SESSION_COOKIE, '', { ...cookies, maxAge: 0 }));
}

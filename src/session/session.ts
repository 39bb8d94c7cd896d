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

/** The store key of the session the request's cookie names, if it names one of a plausible length. */
function cookieSessionDigest(request: FastifyRequest, cookies: CookieSettings): string | undefined {
  const value = readCookie(request.headers.cookie, cookies, SESSION_COOKIE);
  return value === undefined || value.length === 0 || value.length > 100 ? undefined : digestOf(value);
}

/** The browser's session; none when its cookie is unknown or expired, or its person has left the configuration. */
export async function currentSession(lookup: SessionLookup, request: FastifyRequest, now: number): Promise<SessionRecord | undefined> {
  const digest = cookieSessionDigest(request, lookup.cookies);
  if (digest === undefined) return undefined;
  const session = await lookup.store.findSession(digest, now);
  return session !== undefined && lookup.isKnownSubject(session.subject) ? session : undefined;
}

/**
 * A new session for `subject` in a fresh cookie. The session the browser's cookie named before is deleted first: a
 * sign-in ends it (whoever kept a copy of the old cookie can no longer use it, nor can it outlive a later sign-out).
 * `authTime` is when the person authenticated (an upstream's auth_time); a local sign-in is now.
 */
export async function startSession(
  sessions: SessionStore,
  request: FastifyRequest,
  reply: FastifyReply,
  settings: { readonly cookies: CookieSettings; readonly lifetimeMs: number; readonly now: number; readonly authTime?: number },
  subject: string,
  claims: SubjectClaims,
): Promise<SessionRecord> {
  const { now } = settings;
  const secret = newSecret();
  const session: SessionRecord = { digest: secret.digest, subject, claims, authTime: settings.authTime ?? now, expiresAt: now + settings.lifetimeMs };
  // One step: a failed write leaves the old session as it was, never a browser signed out and not in.
  await sessions.createSession(session, cookieSessionDigest(request, settings.cookies));
  reply.header('Set-Cookie', serializeCookie(SESSION_COOKIE, secret.value, settings.cookies));
  return session;
}

/** Ends the browser's session: deletes its row and clears the cookie. Nothing when it has none. */
export async function endSession(sessions: SessionStore, cookies: CookieSettings, request: FastifyRequest, reply: FastifyReply): Promise<void> {
  const digest = cookieSessionDigest(request, cookies);
  if (digest !== undefined) await sessions.deleteSession(digest);
  reply.header('Set-Cookie', serializeCookie(SESSION_COOKIE, '', { ...cookies, maxAge: 0 }));
}

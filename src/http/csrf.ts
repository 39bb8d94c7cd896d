/** CSRF protection for the pages' forms: a random cookie echoed in a hidden field (double submit). */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AppContext } from '../context.js';
import { readCookie, serializeCookie } from '../http/cookies.js';

export const CSRF_COOKIE = 'pinpoint_csrf';

/** The token for the form about to be shown; sets the cookie when the browser has none. */
export function csrfToken(ctx: AppContext, request: FastifyRequest, reply: FastifyReply): string {
  const existing = readCookie(request.headers.cookie, CSRF_COOKIE);
  if (existing !== undefined && /^[A-Za-z0-9_-]{43}$/.test(existing)) return existing;
  const token = randomBytes(32).toString('base64url');
  reply.header('Set-Cookie', serializeCookie(CSRF_COOKIE, token, { path: ctx.cookiePath, secure: ctx.secureCookies }));
  return token;
}

export function csrfValid(request: FastifyRequest, submitted: string | undefined): boolean {
  const cookie = readCookie(request.headers.cookie, CSRF_COOKIE);
  if (cookie === undefined || submitted === undefined) return false;
  const a = Buffer.from(cookie);
  const b = Buffer.from(submitted);
  return a.length === b.length && timingSafeEqual(a, b);
}

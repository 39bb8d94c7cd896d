/** CSRF protection for the pages' forms: a random cookie echoed in a hidden field (double submit). */
import { timingSafeEqual } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { digestOf, isBase64url32Bytes } from '../crypto/digest.js';
import { randomText } from '../crypto/random.js';
import { readCookie, serializeCookie, type CookieSettings } from '../http/cookies.js';

export const CSRF_COOKIE = 'pinpoint_csrf';

/** Tokens made during a request, so a second form (or a login request) in the same answer gets the same one. */
const issued = new WeakMap<FastifyRequest, string>();

/** The token for the form about to be shown; sets the cookie when the browser has none. */
export function csrfToken(cookies: CookieSettings, request: FastifyRequest, reply: FastifyReply): string {
  const existing = issued.get(request) ?? readCookie(request.headers.cookie, cookies, CSRF_COOKIE);
  if (existing !== undefined && isBase64url32Bytes(existing)) return existing;
  const token = randomText(32);
  reply.header('Set-Cookie', serializeCookie(CSRF_COOKIE, token, cookies));
  issued.set(request, token);
  return token;
}

export function csrfValid(cookies: CookieSettings, request: FastifyRequest, submitted: string | undefined): boolean {
  const cookie = readCookie(request.headers.cookie, cookies, CSRF_COOKIE);
  if (cookie === undefined || submitted === undefined) return false;
  const a = Buffer.from(cookie);
  const b = Buffer.from(submitted);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** SHA-256 of this browser's CSRF cookie, so state kept on the server can be bound to the browser (RFC 6749 §10.12). */
export function browserBinding(cookies: CookieSettings, request: FastifyRequest, reply: FastifyReply): string {
  return digestOf(csrfToken(cookies, request, reply));
}

/** True when the request comes from the browser `binding` was made for. */
export function sameBrowser(cookies: CookieSettings, request: FastifyRequest, binding: string): boolean {
  const cookie = readCookie(request.headers.cookie, cookies, CSRF_COOKIE);
  return cookie !== undefined && isBase64url32Bytes(cookie) && digestOf(cookie) === binding;
}

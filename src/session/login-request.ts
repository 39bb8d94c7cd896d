/**
 * Login requests: what a sign-in is for, kept on the server (never a URL from the query: no open redirect)
 * and bound to the browser that started it. /authorize and /device start one; sign-in ends by sending the
 * browser to /authorize/resume or back to /device, which continue it.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { randomText } from '../crypto/random.js';
import { OAuthError } from '../policy/oauth-error.js';
import type { LoginPurpose, LoginRequestStore } from '../store/types.js';
import type { CookieSettings } from '../http/cookies.js';
import { browserBinding } from './csrf.js';
import { pageHeaders } from '../http/pages.js';

/** Long enough to type a password or visit an upstream, short enough not to pile up. */
export const LOGIN_REQUEST_LIFETIME_MS = 15 * 60_000;

const LOGIN_ID = /^[A-Za-z0-9_-]{24}$/;

/** True when `id` has the shape of a login request id (so nothing else reaches the store). */
export const isLoginId = (id: string | undefined): id is string => id !== undefined && LOGIN_ID.test(id);

export interface LoginStart {
  readonly store: LoginRequestStore;
  readonly cookies: CookieSettings;
  readonly now: number;
  readonly signInPage: (loginId: string) => string;
}

/** Keeps `purpose` on the server and sends the browser to sign in (or to `page`, e.g. the consent page). */
export async function startLogin(
  start: LoginStart,
  request: FastifyRequest,
  reply: FastifyReply,
  purpose: LoginPurpose,
  page: (loginId: string) => string = start.signInPage,
): Promise<FastifyReply> {
  const id = randomText(18);
  const browser = browserBinding(start.cookies, request, reply);
  await start.store.saveLoginRequest({ id, purpose, browser, createdAt: start.now, expiresAt: start.now + LOGIN_REQUEST_LIFETIME_MS });
  return pageHeaders(reply).redirect(page(id), 303);
}

export const expiredSignIn = (): OAuthError =>
  new OAuthError('invalid_request', 'this sign-in has expired or was already used; start again from the application');

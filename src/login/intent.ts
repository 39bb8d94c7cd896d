/** What a sign-in is for, kept on the server (never a URL from the query: no open redirect). */
import { randomBytes } from 'node:crypto';
import type { AppContext } from '../context.js';
import type { AuthorizationRequest } from '../oauth/authorization-request.js';

export type LoginIntent =
  | { readonly kind: 'authorize'; readonly request: AuthorizationRequest }
  | { readonly kind: 'device'; readonly userCode: string };

const LOGIN_KIND = 'login';
/** Long enough to type a password or visit an upstream, short enough not to pile up. */
export const LOGIN_INTENT_LIFETIME_MS = 15 * 60_000;

export async function saveLoginIntent(ctx: AppContext, intent: LoginIntent): Promise<string> {
  const id = randomBytes(18).toString('base64url');
  await ctx.store.putTransient(LOGIN_KIND, id, intent, ctx.now() + LOGIN_INTENT_LIFETIME_MS);
  return id;
}

export function findLoginIntent(ctx: AppContext, id: string | undefined): Promise<LoginIntent | undefined> {
  if (id === undefined || !/^[A-Za-z0-9_-]{24}$/.test(id)) return Promise.resolve(undefined);
  return ctx.store.getTransient<LoginIntent>(LOGIN_KIND, id, ctx.now());
}

/** Taken once: a finished sign-in cannot be replayed into a second code. */
export function takeLoginIntent(ctx: AppContext, id: string): Promise<LoginIntent | undefined> {
  return ctx.store.takeTransient<LoginIntent>(LOGIN_KIND, id, ctx.now());
}

export function loginPageUrl(ctx: AppContext, id: string): string {
  return `${ctx.config.basePath}/login?login=${id}`;
}

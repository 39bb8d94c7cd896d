/** GET/POST /login: the local sign-in form (DESIGN.md §4 "Sign-in page contract"). */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { AppContext } from '../context.js';
import { EMPTY_PARAMS, single, type Params } from '../http/params.js';
import { sendErrorPage } from '../http/render-error.js';
import { csrfToken, csrfValid } from './csrf.js';
import { expiredSignIn, finishSignIn } from './finish.js';
import { findLoginIntent, type LoginIntent } from './intent.js';
import { html, sendPage } from './pages.js';
import { randomBytes } from 'node:crypto';
import { hashPassword, verifyPassword } from './password.js';
import { startSession } from './session.js';


interface FormState {
  readonly loginId: string;
  readonly intent: LoginIntent;
  readonly username?: string;
  readonly message?: string;
}

function signInBody(ctx: AppContext, csrf: string, state: FormState): ReturnType<typeof html> {
  const clientLine =
    state.intent.kind === 'authorize'
      ? html`<p class="muted">to continue to <strong>${state.intent.request.clientId}</strong></p>`
      : html`<p class="muted">to approve a device</p>`;
  const upstreams = [...ctx.config.federations.values()].map(
    (upstream) =>
      html`<li><a class="button" href="${ctx.config.basePath}/federation/start?login=${state.loginId}&amp;upstream=${encodeURIComponent(upstream.name)}">Sign in with ${upstream.name}</a></li>`,
  );
  const localForm =
    ctx.config.users.size === 0
      ? html``
      : html`<form method="post" action="${ctx.config.basePath}/login">
<input type="hidden" name="csrf" value="${csrf}">
<input type="hidden" name="login" value="${state.loginId}">
<label for="username">Username</label>
<input type="text" id="username" name="username" autocomplete="username" autocapitalize="none" spellcheck="false" required value="${state.username ?? ''}">
<label for="password">Password</label>
<input type="password" id="password" name="password" autocomplete="current-password" required>
<button type="submit">Sign in</button>
</form>`;
  return html`<h1>Sign in</h1>
${clientLine}
${state.message === undefined ? html`` : html`<p class="error" role="alert">${state.message}</p>`}
${localForm}
${upstreams.length === 0 ? html`` : html`<ul class="upstreams">${upstreams}</ul>`}`;
}

export function loginRoutes(ctx: AppContext): FastifyPluginAsync {
  // Verified against when the user is unknown, so timing does not tell which usernames exist.
  let unknownUserHash: Promise<string> | undefined;
  function showForm(request: FastifyRequest, reply: FastifyReply, status: number, state: FormState): FastifyReply {
    return sendPage(reply, status, 'Sign in', signInBody(ctx, csrfToken(ctx, request, reply), state));
  }

  /** Per-user and per-address attempt limits (DESIGN.md §4), kept in the store so instances share them. */
  async function lockedOut(address: string, username: string): Promise<number | undefined> {
    const now = ctx.now();
    const [byUser, byAddress] = await Promise.all([
      ctx.store.peekAttempts(`login-user:${username}`, now),
      ctx.store.peekAttempts(`login-address:${address}`, now),
    ]);
    if (byUser >= ctx.limits.loginFailuresPerUser || byAddress >= ctx.limits.loginFailuresPerAddress) {
      return Math.ceil(ctx.limits.loginWindowMs / 1000);
    }
    return undefined;
  }

  return async (app) => {
    app.get('/login', { config: { page: true } }, async (request, reply) => {
      const loginId = (request.query as Record<string, unknown>).login;
      const id = typeof loginId === 'string' ? loginId : undefined;
      const intent = await findLoginIntent(ctx, id);
      if (intent === undefined || id === undefined) return sendErrorPage(reply, expiredSignIn());
      return showForm(request, reply, 200, { loginId: id, intent });
    });

    app.post('/login', { config: { page: true } }, async (request, reply) => {
      const form = (request.body as Params | undefined) ?? EMPTY_PARAMS;
      const loginId = single(form, 'login');
      const intent = await findLoginIntent(ctx, loginId);
      if (intent === undefined || loginId === undefined) return sendErrorPage(reply, expiredSignIn());
      const username = single(form, 'username') ?? '';
      const password = form.get('password')?.[0] ?? '';
      if (!csrfValid(request, single(form, 'csrf'))) {
        request.outcome = 'csrf';
        return showForm(request, reply, 400, { loginId, intent, username, message: 'The form expired. Please sign in again.' });
      }
      const address = request.ip;
      const retryAfter = await lockedOut(address, username);
      if (retryAfter !== undefined) {
        request.outcome = 'too_many_attempts';
        reply.header('Retry-After', String(retryAfter));
        return showForm(request, reply, 429, { loginId, intent, username, message: 'Too many sign-in attempts. Try again later.' });
      }
      const user = ctx.config.users.get(username);
      const valid = await verifyPassword(password.slice(0, 1024), user?.passwordHash ?? (await (unknownUserHash ??= hashPassword(randomBytes(16).toString('hex')))));
      if (user === undefined || !valid) {
        const now = ctx.now();
        await ctx.store.countAttempt(`login-user:${username}`, now, ctx.limits.loginWindowMs);
        await ctx.store.countAttempt(`login-address:${address}`, now, ctx.limits.loginWindowMs);
        request.outcome = 'wrong_credentials';
        return showForm(request, reply, 401, { loginId, intent, username, message: 'Wrong username or password.' });
      }
      await ctx.store.clearAttempts(`login-user:${username}`);
      const session = await startSession(ctx, reply, `${user.username}`, { email: user.email, name: user.name });
      return finishSignIn(ctx, reply, loginId, session);
    });
  };
}

/** GET/POST /login: the local sign-in form (DESIGN.md §4 "Sign-in page contract"). */
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { AppContext } from '../context.js';
import type { UserRecord } from '../config/types.js';
import { digestOf } from '../crypto/digest.js';
import { PasswordCheckUnavailableError, PasswordPool } from '../crypto/password-pool.js';
import { takeAddressSlot } from '../http/failure-limit.js';
import { csrfToken, csrfValid } from '../session/csrf.js';
import { expiredSignIn, isLoginId } from '../session/login-request.js';
import { formTargetOf, html, sendPage } from '../http/pages.js';
import { EMPTY_PARAMS, single, type Params } from '../http/params.js';
import { sendErrorPage } from '../http/render-error.js';
import { startSession } from '../session/session.js';
import type { AttemptStore, LoginRequestRecord, LoginRequestStore, SessionStore } from '../store/types.js';
import { bounded } from '../log.js';
import { finishSignIn } from './finish.js';

/** The slow-down beyond login_failures_any grows by this much per further wrong password, up to MAX_SLOWDOWN_MS (DESIGN.md §7). */
const SLOWDOWN_STEP_MS = 250;
const MAX_SLOWDOWN_MS = 5000;

/** The state sign-in reads and changes. */
export type SignInStores = SessionStore & LoginRequestStore & AttemptStore;

interface FormState {
  readonly loginId: string;
  readonly pending: LoginRequestRecord;
  readonly username?: string;
  readonly message?: string;
}

function signInBody(ctx: AppContext, csrf: string, state: FormState): ReturnType<typeof html> {
  const clientLine =
    state.pending.purpose.kind === 'authorize'
      ? html`<p class="muted">to continue to <strong>${state.pending.purpose.authorization.clientId}</strong></p>`
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

export function loginRoutes(ctx: AppContext, store: SignInStores): FastifyPluginAsync {
  function showForm(request: FastifyRequest, reply: FastifyReply, status: number, state: FormState): FastifyReply {
    const { purpose } = state.pending;
    // After sign-in the browser goes on (through /authorize/resume) to the client's redirect URI.
    const target = purpose.kind === 'authorize' ? formTargetOf(purpose.authorization.redirectUri) : undefined;
    return sendPage(reply, status, 'Sign in', signInBody(ctx, csrfToken(ctx.cookies, request, reply), state), target === undefined ? [] : [target]);
  }

  /** Keys of the attempt counters: the user name as its digest, since it is attacker-chosen text of any length. */
  const userAtAddress = (username: string, address: string): string => `login:${digestOf(username)}:${address}`;
  const userAnywhere = (username: string): string => `login-any:${digestOf(username)}`;

  /**
   * DESIGN.md §7: the attempt is counted before the password is checked, in one atomic statement, so parallel
   * guesses cannot all pass a check made before any of them was counted. Beyond login_failures for this user from
   * this address: 429, the right password included, until the window ends. Beyond login_failures_any from all
   * addresses: only slowed, so nobody can lock a user out from addresses that never failed.
   */
  async function admit(username: string, address: string): Promise<{ refused: true } | { refused: false; delayMs: number }> {
    const now = ctx.now();
    const [here, anywhere] = await Promise.all([
      store.countAttempt(userAtAddress(username, address), now, ctx.limits.loginWindowMs),
      store.peekAttempts(userAnywhere(username), now),
    ]);
    if (here > ctx.limits.loginFailures) return { refused: true };
    const beyond = anywhere - ctx.limits.loginFailuresAny;
    return { refused: false, delayMs: beyond < 0 ? 0 : Math.min(MAX_SLOWDOWN_MS, (beyond + 1) * SLOWDOWN_STEP_MS) };
  }

  return async (app) => {
    // DESIGN.md §11: at most limits.password_hashes checks at once, in threads of their own, so token signing never waits behind scrypt.
    const passwords = new PasswordPool({
      size: ctx.limits.passwordHashes,
      maxWaitMs: ctx.limits.passwordWaitMs,
      maxWaiting: ctx.limits.passwordChecksWaiting,
      registry: ctx.metrics.registry,
      onThreadExit: (exitCode, error) => app.log.warn({ exitCode, err: { message: error?.message } }, 'a password hashing thread ended; another starts when needed'),
    });
    app.addHook('onClose', () => passwords.close());

    app.get('/login', { config: { page: true } }, async (request, reply) => {
      const loginId = (request.query as Record<string, unknown>).login;
      const id = typeof loginId === 'string' && isLoginId(loginId) ? loginId : undefined;
      const pending = id === undefined ? undefined : await store.findLoginRequest(id, ctx.now());
      if (pending === undefined || id === undefined) return sendErrorPage(reply, expiredSignIn());
      return showForm(request, reply, 200, { loginId: id, pending });
    });

    app.post('/login', { config: { page: true } }, async (request, reply) => {
      const form = (request.body as Params | undefined) ?? EMPTY_PARAMS;
      const loginId = single(form, 'login');
      const pending = isLoginId(loginId) ? await store.findLoginRequest(loginId, ctx.now()) : undefined;
      if (pending === undefined || loginId === undefined) return sendErrorPage(reply, expiredSignIn());
      const username = single(form, 'username') ?? '';
      const password = form.get('password')?.[0] ?? '';
      if (!csrfValid(ctx.cookies, request, single(form, 'csrf'))) {
        request.outcome = 'csrf';
        return showForm(request, reply, 400, { loginId, pending, username, message: 'The form expired. Please sign in again.' });
      }
      const address = request.ip;
      // DESIGN.md §7: the address's failure is counted before the password is checked, and given back when it is right.
      const slot = takeAddressSlot(ctx.failures, ctx.limits, address, ctx.now());
      if (!slot.ok) {
        request.outcome = 'too_many_attempts';
        reply.header('Retry-After', slot.error.headers['Retry-After'] ?? '60');
        return showForm(request, reply, 429, { loginId, pending, username, message: 'Too many failed requests from your network. Try again later.' });
      }
      let failed = false;
      let user: UserRecord | undefined;
      try {
        const admission = await admit(username, address);
        if (admission.refused) {
          request.outcome = 'too_many_attempts';
          reply.header('Retry-After', String(Math.ceil(ctx.limits.loginWindowMs / 1000)));
          return showForm(request, reply, 429, { loginId, pending, username, message: 'Too many sign-in attempts. Try again later.' });
        }
        if (admission.delayMs > 0) await sleep(admission.delayMs);
        user = ctx.config.users.get(username);
        let valid: boolean;
        try {
          // An unknown user costs the same check, so timing does not tell which usernames exist.
          valid = await passwords.verify(password.slice(0, 1024), user?.passwordHash);
        } catch (error) {
          if (!(error instanceof PasswordCheckUnavailableError)) throw error;
          // Not checked, so not counted against the user (DESIGN.md §11: 503 with Retry-After).
          await store.forgiveAttempt(userAtAddress(username, address), ctx.now());
          request.outcome = 'temporarily_unavailable';
          reply.header('Retry-After', String(error.retryAfterSeconds));
          return showForm(request, reply, 503, { loginId, pending, username, message: 'Too many sign-ins at once. Try again in a few seconds.' });
        }
        failed = user === undefined || !valid;
      } finally {
        // Only a wrong password keeps the slot: a 429, a 503 or an error (counted by the error handler) is no failure of its own.
        if (!failed) slot.release();
      }
      if (user === undefined || failed) {
        await store.countAttempt(userAnywhere(username), ctx.now(), ctx.limits.loginWindowMs);
        request.outcome = 'wrong_credentials';
        request.log.info({ audit: true, event: 'sign_in', outcome: 'failure', user: bounded(username), method: 'password', address }, 'sign-in failed');
        return showForm(request, reply, 401, { loginId, pending, username, message: 'Wrong username or password.' });
      }
      // The right password ends this address's count for the user; the count across addresses runs out by itself.
      await store.clearAttempts(userAtAddress(username, address));
      request.log.info({ audit: true, event: 'sign_in', outcome: 'success', user: user.username, method: 'password', address }, 'signed in');
      const now = ctx.now();
      await startSession(store, reply, { cookies: ctx.cookies, lifetimeMs: ctx.sessionLifetimeMs, now }, user.username, { email: user.email, name: user.name });
      return finishSignIn(store, reply, ctx.config.basePath, pending, now);
    });
  };
}

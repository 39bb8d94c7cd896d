/** GET/POST /login: the local sign-in form (DESIGN.md §4 "Sign-in page contract"). */
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Registry } from 'prom-client';
import type { UserRecord } from '../config/types.js';
import { digestOf } from '../crypto/digest.js';
import { PasswordCheckUnavailableError, PasswordPool } from '../crypto/password-pool.js';
import { typicalCost } from '../crypto/password.js';
import type { CookieSettings } from '../http/cookies.js';
import { admitAgainstAddress, limitedAddress, type RequestsInFlight } from '../http/failure-limit.js';
import { formTargetOf, sendPage } from '../http/pages.js';
import { EMPTY_PARAMS, single, type Params } from '../http/params.js';
import type { FixedWindowLimiter } from '../http/rate-limit.js';
import { sendErrorPage } from '../http/render-error.js';
import { signInPage } from '../http/templates.js';
import { bounded } from '../log.js';
import { csrfToken, csrfValid } from '../session/csrf.js';
import { expiredSignIn, isLoginId } from '../session/login-request.js';
import { startSession } from '../session/session.js';
import type { AttemptStore, LoginRequestRecord, LoginRequestStore, SessionStore } from '../store/types.js';
import { finishSignIn } from './finish.js';

/** The slow-down beyond login_failures_any grows by this much per further wrong password, up to MAX_SLOWDOWN_MS (DESIGN.md §7). */
const SLOWDOWN_STEP_MS = 250;
const MAX_SLOWDOWN_MS = 5000;

/** The limits sign-in applies (DESIGN.md §7 and §11), from the `limits` block. */
export interface SignInLimits {
  readonly addressFailures: number;
  readonly loginFailures: number;
  readonly loginFailuresAny: number;
  readonly loginWindowMs: number;
  readonly passwordHashes: number;
  readonly passwordWaitMs: number;
  readonly passwordChecksWaiting: number;
}

/** What the sign-in form uses, wired by buildApp. */
export interface LoginRouteDeps {
  readonly store: SessionStore & LoginRequestStore & AttemptStore;
  readonly now: () => number;
  readonly cookies: CookieSettings;
  readonly basePath: string;
  readonly users: ReadonlyMap<string, UserRecord>;
  /** The name the page shows for a client (its display_name when it has one). */
  readonly clientTitle: (clientId: string) => string;
  /** Names of the configured upstreams, offered as buttons beside the form. */
  readonly upstreams: readonly string[];
  /** The per-address failure counter every endpoint shares (DESIGN.md §7). */
  readonly failures: FixedWindowLimiter;
  readonly inFlight: RequestsInFlight;
  readonly limits: SignInLimits;
  readonly sessionLifetimeMs: number;
  /** Where the password pool's gauges are registered. */
  readonly metricsRegistry: Registry;
}

interface FormState {
  readonly loginId: string;
  readonly pending: LoginRequestRecord;
  readonly username?: string;
  readonly message?: string;
}

/** What checking a password came to; only `wrong` is a failure of the address (DESIGN.md §7). */
type PasswordCheck =
  | { readonly result: 'locked' }
  | { readonly result: 'busy'; readonly retryAfterSeconds: number }
  | { readonly result: 'wrong' }
  | { readonly result: 'right'; readonly user: UserRecord };

/** Keys of the attempt counters: the user name as its digest, since it is attacker-chosen text of any length. */
const userAtAddress = (username: string, address: string): string => `login:${digestOf(username)}:${limitedAddress(address)}`;
const userAnywhere = (username: string): string => `login-any:${digestOf(username)}`;
const anyUserAtAddress = (address: string): string => `login-address:${limitedAddress(address)}`;

/**
 * Password checks one address may start across all user names in a minute, as a multiple of login_failures: a
 * stranger naming a new user each time escapes login_failures, and each guess holds a hashing slot (0.1-0.8 s of
 * scrypt), so a few addresses kept the pool full and everyone else's sign-in waited into 503s (a cost audit). A
 * minute, so that a shared address (an office, a carrier's NAT) that reaches it waits a minute at most.
 */
const ANY_USER_FACTOR = 10;
const ANY_USER_WINDOW_MS = 60_000;

function showForm(deps: LoginRouteDeps, request: FastifyRequest, reply: FastifyReply, status: number, state: FormState): FastifyReply {
  const { purpose } = state.pending;
  // After sign-in the browser goes on (through /authorize/resume) to the client's redirect URI.
  const target = purpose.kind === 'authorize' ? formTargetOf(purpose.authorization.redirectUri) : undefined;
  const body = signInPage({
    basePath: deps.basePath,
    csrf: csrfToken(deps.cookies, request, reply),
    loginId: state.loginId,
    ...(purpose.kind === 'authorize' && { client: deps.clientTitle(purpose.authorization.clientId) }),
    localUsers: deps.users.size > 0,
    upstreams: deps.upstreams,
    username: state.username ?? '',
    ...(state.message !== undefined && { message: state.message }),
  });
  return sendPage(reply, status, 'Sign in', body, target === undefined ? [] : [target]);
}

/** The form again with a message, an outcome for the access log and, when given, Retry-After. */
function refuse(deps: LoginRouteDeps, request: FastifyRequest, reply: FastifyReply, status: number, outcome: string, state: FormState, retryAfter?: string): FastifyReply {
  request.outcome = outcome;
  if (retryAfter !== undefined) reply.header('Retry-After', retryAfter);
  return showForm(deps, request, reply, status, state);
}

/**
 * DESIGN.md §7: the attempt is counted before the password is checked, in one atomic statement, so parallel
 * guesses cannot all pass a check made before any of them was counted. Beyond login_failures for this user from
 * this address: 429, the right password included, until the window ends. Beyond login_failures_any from all
 * addresses: only slowed, so nobody can lock a user out from addresses that never failed.
 */
async function admit(deps: LoginRouteDeps, username: string, address: string): Promise<{ refused: true } | { refused: false; delayMs: number }> {
  const now = deps.now();
  const key = userAtAddress(username, address);
  const [before, anywhere, fromAddress] = await Promise.all([
    deps.store.peekAttempts(key, now),
    deps.store.peekAttempts(userAnywhere(username), now),
    deps.store.peekAttempts(anyUserAtAddress(address), now),
  ]);
  // Refused on reads while over a limit, so further guesses write nothing; else counted in atomic statements, so
  // parallel guesses cannot all pass a check made before any was counted.
  const addressLimit = ANY_USER_FACTOR * deps.limits.loginFailures;
  if (before >= deps.limits.loginFailures || fromAddress >= addressLimit) return { refused: true };
  const [here, checksHere] = await Promise.all([
    deps.store.countAttempt(key, now, deps.limits.loginWindowMs),
    deps.store.countAttempt(anyUserAtAddress(address), now, ANY_USER_WINDOW_MS),
  ]);
  if (here > deps.limits.loginFailures || checksHere > addressLimit) {
    // No check runs: the address's count of checks takes this one back (the user's counts what was tried).
    await deps.store.forgiveAttempt(anyUserAtAddress(address), now);
    return { refused: true };
  }
  const beyond = anywhere - deps.limits.loginFailuresAny;
  return { refused: false, delayMs: beyond < 0 ? 0 : Math.min(MAX_SLOWDOWN_MS, (beyond + 1) * SLOWDOWN_STEP_MS) };
}

async function checkPassword(deps: LoginRouteDeps, passwords: PasswordPool, username: string, password: string, address: string): Promise<PasswordCheck> {
  const admission = await admit(deps, username, address);
  if (admission.refused) return { result: 'locked' };
  if (admission.delayMs > 0) await sleep(admission.delayMs);
  const user = deps.users.get(username);
  try {
    // An unknown user costs the same check, so timing does not tell which usernames exist.
    // Waiting checks are served by address group in turn (password-pool.ts), as the limits count them.
    const valid = await passwords.verify(password.slice(0, 1024), user?.passwordHash, limitedAddress(address));
    return user !== undefined && valid ? { result: 'right', user } : { result: 'wrong' };
  } catch (error) {
    if (!(error instanceof PasswordCheckUnavailableError)) throw error;
    // Not checked, so not counted against the user or the address (DESIGN.md §11: 503 with Retry-After).
    await Promise.all([deps.store.forgiveAttempt(userAtAddress(username, address), deps.now()), deps.store.forgiveAttempt(anyUserAtAddress(address), deps.now())]);
    return { result: 'busy', retryAfterSeconds: error.retryAfterSeconds };
  }
}

async function showSignIn(deps: LoginRouteDeps, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const loginId = (request.query as Record<string, unknown>).login;
  const id = typeof loginId === 'string' && isLoginId(loginId) ? loginId : undefined;
  const pending = id === undefined ? undefined : await deps.store.findLoginRequest(id, deps.now());
  if (pending === undefined || id === undefined) return sendErrorPage(reply, expiredSignIn());
  return showForm(deps, request, reply, 200, { loginId: id, pending });
}

async function signIn(deps: LoginRouteDeps, passwords: PasswordPool, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const form = (request.body as Params | undefined) ?? EMPTY_PARAMS;
  const loginId = single(form, 'login');
  const pending = isLoginId(loginId) ? await deps.store.findLoginRequest(loginId, deps.now()) : undefined;
  if (pending === undefined || loginId === undefined) return sendErrorPage(reply, expiredSignIn());
  const username = single(form, 'username') ?? '';
  const state = { loginId, pending, username };
  if (!csrfValid(deps.cookies, request, single(form, 'csrf'))) {
    return refuse(deps, request, reply, 400, 'csrf', { ...state, message: 'The form expired. Please sign in again.' });
  }
  const address = request.ip;
  // DESIGN.md §7: the check counts against the address while it runs (so parallel guesses cannot all pass), and after it only when wrong.
  const admission = await admitAgainstAddress(deps.failures, deps.inFlight, deps.limits, address, deps.now);
  if (!admission.ok) {
    const message = 'Too many failed requests from your network. Try again later.';
    return refuse(deps, request, reply, 429, 'too_many_attempts', { ...state, message }, admission.error.headers['Retry-After'] ?? '60');
  }
  let check: PasswordCheck | undefined;
  try {
    check = await checkPassword(deps, passwords, username, form.get('password')?.[0] ?? '', address);
  } finally {
    // Only a wrong password counts: a 429, a 503 or an error (counted by the error handler) is no failure of its own.
    admission.settle(check?.result === 'wrong' ? 'failed' : 'done', deps.now());
  }
  switch (check.result) {
    case 'locked': {
      const message = 'Too many sign-in attempts. Try again later.';
      return refuse(deps, request, reply, 429, 'too_many_attempts', { ...state, message }, String(Math.ceil(deps.limits.loginWindowMs / 1000)));
    }
    case 'busy': {
      const message = 'Too many sign-ins at once. Try again in a few seconds.';
      return refuse(deps, request, reply, 503, 'temporarily_unavailable', { ...state, message }, String(check.retryAfterSeconds));
    }
    case 'wrong':
      return wrongPassword(deps, request, reply, state);
    case 'right':
      return signedIn(deps, request, reply, state, check.user);
  }
}

async function wrongPassword(deps: LoginRouteDeps, request: FastifyRequest, reply: FastifyReply, state: FormState & { readonly username: string }): Promise<FastifyReply> {
  await deps.store.countAttempt(userAnywhere(state.username), deps.now(), deps.limits.loginWindowMs);
  request.log.info({ audit: true, event: 'sign_in', outcome: 'failure', user: bounded(state.username), method: 'password', address: request.ip }, 'sign-in failed');
  return refuse(deps, request, reply, 401, 'wrong_credentials', { ...state, message: 'Wrong username or password.' });
}

async function signedIn(deps: LoginRouteDeps, request: FastifyRequest, reply: FastifyReply, state: FormState & { readonly username: string }, user: UserRecord): Promise<FastifyReply> {
  const address = request.ip;
  // The right password ends this address's count for the user, and is no guess of the address; the count across
  // addresses runs out by itself.
  await Promise.all([deps.store.clearAttempts(userAtAddress(state.username, address)), deps.store.forgiveAttempt(anyUserAtAddress(address), deps.now())]);
  request.log.info({ audit: true, event: 'sign_in', outcome: 'success', user: user.username, method: 'password', address }, 'signed in');
  const now = deps.now();
  await startSession(deps.store, request, reply, { cookies: deps.cookies, lifetimeMs: deps.sessionLifetimeMs, now }, user.username, { email: user.email, name: user.name });
  return finishSignIn(deps.store, reply, deps.basePath, state.pending, now);
}

export function loginRoutes(deps: LoginRouteDeps): FastifyPluginAsync {
  return async (app) => {
    // DESIGN.md §11: at most limits.password_hashes checks at once, in threads of their own, so token signing never waits behind scrypt.
    const passwords = new PasswordPool({
      size: deps.limits.passwordHashes,
      maxWaitMs: deps.limits.passwordWaitMs,
      maxWaiting: deps.limits.passwordChecksWaiting,
      registry: deps.metricsRegistry,
      // An unknown name costs what the users' own checks cost, whatever cost their hashes were made at.
      decoyCost: typicalCost([...deps.users.values()].map((user) => user.passwordHash)),
      onThreadExit: (exitCode, error) => app.log.warn({ exitCode, err: { message: error?.message } }, 'a password hashing thread ended; another starts when needed'),
    });
    app.addHook('onClose', () => passwords.close());
    app.get('/login', { config: { page: true } }, async (request, reply) => showSignIn(deps, request, reply));
    app.post('/login', { config: { page: true } }, async (request, reply) => signIn(deps, passwords, request, reply));
  };
}

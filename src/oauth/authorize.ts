/**
 * GET/POST /authorize (RFC 6749 §4.1, OIDC Core §3.1.2): validate everything, then a code or a sign-in; and
 * GET /authorize/resume, where sign-in sends the browser back to continue the login request kept on the server.
 */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { refreshLifetimeOf } from '../policy/grant-eligibility.js';
import { sameBrowser } from '../session/csrf.js';
import type { ClientDirectory } from '../clients/directory.js';
import type { CookieSettings } from '../http/cookies.js';
import { admitRequest, answerPageAdmitted, countsAsFailure, type FailureLimits, type RequestOutcome, type RequestsInFlight } from '../http/failure-limit.js';
import type { FixedWindowLimiter } from '../http/rate-limit.js';
import { expiredSignIn, isLoginId, startLogin, type LoginStart } from '../session/login-request.js';
import { pageHeaders } from '../http/pages.js';
import { EMPTY_PARAMS, parseParams, queryOf, single, type Params } from '../http/params.js';
import { sendErrorPage } from '../http/render-error.js';
import { consentDue } from '../session/consent.js';
import { currentSession } from '../session/session.js';
import { OAuthError } from '../policy/oauth-error.js';
import type {
  AuthorizationCodeStore,
  ConsentStore,
  LoginRequestStore,
  PendingAuthorization,
  PushedRequestStore,
  RegisteredClientStore,
  SessionRecord,
  SessionStore,
} from '../store/types.js';
import type { ClientRecord } from '../config/types.js';
import { redirectUriMatches } from '../policy/redirect-uri.js';
import { loopbackPortsOf, validateAuthorizationRequest, type AuthorizationValidation } from './authorization-request.js';
import { errorRedirect } from '../http/redirects.js';
import { completeAuthorization } from './complete-authorization.js';
import { pushedRequestDigest } from './par.js';
import { UNUSED_REGISTRATION_MS } from './register.js';

/** The state /authorize reads and changes. */
export type AuthorizeStores = SessionStore & LoginRequestStore & AuthorizationCodeStore & ConsentStore & RegisteredClientStore & PushedRequestStore;

/** What /authorize and /authorize/resume use, wired by buildApp. */
export interface AuthorizeRouteDeps {
  readonly store: AuthorizeStores;
  /** Clients by client_id: resolved once per request (dynamic clients need I/O), found again at resume. */
  readonly clients: Pick<ClientDirectory, 'resolve' | 'find' | 'rememberOrigins' | 'fetchesToResolve'>;
  readonly issuer: string;
  readonly now: () => number;
  readonly cookies: CookieSettings;
  readonly basePath: string;
  /** Where a sign-in starts: the sign-in page, or the only upstream when there are no local users. */
  readonly signInPage: (loginId: string) => string;
  /** Whether a session's subject is still a user or comes from a configured upstream (DESIGN.md §6). */
  readonly isKnownSubject: (subject: string) => boolean;
  /** The per-address failure counter every endpoint shares, and its limits (DESIGN.md §7). */
  readonly failures: FixedWindowLimiter;
  /** This process's requests still being answered, counted against the same limits until they end. */
  readonly inFlight: RequestsInFlight;
  readonly limits: FailureLimits;
}

/** What an /authorize request comes to for the failure limits (DESIGN.md §7), set as it goes and counted when it ends. */
interface Tally {
  outcome: RequestOutcome;
}

/** RFC 9126 §4 (DESIGN.md §13): a request_uri that is not one of ours, expired, used, or another client's. */
const unusableRequestUri = (): OAuthError =>
  new OAuthError('invalid_request_uri', 'the request_uri is unknown, expired, already used, or was pushed by another client; push the request to /par again');

/** OIDC Core §3.1.2.1: whether `session` satisfies the request's prompt=login and max_age, for a request made at `askedAt`. */
function sessionSatisfies(authorization: PendingAuthorization, session: SessionRecord, now: number, askedAt?: number): boolean {
  // A sign-in made after the request was is as fresh as any can be: it satisfies prompt=login and every max_age, 0
  // included (which would otherwise send the person back to sign in forever, a millisecond always having passed).
  const signedInForIt = askedAt !== undefined && session.authTime >= askedAt;
  if (authorization.prompt === 'login' && !signedInForIt) return false;
  return signedInForIt || authorization.maxAge === undefined || now - session.authTime <= authorization.maxAge * 1000;
}

/** DESIGN.md §8: only a dynamic client needs the person's consent, remembered until a request asks more. */
async function asksConsent(deps: AuthorizeRouteDeps, client: ClientRecord, authorization: PendingAuthorization, session: SessionRecord, askedAt?: number): Promise<boolean> {
  return client.dynamic !== undefined && (await consentDue(deps.store, { subject: session.subject, clientId: client.clientId, authorization, askedAt }));
}

const loginStart = (deps: AuthorizeRouteDeps): LoginStart => ({ store: deps.store, cookies: deps.cookies, now: deps.now(), signInPage: deps.signInPage });

const consentPage = (deps: AuthorizeRouteDeps) => (loginId: string): string => `${deps.basePath}/consent?login=${loginId}`;

async function finish(deps: AuthorizeRouteDeps, request: FastifyRequest, reply: FastifyReply, authorization: PendingAuthorization, session: SessionRecord, client: ClientRecord): Promise<FastifyReply> {
  request.clientId = authorization.clientId;
  request.outcome = 'ok';
  const now = deps.now();
  const redirect = await completeAuthorization(deps.store, deps.issuer, authorization, session, now);
  // Its page at the redirect URI exchanges the code next, from a browser: CORS must know its origin by then.
  deps.clients.rememberOrigins(client);
  // A registered client lives while grants of it are made (DESIGN.md §9 clean-up); a grant lasts its refresh lifetime.
  if (client.dynamic?.source === 'registration') {
    await deps.store.keepRegisteredClient(client.clientId, now + (refreshLifetimeOf(client) ?? 0) + UNUSED_REGISTRATION_MS);
  }
  return pageHeaders(reply).redirect(redirect, 303);
}

/**
 * RFC 9126 §4: the parameters a request_uri from /par stands for (all others but client_id are ignored), with the
 * digest to take it by once the request is valid; the request's own parameters when it names none.
 */
async function requestParameters(deps: AuthorizeRouteDeps, sent: Params, clientId: string | undefined): Promise<{ params: Params; pushed?: string } | OAuthError> {
  const requestUris = sent.get('request_uri');
  if (requestUris === undefined) return { params: sent };
  if (requestUris.length > 1) return new OAuthError('invalid_request', 'request_uri appears more than once');
  if (sent.get('client_id')?.length !== 1 || clientId === undefined) return new OAuthError('invalid_request', 'client_id is required with request_uri');
  const digest = pushedRequestDigest(requestUris[0] as string);
  const record = digest === undefined ? undefined : await deps.store.findPushedRequest(digest, clientId, deps.now());
  if (digest === undefined || record === undefined) return unusableRequestUri();
  return { params: new Map(record.parameters), pushed: digest };
}

/** A refused request counts against the address (and the client it names); untrusted client or redirect URI: a page, else back to the client. */
function refuseRequest(tally: Tally, request: FastifyRequest, reply: FastifyReply, issuer: string, refusal: Exclude<AuthorizationValidation, { ok: true }>): FastifyReply {
  const error = 'page' in refusal ? refusal.page : refusal.redirect.error;
  if (countsAsFailure(error.status)) tally.outcome = 'failed';
  if ('page' in refusal) return sendErrorPage(reply, refusal.page);
  const { redirectUri, state } = refusal.redirect;
  request.outcome = error.code;
  return pageHeaders(reply).redirect(errorRedirect(issuer, redirectUri, error, state), 303);
}

/** The request /authorize goes on with, validated and (when pushed) taken, with its client; or the answer that refuses it. */
async function acceptedRequest(
  deps: AuthorizeRouteDeps,
  tally: Tally,
  request: FastifyRequest,
  reply: FastifyReply,
  sent: Params,
  clientId: string | undefined,
): Promise<{ authorization: PendingAuthorization; client?: ClientRecord } | { refused: FastifyReply }> {
  const refuse = (refusal: Exclude<AuthorizationValidation, { ok: true }>): FastifyReply => refuseRequest(tally, request, reply, deps.issuer, refusal);
  const chosen = await requestParameters(deps, sent, clientId);
  if (chosen instanceof OAuthError) return { refused: refuse({ ok: false, page: chosen }) };
  const { params, pushed } = chosen;
  const resolution = clientId === undefined ? { found: false as const } : await deps.clients.resolve(clientId);
  const validation = validateAuthorizationRequest(params, resolution, deps.issuer, pushed === undefined ? 'authorize' : 'pushed');
  if (!validation.ok) return { refused: refuse(validation) };
  const authorization = validation.request;
  request.clientId = authorization.clientId;
  // Single use (RFC 9126 §4), taken once the request is valid: of two browsers using one request_uri, one goes on.
  if (pushed !== undefined && !(await deps.store.takePushedRequest(pushed, authorization.clientId, deps.now()))) {
    return { refused: refuse({ ok: false, page: unusableRequestUri() }) };
  }
  return { authorization, ...(resolution.found && { client: resolution.client }) };
}

/** OIDC Core §3.1.2.6: prompt=none cannot show a page, so what would need one goes back to the client as an error. */
function promptNoneRefused(deps: AuthorizeRouteDeps, request: FastifyRequest, reply: FastifyReply, authorization: PendingAuthorization, error: OAuthError): FastifyReply {
  request.outcome = error.code;
  return pageHeaders(reply).redirect(errorRedirect(deps.issuer, authorization.redirectUri, error, authorization.state), 303);
}

/** A valid request: a code when the person is signed in as it asks and has consented where needed, else sign-in or consent first. */
async function signInOrFinish(deps: AuthorizeRouteDeps, tally: Tally, request: FastifyRequest, reply: FastifyReply, authorization: PendingAuthorization, client: ClientRecord | undefined): Promise<FastifyReply> {
  const session = await currentSession(deps, request, deps.now());
  if (session === undefined || !sessionSatisfies(authorization, session, deps.now())) {
    if (authorization.prompt === 'none') return promptNoneRefused(deps, request, reply, authorization, new OAuthError('login_required', 'the person is not signed in'));
    // Each sign-in keeps a login request on the server: they count against the address (DESIGN.md §4), so a loop cannot fill the store.
    tally.outcome = 'kept';
    return startLogin(loginStart(deps), request, reply, { kind: 'authorize', authorization });
  }
  if (client === undefined) return sendErrorPage(reply, expiredSignIn());
  // Asked now (no askedAt), as sessionSatisfies is: with prompt=consent no consent given before counts.
  if (await asksConsent(deps, client, authorization, session)) {
    if (authorization.prompt === 'none') {
      return promptNoneRefused(deps, request, reply, authorization, new OAuthError('consent_required', 'the person has not allowed this client yet'));
    }
    tally.outcome = 'kept';
    return startLogin(loginStart(deps), request, reply, { kind: 'authorize', authorization }, consentPage(deps));
  }
  return finish(deps, request, reply, authorization, session, client);
}

async function handle(deps: AuthorizeRouteDeps, request: FastifyRequest, reply: FastifyReply, sent: Params): Promise<FastifyReply> {
  // The client the request claims to be: for the limits, and resolved once (a repeated client_id is refused later).
  const clientId = sent.get('client_id')?.length === 1 ? single(sent, 'client_id') : undefined;
  // A metadata document fetch is work an address makes the server do: it counts like a failure (DESIGN.md §9), in the
  // same step as the check, and the request counts as a failure until it ends, as at the form endpoints.
  const fetches = (): number => (clientId === undefined ? 0 : deps.clients.fetchesToResolve(clientId));
  const admitting = admitRequest(deps.failures, deps.inFlight, deps.limits, { address: request.ip, clientId, fetches }, deps.now);
  const admission = admitting instanceof Promise ? await admitting : admitting;
  if (!admission.ok) return sendErrorPage(reply, admission.error);
  const tally: Tally = { outcome: 'done' };
  try {
    const accepted = await acceptedRequest(deps, tally, request, reply, sent, clientId);
    if ('refused' in accepted) return accepted.refused;
    return await signInOrFinish(deps, tally, request, reply, accepted.authorization, accepted.client);
  } finally {
    // An error thrown past here is counted by the app's error handler (http/transport.ts).
    admission.settle(tally.outcome, deps.now());
  }
}

/** Continues a login request once the person has signed in, in the browser that started it. */
async function resume(deps: AuthorizeRouteDeps, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const loginId = single(parseParams(queryOf(request.url)), 'login');
  const now = deps.now();
  const pending = isLoginId(loginId) ? await deps.store.findLoginRequest(loginId, now) : undefined;
  if (pending === undefined || pending.purpose.kind !== 'authorize' || !sameBrowser(deps.cookies, request, pending.browser)) {
    return sendErrorPage(reply, expiredSignIn());
  }
  const authorization = pending.purpose.authorization;
  const session = await currentSession(deps, request, now);
  // Not (or no longer) signed in as the request asks: back to sign-in, same login request.
  if (session === undefined || !sessionSatisfies(authorization, session, now, pending.createdAt)) {
    return pageHeaders(reply).redirect(deps.signInPage(pending.id), 303);
  }
  // Finding the client again may fetch its metadata document: counted against the address as at /authorize (DESIGN.md §9).
  const clientId = authorization.clientId;
  const fetches = (): number => deps.clients.fetchesToResolve(clientId);
  return answerPageAdmitted(deps, { address: request.ip, clientId, fetches }, reply, () =>
    resumeAdmitted(deps, request, reply, { id: pending.id, createdAt: pending.createdAt, authorization }, session),
  );
}

/** The rest of a resume, once let in: the client found again, then consent or the code. */
async function resumeAdmitted(
  deps: AuthorizeRouteDeps,
  request: FastifyRequest,
  reply: FastifyReply,
  pending: { readonly id: string; readonly createdAt: number; readonly authorization: PendingAuthorization },
  session: SessionRecord,
): Promise<FastifyReply> {
  const { authorization } = pending;
  // The client or its redirect URI may have left the config since the request was validated (DESIGN.md §3).
  const client = await deps.clients.find(authorization.clientId);
  if (client === undefined || !redirectUriMatches(client.redirectUris, authorization.redirectUri, loopbackPortsOf(client))) {
    return sendErrorPage(reply, expiredSignIn());
  }
  if (await asksConsent(deps, client, authorization, session, pending.createdAt)) return pageHeaders(reply).redirect(consentPage(deps)(pending.id), 303);
  // Taken once: a finished sign-in cannot be replayed into a second code.
  if ((await deps.store.takeLoginRequest(pending.id, deps.now())) === undefined) return sendErrorPage(reply, expiredSignIn());
  return finish(deps, request, reply, authorization, session, client);
}

export function authorizeRoutes(deps: AuthorizeRouteDeps): FastifyPluginAsync {
  return async (app) => {
    app.get('/authorize', { config: { page: true } }, async (request, reply) => handle(deps, request, reply, parseParams(queryOf(request.url))));
    app.post('/authorize', { config: { page: true } }, async (request, reply) =>
      handle(deps, request, reply, (request.body as Params | undefined) ?? EMPTY_PARAMS),
    );
    app.get('/authorize/resume', { config: { page: true } }, async (request, reply) => resume(deps, request, reply));
  };
}

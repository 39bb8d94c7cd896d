/**
 * GET/POST /authorize (RFC 6749 §4.1, OIDC Core §3.1.2): validate everything, then a code or a sign-in; and
 * GET /authorize/resume, where sign-in sends the browser back to continue the login request kept on the server.
 */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { AppContext } from '../context.js';
import { sameBrowser } from '../session/csrf.js';
import { isDocumentUrl } from '../clients/directory.js';
import { countAgainstAddress, countFailure, tooManyFailures } from '../http/failure-limit.js';
import { expiredSignIn, isLoginId, startLogin } from '../session/login-request.js';
import { pageHeaders } from '../http/pages.js';
import { EMPTY_PARAMS, parseParams, queryOf, single, type Params } from '../http/params.js';
import { sendErrorPage } from '../http/render-error.js';
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
import { consentCovers, redirectOriginOf } from '../policy/consent.js';
import { redirectUriMatches } from '../policy/redirect-uri.js';
import { loopbackPortsOf, validateAuthorizationRequest } from './authorization-request.js';
import { errorRedirect } from '../http/redirects.js';
import { completeAuthorization } from './complete-authorization.js';
import { pushedRequestDigest } from './par.js';
import { UNUSED_REGISTRATION_MS } from './register.js';

/** The state /authorize reads and changes. */
export type AuthorizeStores = SessionStore & LoginRequestStore & AuthorizationCodeStore & ConsentStore & RegisteredClientStore & PushedRequestStore;

/** RFC 9126 §4 (DESIGN.md §13): a request_uri that is not one of ours, expired, used, or another client's. */
const unusableRequestUri = (): OAuthError =>
  new OAuthError('invalid_request_uri', 'the request_uri is unknown, expired, already used, or was pushed by another client; push the request to /par again');

/** OIDC Core §3.1.2.1: whether `session` satisfies the request's prompt=login and max_age, for a request made at `askedAt`. */
function sessionSatisfies(authorization: PendingAuthorization, session: SessionRecord, now: number, askedAt?: number): boolean {
  if (authorization.prompt === 'login' && (askedAt === undefined || session.authTime < askedAt)) return false;
  return authorization.maxAge === undefined || now - session.authTime <= authorization.maxAge * 1000;
}

export function authorizeRoutes(ctx: AppContext, store: AuthorizeStores): FastifyPluginAsync {
  const loginStart = (): Parameters<typeof startLogin>[0] => ({ store, cookies: ctx.cookies, now: ctx.now(), signInPage: ctx.signInPage });

  async function finish(request: FastifyRequest, reply: FastifyReply, authorization: PendingAuthorization, session: SessionRecord, client: ClientRecord): Promise<FastifyReply> {
    request.clientId = authorization.clientId;
    request.outcome = 'ok';
    const now = ctx.now();
    const redirect = await completeAuthorization(store, ctx.issuer, authorization, session, now);
    // A registered client lives while grants of it are made (DESIGN.md §9 clean-up); a grant lasts its refresh lifetime.
    if (client.dynamic?.source === 'registration') {
      await store.keepRegisteredClient(client.clientId, now + (client.refreshLifetimeMs ?? 0) + UNUSED_REGISTRATION_MS);
    }
    return pageHeaders(reply).redirect(redirect, 303);
  }

  /** DESIGN.md §8: a dynamic client needs the person's consent, remembered until a request asks more. */
  async function consentDue(client: ClientRecord, authorization: PendingAuthorization, session: SessionRecord, askedAt: number): Promise<boolean> {
    if (client.dynamic === undefined) return false;
    const redirectOrigin = redirectOriginOf(authorization.redirectUri);
    const allowed = await store.findConsent(session.subject, client.clientId, redirectOrigin);
    const asked = { scope: authorization.scope, resources: authorization.resources, redirectOrigin, promptConsent: authorization.prompt === 'consent', askedAt };
    return !consentCovers(allowed, asked);
  }

  /**
   * RFC 9126 §4: the parameters a request_uri from /par stands for (all others but client_id are ignored), with the
   * digest to take it by once the request is valid; the request's own parameters when it names none.
   */
  async function requestParameters(sent: Params, clientId: string | undefined): Promise<{ params: Params; pushed?: string } | OAuthError> {
    const requestUris = sent.get('request_uri');
    if (requestUris === undefined) return { params: sent };
    if (requestUris.length > 1) return new OAuthError('invalid_request', 'request_uri appears more than once');
    if (sent.get('client_id')?.length !== 1 || clientId === undefined) return new OAuthError('invalid_request', 'client_id is required with request_uri');
    const digest = pushedRequestDigest(requestUris[0] as string);
    const record = digest === undefined ? undefined : await store.findPushedRequest(digest, clientId, ctx.now());
    if (digest === undefined || record === undefined) return unusableRequestUri();
    return { params: new Map(record.parameters), pushed: digest };
  }

  async function handle(request: FastifyRequest, reply: FastifyReply, sent: Params): Promise<FastifyReply> {
    // The client the request claims to be: for the limits, and resolved once (a repeated client_id is refused below).
    const clientId = sent.get('client_id')?.length === 1 ? single(sent, 'client_id') : undefined;
    const limited = tooManyFailures(ctx.failures, ctx.limits, request.ip, clientId, ctx.now());
    if (limited !== undefined) return sendErrorPage(reply, limited);
    const chosen = await requestParameters(sent, clientId);
    if (chosen instanceof OAuthError) {
      countFailure(ctx.failures, request.ip, clientId, chosen.status, ctx.now());
      return sendErrorPage(reply, chosen);
    }
    const { params, pushed } = chosen;
    // A metadata document fetch is work an address makes the server do: it counts like a failure (DESIGN.md §9).
    if (clientId !== undefined && isDocumentUrl(clientId)) countAgainstAddress(ctx.failures, request.ip, ctx.now());
    const resolution = clientId === undefined ? { found: false as const } : await ctx.clients.resolve(clientId);
    const validation = validateAuthorizationRequest(params, resolution, ctx.issuer, pushed === undefined ? 'authorize' : 'pushed');
    if (!validation.ok) {
      const error = 'page' in validation ? validation.page : validation.redirect.error;
      countFailure(ctx.failures, request.ip, clientId, error.status, ctx.now());
      if ('page' in validation) return sendErrorPage(reply, validation.page);
      const { redirectUri, state } = validation.redirect;
      request.outcome = error.code;
      return pageHeaders(reply).redirect(errorRedirect(ctx.issuer, redirectUri, error, state), 303);
    }
    const authorization = validation.request;
    request.clientId = authorization.clientId;
    // Single use (RFC 9126 §4), taken once the request is valid: of two browsers using one request_uri, one goes on.
    if (pushed !== undefined && !(await store.takePushedRequest(pushed, authorization.clientId, ctx.now()))) {
      countFailure(ctx.failures, request.ip, clientId, 400, ctx.now());
      return sendErrorPage(reply, unusableRequestUri());
    }

    const session = await currentSession({ store, cookies: ctx.cookies, isKnownSubject: ctx.isKnownSubject }, request, ctx.now());
    if (session === undefined || !sessionSatisfies(authorization, session, ctx.now())) {
      if (authorization.prompt === 'none') {
        request.outcome = 'login_required';
        const error = new OAuthError('login_required', 'the person is not signed in');
        return pageHeaders(reply).redirect(errorRedirect(ctx.issuer, authorization.redirectUri, error, authorization.state), 303);
      }
      // Each sign-in keeps a login request on the server: they count against the address (DESIGN.md §4), so a loop cannot fill the store.
      countAgainstAddress(ctx.failures, request.ip, ctx.now());
      return startLogin(loginStart(), request, reply, { kind: 'authorize', authorization });
    }
    const client = resolution.found ? resolution.client : undefined;
    if (client === undefined) return sendErrorPage(reply, expiredSignIn());
    if (await consentDue(client, authorization, session, ctx.now())) {
      if (authorization.prompt === 'none') {
        request.outcome = 'consent_required';
        const error = new OAuthError('consent_required', 'the person has not allowed this client yet');
        return pageHeaders(reply).redirect(errorRedirect(ctx.issuer, authorization.redirectUri, error, authorization.state), 303);
      }
      countAgainstAddress(ctx.failures, request.ip, ctx.now());
      return startLogin(loginStart(), request, reply, { kind: 'authorize', authorization }, consentPage);
    }
    return finish(request, reply, authorization, session, client);
  }

  const consentPage = (loginId: string): string => `${ctx.config.basePath}/consent?login=${loginId}`;

  /** Continues a login request once the person has signed in, in the browser that started it. */
  async function resume(request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
    const loginId = single(parseParams(queryOf(request.url)), 'login');
    const now = ctx.now();
    const pending = isLoginId(loginId) ? await store.findLoginRequest(loginId, now) : undefined;
    if (pending === undefined || pending.purpose.kind !== 'authorize' || !sameBrowser(ctx.cookies, request, pending.browser)) {
      return sendErrorPage(reply, expiredSignIn());
    }
    const authorization = pending.purpose.authorization;
    const session = await currentSession({ store, cookies: ctx.cookies, isKnownSubject: ctx.isKnownSubject }, request, now);
    // Not (or no longer) signed in as the request asks: back to sign-in, same login request.
    if (session === undefined || !sessionSatisfies(authorization, session, now, pending.createdAt)) {
      return pageHeaders(reply).redirect(ctx.signInPage(pending.id), 303);
    }
    // The client or its redirect URI may have left the config since the request was validated (DESIGN.md §3).
    const client = await ctx.clients.find(authorization.clientId);
    if (client === undefined || !redirectUriMatches(client.redirectUris, authorization.redirectUri, loopbackPortsOf(client))) {
      return sendErrorPage(reply, expiredSignIn());
    }
    if (await consentDue(client, authorization, session, pending.createdAt)) return pageHeaders(reply).redirect(consentPage(pending.id), 303);
    // Taken once: a finished sign-in cannot be replayed into a second code.
    if ((await store.takeLoginRequest(pending.id, now)) === undefined) return sendErrorPage(reply, expiredSignIn());
    return finish(request, reply, authorization, session, client);
  }

  return async (app) => {
    app.get('/authorize', { config: { page: true } }, async (request, reply) => handle(request, reply, parseParams(queryOf(request.url))));
    app.post('/authorize', { config: { page: true } }, async (request, reply) =>
      handle(request, reply, (request.body as Params | undefined) ?? EMPTY_PARAMS),
    );
    app.get('/authorize/resume', { config: { page: true } }, resume);
  };
}

/** GET /federation/start and /federation/{name}/callback: Pinpoint as an OpenID Connect relying party of an upstream. */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import * as oidc from 'openid-client';
import type { FederationRecord } from '../config/types.js';
import type { AppContext } from '../context.js';
import { browserBinding, sameBrowser } from '../session/csrf.js';
import { expiredSignIn, isLoginId } from '../session/login-request.js';
import { pageHeaders } from '../http/pages.js';
import { parseParams, queryOf, single } from '../http/params.js';
import { sendErrorPage } from '../http/render-error.js';
import { startSession } from '../session/session.js';
import { OAuthError } from '../policy/oauth-error.js';
import type { FederationStateStore, LoginRequestStore, SessionStore, SubjectClaims, SubjectClaimsStore } from '../store/types.js';
import { bounded } from '../log.js';
import { finishSignIn } from './finish.js';

/** The state upstream sign-in reads and changes. */
export type FederationStores = FederationStateStore & LoginRequestStore & SessionStore & SubjectClaimsStore;

const PENDING_LIFETIME_MS = 10 * 60_000;
/** Claims of upstream subjects outlive the session so /userinfo can answer for refreshed tokens. */
const SUBJECT_CLAIMS_LIFETIME_MS = 30 * 24 * 3600_000;
/** Seconds; also applies to the token and userinfo requests made with the discovered configuration. */
const UPSTREAM_TIMEOUT_SECONDS = 10;
const STATE_PATTERN = /^[A-Za-z0-9_-]{16,128}$/;
/** RFC 6749 §4.1.2.1: an error code is printable ASCII without `"` and `\`. */
const ERROR_CODE_PATTERN = /^[\x20\x21\x23-\x5B\x5D-\x7E]{1,64}$/;

const unknownUpstream = (): OAuthError => new OAuthError('invalid_request', 'there is no such sign-in method');
const expiredUpstreamSignIn = (): OAuthError =>
  new OAuthError('invalid_request', 'this sign-in has expired, was already used or was started in another browser; start again from the application');
const unreachable = (upstream: FederationRecord): OAuthError =>
  new OAuthError('temporarily_unavailable', `${upstream.name} cannot be reached right now; try again later`, 502);
const failedExchange = (upstream: FederationRecord): OAuthError =>
  new OAuthError('server_error', `the sign-in with ${upstream.name} could not be completed; try again later`, 502);

/** Plain http is accepted only for an issuer on this machine (tests, local development). */
function isLoopbackHttp(issuer: URL): boolean {
  return issuer.protocol === 'http:' && ['127.0.0.1', 'localhost', '[::1]'].includes(issuer.hostname);
}

/** fetch rejects with a TypeError when the connection fails, and with a TimeoutError when the upstream is too slow. */
function isNetworkFailure(error: unknown): boolean {
  return error instanceof TypeError || (error instanceof Error && (error.name === 'TimeoutError' || error.name === 'AbortError'));
}

/** What an upstream failure may say in the log: its kind, never a response body, code or token. */
function describeFailure(error: unknown): Record<string, string> {
  if (!(error instanceof Error)) return { error: 'unknown' };
  const code: unknown = (error as { code?: unknown }).code;
  const cause: unknown = (error.cause as { code?: unknown } | undefined)?.code;
  return {
    error: error.name,
    message: error.message.slice(0, 200),
    ...(typeof code === 'string' && { code }),
    ...(typeof cause === 'string' && { cause }),
    ...upstreamAnswer(error),
  };
}

/** The upstream's HTTP status and OAuth error code (e.g. invalid_client for a wrong secret), never its description or body. */
function upstreamAnswer(error: Error): Record<string, string> {
  if (error instanceof oidc.ResponseBodyError) return { status: String(error.status), upstreamError: error.error.slice(0, 64) };
  if (error instanceof oidc.WWWAuthenticateChallengeError) {
    const code = error.cause.map((challenge) => challenge.parameters.error).find((value) => value !== undefined);
    return { status: String(error.status), ...(code !== undefined && { upstreamError: code.slice(0, 64) }) };
  }
  return {};
}

export function federationRoutes(ctx: AppContext, store: FederationStores): FastifyPluginAsync {
  /** One callback per upstream (DESIGN.md §7): a response's path says which upstream it claims to come from. */
  const callbackUrl = (upstream: FederationRecord): string => `${ctx.issuer}/federation/${encodeURIComponent(upstream.name)}/callback`;
  /** Discovery per upstream; a failed attempt is forgotten so the next sign-in tries again. */
  const discovered = new Map<string, Promise<oidc.Configuration>>();

  function configurationOf(upstream: FederationRecord): Promise<oidc.Configuration> {
    const cached = discovered.get(upstream.name);
    if (cached !== undefined) return cached;
    const issuer = new URL(upstream.issuer);
    const pending = oidc.discovery(issuer, upstream.clientId, undefined, oidc.ClientSecretBasic(upstream.clientSecret), {
      timeout: UPSTREAM_TIMEOUT_SECONDS,
      ...(isLoopbackHttp(issuer) && { execute: [oidc.allowInsecureRequests] }),
    });
    discovered.set(upstream.name, pending);
    pending.catch(() => {
      if (discovered.get(upstream.name) === pending) discovered.delete(upstream.name);
    });
    return pending;
  }

  /** Every upstream failure is a 502 page; the log says which step failed and how, without secrets. */
  function upstreamFailed(
    request: FastifyRequest,
    reply: FastifyReply,
    upstream: FederationRecord,
    stage: 'discovery' | 'code exchange',
    error: unknown,
  ): FastifyReply {
    request.log.warn({ upstream: upstream.name, stage, ...describeFailure(error) }, 'upstream sign-in failed');
    return sendErrorPage(reply, stage === 'discovery' || isNetworkFailure(error) ? unreachable(upstream) : failedExchange(upstream));
  }

  /** The person's identity from the ID token, completed from userinfo when the ID token lacks email or name. */
  async function identityOf(
    request: FastifyRequest,
    upstream: FederationRecord,
    configuration: oidc.Configuration,
    tokens: oidc.TokenEndpointResponse,
    idToken: oidc.IDToken,
  ): Promise<{ claims: Record<string, unknown>; identity: SubjectClaims }> {
    let claims: Record<string, unknown> = { ...idToken };
    const wantsMore =
      (claims.email === undefined && upstream.scopes.includes('email')) || (claims.name === undefined && upstream.scopes.includes('profile'));
    if (wantsMore && configuration.serverMetadata().userinfo_endpoint !== undefined) {
      try {
        const userinfo = await oidc.fetchUserInfo(configuration, tokens.access_token, idToken.sub);
        claims = { ...userinfo, ...claims };
      } catch (error) {
        request.log.warn({ upstream: upstream.name, stage: 'userinfo', ...describeFailure(error) }, 'upstream userinfo failed; continuing with the ID token');
      }
    }
    // DESIGN.md §7: an address is passed on only when the upstream says it verified it.
    const email = typeof claims.email === 'string' && claims.email_verified === true ? claims.email : undefined;
    const name = typeof claims.name === 'string' ? claims.name : undefined;
    return { claims, identity: { ...(email !== undefined && { email }), ...(name !== undefined && { name }) } };
  }

  return async (app) => {
    app.get('/federation/start', { config: { page: true } }, async (request, reply) => {
      const params = parseParams(queryOf(request.url));
      const loginId = single(params, 'login');
      const pending = isLoginId(loginId) ? await store.findLoginRequest(loginId, ctx.now()) : undefined;
      if (pending === undefined) return sendErrorPage(reply, expiredSignIn());
      const upstream = ctx.config.federations.get(single(params, 'upstream') ?? '');
      if (upstream === undefined) return sendErrorPage(reply, unknownUpstream());

      let configuration: oidc.Configuration;
      try {
        configuration = await configurationOf(upstream);
      } catch (error) {
        return upstreamFailed(request, reply, upstream, 'discovery', error);
      }
      const state = oidc.randomState();
      const nonce = oidc.randomNonce();
      const codeVerifier = oidc.randomPKCECodeVerifier();
      await store.saveFederationState({
        state,
        loginId: pending.id,
        upstream: upstream.name,
        codeVerifier,
        nonce,
        browser: browserBinding(ctx.cookies, request, reply),
        expiresAt: ctx.now() + PENDING_LIFETIME_MS,
      });
      const target = oidc.buildAuthorizationUrl(configuration, {
        redirect_uri: callbackUrl(upstream),
        scope: upstream.scopes.join(' '),
        code_challenge: await oidc.calculatePKCECodeChallenge(codeVerifier),
        code_challenge_method: 'S256',
        state,
        nonce,
      });
      request.outcome = 'ok';
      return pageHeaders(reply).redirect(target.href, 303);
    });

    app.get('/federation/:upstream/callback', { config: { page: true } }, async (request, reply) => {
      const named = (request.params as { upstream: string }).upstream;
      const query = queryOf(request.url);
      const params = parseParams(query);
      const state = single(params, 'state');
      const pending =
        state === undefined || !STATE_PATTERN.test(state) || (params.get('state')?.length ?? 0) > 1
          ? undefined
          : await store.findFederationState(state, ctx.now());
      const upstream = pending === undefined ? undefined : ctx.config.federations.get(pending.upstream);
      if (pending === undefined || upstream === undefined || !sameBrowser(ctx.cookies, request, pending.browser)) {
        return sendErrorPage(reply, expiredUpstreamSignIn());
      }
      // RFC 9207 mix-up defence: the response must come back on its own upstream's callback, and name that issuer when it names one.
      const issuer = single(params, 'iss');
      if (upstream.name !== named || (issuer !== undefined && issuer !== upstream.issuer)) {
        request.log.warn({ upstream: upstream.name, callback: named.slice(0, 64) }, 'upstream response meant for another upstream');
        return sendErrorPage(reply, new OAuthError('invalid_request', 'this answer does not come from the sign-in method it was sent to; start again from the application'));
      }
      // Checked, now taken once (a refused answer above leaves the sign-in to its own browser): one answer per state.
      if ((await store.takeFederationState(pending.state, ctx.now())) === undefined) return sendErrorPage(reply, expiredUpstreamSignIn());

      const upstreamError = single(params, 'error');
      if (upstreamError !== undefined) {
        const code = ERROR_CODE_PATTERN.test(upstreamError) ? upstreamError : 'an invalid error code';
        request.log.info({ upstream: upstream.name, upstreamError: code }, 'upstream refused the sign-in');
        return sendErrorPage(reply, new OAuthError('access_denied', `${upstream.name} did not sign you in (it answered "${code}")`, 400));
      }

      let configuration: oidc.Configuration;
      try {
        configuration = await configurationOf(upstream);
      } catch (error) {
        return upstreamFailed(request, reply, upstream, 'discovery', error);
      }
      let tokens: oidc.TokenEndpointResponse & oidc.TokenEndpointResponseHelpers;
      let idToken: oidc.IDToken | undefined;
      try {
        // openid-client checks state, iss (RFC 9207), PKCE, and the ID token's signature, iss, aud, exp and nonce.
        tokens = await oidc.authorizationCodeGrant(configuration, new URL(`${callbackUrl(upstream)}?${query}`), {
          expectedState: state,
          expectedNonce: pending.nonce,
          pkceCodeVerifier: pending.codeVerifier,
          idTokenExpected: true,
        });
        idToken = tokens.claims();
        if (idToken === undefined) throw new Error('the token response has no ID token');
      } catch (error) {
        return upstreamFailed(request, reply, upstream, 'code exchange', error);
      }

      const { claims, identity } = await identityOf(request, upstream, configuration, tokens, idToken);
      const subjectValue = upstream.subjectClaim === undefined ? idToken.sub : claims[upstream.subjectClaim];
      if (typeof subjectValue !== 'string' || subjectValue === '') {
        request.log.warn({ upstream: upstream.name, subjectClaim: upstream.subjectClaim }, 'upstream sent no usable subject claim');
        return sendErrorPage(reply, failedExchange(upstream));
      }
      const subject = `${upstream.name}:${subjectValue}`;
      const now = ctx.now();
      const login = await store.findLoginRequest(pending.loginId, now);
      if (login === undefined) return sendErrorPage(reply, expiredSignIn());
      await startSession(store, reply, { cookies: ctx.cookies, lifetimeMs: ctx.sessionLifetimeMs, now }, subject, identity);
      await store.saveSubjectClaims(subject, identity, now + SUBJECT_CLAIMS_LIFETIME_MS);
      request.log.info({ audit: true, event: 'sign_in', outcome: 'success', user: bounded(subject), method: `federation:${upstream.name}`, address: request.ip }, 'signed in');
      return finishSignIn(store, reply, ctx.config.basePath, login, now);
    });
  };
}

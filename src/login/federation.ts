/** GET /federation/start and /federation/{name}/callback: Pinpoint as an OpenID Connect relying party of an upstream. */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import * as oidc from 'openid-client';
import type { FederationRecord } from '../config/types.js';
import type { CookieSettings } from '../http/cookies.js';
import { answerPageAdmitted, type FailureLimits, type RequestsInFlight } from '../http/failure-limit.js';
import type { FixedWindowLimiter } from '../http/rate-limit.js';
import { pageHeaders } from '../http/pages.js';
import { parseParams, queryOf, single, type Params } from '../http/params.js';
import { sendErrorPage } from '../http/render-error.js';
import { bounded } from '../log.js';
import { OAuthError } from '../policy/oauth-error.js';
import { browserBinding, sameBrowser } from '../session/csrf.js';
import { expiredSignIn, isLoginId } from '../session/login-request.js';
import { startSession } from '../session/session.js';
import type {
  FederationStateRecord,
  FederationStateStore,
  LoginRequestRecord,
  LoginRequestStore,
  SessionStore,
  SubjectClaimsStore,
} from '../store/types.js';
import { finishSignIn } from './finish.js';
import { identityOf, mergedClaims, subjectValueOf, wantsUserinfo } from './upstream-identity.js';
import { reauthenticationFor, upstreamAuthTime, upstreamParameters } from './upstream-reauthentication.js';

/** What upstream sign-in uses, wired by buildApp. */
export interface FederationRouteDeps {
  readonly store: FederationStateStore & LoginRequestStore & SessionStore & SubjectClaimsStore;
  readonly now: () => number;
  readonly cookies: CookieSettings;
  readonly basePath: string;
  /** This server's issuer: the callback URLs registered upstream are under it. */
  readonly issuer: string;
  /** The configured upstreams by name. */
  readonly federations: ReadonlyMap<string, FederationRecord>;
  readonly sessionLifetimeMs: number;
  /** The per-address failure counter every endpoint shares, and its limits (DESIGN.md §4): each start keeps a row. */
  readonly failures: FixedWindowLimiter;
  /** This process's requests still being answered, counted against the same limits until they end. */
  readonly inFlight: RequestsInFlight;
  readonly limits: FailureLimits;
}

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
const notReauthenticated = (upstream: FederationRecord): OAuthError =>
  new OAuthError('server_error', `${upstream.name} did not confirm that you signed in again, as the application asked; the sign-in was not completed`, 502);

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

/**
 * A failed discovery is remembered this long: starts from any number of addresses then make at most one request to a
 * failing upstream per interval (4 a minute), while a person retrying after the upstream is back waits 15 s at most.
 */
const FAILED_DISCOVERY_MS = 15_000;

/** Discovery per upstream, kept for the plugin's life; a failed attempt is remembered for FAILED_DISCOVERY_MS, then tried again. */
type Discovery = (upstream: FederationRecord) => Promise<oidc.Configuration>;

function cachedDiscovery(now: () => number): Discovery {
  const discovered = new Map<string, { readonly pending: Promise<oidc.Configuration>; failedAt?: number }>();
  return (upstream) => {
    const cached = discovered.get(upstream.name);
    if (cached !== undefined && (cached.failedAt === undefined || now() - cached.failedAt < FAILED_DISCOVERY_MS)) return cached.pending;
    const issuer = new URL(upstream.issuer);
    const pending = oidc.discovery(issuer, upstream.clientId, undefined, oidc.ClientSecretBasic(upstream.clientSecret), {
      timeout: UPSTREAM_TIMEOUT_SECONDS,
      // The ID token's signature is checked against the upstream's jwks_uri (openid-client skips it by default for an
      // answer of the token endpoint); that check refuses alg "none" even when discovery lists it (and HS*).
      execute: [...(isLoopbackHttp(issuer) ? [oidc.allowInsecureRequests] : []), oidc.enableNonRepudiationChecks],
    });
    const entry: { readonly pending: Promise<oidc.Configuration>; failedAt?: number } = { pending };
    discovered.set(upstream.name, entry);
    pending.catch(() => {
      entry.failedAt = now();
    });
    return pending;
  };
}

/** One callback per upstream (DESIGN.md §7): a response's path says which upstream it claims to come from. */
const callbackUrl = (issuer: string, upstream: FederationRecord): string => `${issuer}/federation/${encodeURIComponent(upstream.name)}/callback`;

type Stage = 'discovery' | 'code exchange';

/** Every upstream failure is a 502 page; the log says which step failed and how, without secrets. */
function upstreamFailed(request: FastifyRequest, reply: FastifyReply, upstream: FederationRecord, stage: Stage, error: unknown): FastifyReply {
  request.log.warn({ upstream: upstream.name, stage, ...describeFailure(error) }, 'upstream sign-in failed');
  return sendErrorPage(reply, stage === 'discovery' || isNetworkFailure(error) ? unreachable(upstream) : failedExchange(upstream));
}

/** The person's claims from the ID token, completed from userinfo when the ID token lacks what is wanted (upstream-identity.ts). */
async function upstreamClaims(
  request: FastifyRequest,
  upstream: FederationRecord,
  configuration: oidc.Configuration,
  tokens: oidc.TokenEndpointResponse,
  idToken: oidc.IDToken,
): Promise<Record<string, unknown>> {
  if (!wantsUserinfo(upstream, idToken) || configuration.serverMetadata().userinfo_endpoint === undefined) return mergedClaims(idToken, undefined);
  try {
    // openid-client refuses an answer whose sub is not the ID token's.
    return mergedClaims(idToken, await oidc.fetchUserInfo(configuration, tokens.access_token, idToken.sub));
  } catch (error) {
    request.log.warn({ upstream: upstream.name, stage: 'userinfo', ...describeFailure(error) }, 'upstream userinfo failed; continuing with the ID token');
    return mergedClaims(idToken, undefined);
  }
}

/** Keeps state, nonce and PKCE verifier on the server, bound to this browser; the upstream's authorization URL. */
async function authorizationUrl(
  deps: FederationRouteDeps,
  request: FastifyRequest,
  reply: FastifyReply,
  configuration: oidc.Configuration,
  upstream: FederationRecord,
  login: LoginRequestRecord,
): Promise<URL> {
  const state = oidc.randomState();
  const nonce = oidc.randomNonce();
  const codeVerifier = oidc.randomPKCECodeVerifier();
  await deps.store.saveFederationState({
    state,
    loginId: login.id,
    upstream: upstream.name,
    codeVerifier,
    nonce,
    browser: browserBinding(deps.cookies, request, reply),
    expiresAt: deps.now() + PENDING_LIFETIME_MS,
  });
  return oidc.buildAuthorizationUrl(configuration, {
    redirect_uri: callbackUrl(deps.issuer, upstream),
    scope: upstream.scopes.join(' '),
    code_challenge: await oidc.calculatePKCECodeChallenge(codeVerifier),
    code_challenge_method: 'S256',
    state,
    nonce,
    // prompt=login and max_age reach the upstream, which holds the person's session there.
    ...upstreamParameters(reauthenticationFor(login.purpose)),
  });
}

/**
 * GET /federation/start: sends the browser to the upstream named on the sign-in page. Each start keeps its state on
 * the server for 10 minutes, so it counts against the address as /authorize's login requests do (DESIGN.md §4), let in
 * before anything is read: a loop from one address ends at address_failures with 429. A refusal counts as a failure.
 */
async function startUpstream(deps: FederationRouteDeps, discover: Discovery, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  return answerPageAdmitted(deps, { address: request.ip, clientId: undefined, fetches: () => 0 }, reply, (keep) => startAdmitted(deps, discover, keep, request, reply));
}

/** A start once let in; `keep` counts it against the address before its state is written. */
async function startAdmitted(deps: FederationRouteDeps, discover: Discovery, keep: () => void, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const params = parseParams(queryOf(request.url));
  const loginId = single(params, 'login');
  const pending = isLoginId(loginId) ? await deps.store.findLoginRequest(loginId, deps.now()) : undefined;
  if (pending === undefined) return sendErrorPage(reply, expiredSignIn());
  const upstream = deps.federations.get(single(params, 'upstream') ?? '');
  if (upstream === undefined) return sendErrorPage(reply, unknownUpstream());
  let configuration: oidc.Configuration;
  try {
    configuration = await discover(upstream);
  } catch (error) {
    // The upstream's failure (502), yet counted against the address: a loop of such starts must end in 429.
    keep();
    return upstreamFailed(request, reply, upstream, 'discovery', error);
  }
  // Counted before it is written, as /authorize counts a login request.
  keep();
  const target = await authorizationUrl(deps, request, reply, configuration, upstream, pending);
  request.outcome = 'ok';
  return pageHeaders(reply).redirect(target.href, 303);
}

interface AnsweredSignIn {
  readonly pending: FederationStateRecord;
  readonly upstream: FederationRecord;
}

/**
 * The upstream sign-in an answer continues: from this browser, on its own upstream's callback, then taken once
 * (a refused answer leaves the sign-in to its own browser): one answer per state.
 */
async function takeAnsweredSignIn(deps: FederationRouteDeps, request: FastifyRequest, named: string, params: Params): Promise<AnsweredSignIn | OAuthError> {
  const state = single(params, 'state');
  const pending =
    state === undefined || !STATE_PATTERN.test(state) || (params.get('state')?.length ?? 0) > 1
      ? undefined
      : await deps.store.findFederationState(state, deps.now());
  const upstream = pending === undefined ? undefined : deps.federations.get(pending.upstream);
  if (pending === undefined || upstream === undefined || !sameBrowser(deps.cookies, request, pending.browser)) return expiredUpstreamSignIn();
  // RFC 9207 mix-up defence: the response must come back on its own upstream's callback, and name that issuer when it names one.
  const issuer = single(params, 'iss');
  if (upstream.name !== named || (issuer !== undefined && issuer !== upstream.issuer)) {
    request.log.warn({ upstream: upstream.name, callback: named.slice(0, 64) }, 'upstream response meant for another upstream');
    return new OAuthError('invalid_request', 'this answer does not come from the sign-in method it was sent to; start again from the application');
  }
  if ((await deps.store.takeFederationState(pending.state, deps.now())) === undefined) return expiredUpstreamSignIn();
  return { pending, upstream };
}

/** The upstream's own refusal (an `error` in its answer), passed on as access_denied with the code when it is well-formed. */
function upstreamRefused(request: FastifyRequest, reply: FastifyReply, upstream: FederationRecord, upstreamError: string): FastifyReply {
  const code = ERROR_CODE_PATTERN.test(upstreamError) ? upstreamError : 'an invalid error code';
  request.log.info({ upstream: upstream.name, upstreamError: code }, 'upstream refused the sign-in');
  return sendErrorPage(reply, new OAuthError('access_denied', `${upstream.name} did not sign you in (it answered "${code}")`, 400));
}

type Exchange =
  | { readonly ok: true; readonly configuration: oidc.Configuration; readonly tokens: oidc.TokenEndpointResponse; readonly idToken: oidc.IDToken }
  | { readonly ok: false; readonly stage: Stage; readonly error: unknown };

/** Exchanges the upstream's code for its tokens (openid-client checks state, iss per RFC 9207, PKCE and the ID token). */
async function exchangeCode(issuer: string, discover: Discovery, answered: AnsweredSignIn, query: string): Promise<Exchange> {
  const { pending, upstream } = answered;
  let configuration: oidc.Configuration;
  try {
    configuration = await discover(upstream);
  } catch (error) {
    return { ok: false, stage: 'discovery', error };
  }
  try {
    // openid-client checks the ID token's iss, aud, exp and nonce, and (enableNonRepudiationChecks) its signature.
    const tokens = await oidc.authorizationCodeGrant(configuration, new URL(`${callbackUrl(issuer, upstream)}?${query}`), {
      expectedState: pending.state,
      expectedNonce: pending.nonce,
      pkceCodeVerifier: pending.codeVerifier,
      idTokenExpected: true,
    });
    const idToken = tokens.claims();
    if (idToken === undefined) throw new Error('the token response has no ID token');
    return { ok: true, configuration, tokens, idToken };
  } catch (error) {
    return { ok: false, stage: 'code exchange', error };
  }
}

/** The session for the upstream's subject (`upstream:value`, DESIGN.md §7), then back to what the sign-in was for. */
async function signInAs(
  deps: FederationRouteDeps,
  request: FastifyRequest,
  reply: FastifyReply,
  answered: AnsweredSignIn,
  exchange: Extract<Exchange, { ok: true }>,
): Promise<FastifyReply> {
  const { pending, upstream } = answered;
  const claims = await upstreamClaims(request, upstream, exchange.configuration, exchange.tokens, exchange.idToken);
  const subjectValue = subjectValueOf(upstream, exchange.idToken.sub, claims);
  if (!subjectValue.ok) {
    const message = subjectValue.reason === 'missing' ? 'upstream sent no usable subject claim' : 'upstream did not verify the email the subject is made of';
    request.log.warn({ upstream: upstream.name, subjectClaim: upstream.subjectClaim }, message);
    return sendErrorPage(reply, failedExchange(upstream));
  }
  const subject = `${upstream.name}:${subjectValue.value}`;
  const identity = identityOf(claims);
  const now = deps.now();
  const login = await deps.store.findLoginRequest(pending.loginId, now);
  if (login === undefined) return sendErrorPage(reply, expiredSignIn());
  const authTime = upstreamAuthTime(reauthenticationFor(login.purpose), exchange.idToken.auth_time, login.createdAt, now);
  if (authTime === undefined) {
    request.log.warn({ upstream: upstream.name, authTime: exchange.idToken.auth_time ?? null }, 'upstream did not show the fresh authentication it was asked for');
    return sendErrorPage(reply, notReauthenticated(upstream));
  }
  await startSession(deps.store, request, reply, { cookies: deps.cookies, lifetimeMs: deps.sessionLifetimeMs, now, authTime }, subject, identity);
  await deps.store.saveSubjectClaims(subject, identity, now + SUBJECT_CLAIMS_LIFETIME_MS);
  request.log.info({ audit: true, event: 'sign_in', outcome: 'success', user: bounded(subject), method: `federation:${upstream.name}`, address: request.ip }, 'signed in');
  return finishSignIn(deps.store, reply, deps.basePath, login, now);
}

/**
 * GET /federation/{name}/callback: the upstream's answer, checked, exchanged, then a session. Anyone can call it, so a
 * refused answer (no such state, another browser's, the upstream's own refusal) counts as a failure of the address
 * (DESIGN.md §4), and an address over its limit gets the 429 page before a state is looked up.
 */
async function upstreamCallback(deps: FederationRouteDeps, discover: Discovery, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  return answerPageAdmitted(deps, { address: request.ip, clientId: undefined, fetches: () => 0 }, reply, () => callbackAdmitted(deps, discover, request, reply));
}

async function callbackAdmitted(deps: FederationRouteDeps, discover: Discovery, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const named = (request.params as { upstream: string }).upstream;
  const query = queryOf(request.url);
  const params = parseParams(query);
  const answered = await takeAnsweredSignIn(deps, request, named, params);
  if (answered instanceof OAuthError) return sendErrorPage(reply, answered);
  const upstreamError = single(params, 'error');
  if (upstreamError !== undefined) return upstreamRefused(request, reply, answered.upstream, upstreamError);
  const exchange = await exchangeCode(deps.issuer, discover, answered, query);
  if (!exchange.ok) return upstreamFailed(request, reply, answered.upstream, exchange.stage, exchange.error);
  return signInAs(deps, request, reply, answered, exchange);
}

export function federationRoutes(deps: FederationRouteDeps): FastifyPluginAsync {
  const discover = cachedDiscovery(deps.now);
  return async (app) => {
    app.get('/federation/start', { config: { page: true } }, async (request, reply) => startUpstream(deps, discover, request, reply));
    app.get('/federation/:upstream/callback', { config: { page: true } }, async (request, reply) => upstreamCallback(deps, discover, request, reply));
  };
}

/**
 * GET/POST /consent (DESIGN.md §8): a dynamic client's consent page, after sign-in. It names the client as it
 * describes itself and, since that is self-asserted, the hosts it cannot fake: its metadata document's (the only
 * verified origin) and its redirect URI's; a registered client_uri is shown as what the client says. Allow remembers
 * the consent for the redirect origin and resumes the authorization; deny sends access_denied.
 */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { ClientDirectory } from '../clients/directory.js';
import type { ClientRecord } from '../config/types.js';
import type { CookieSettings } from '../http/cookies.js';
import { answerPageAdmitted, type FailureLimits, type RequestsInFlight } from '../http/failure-limit.js';
import type { FixedWindowLimiter } from '../http/rate-limit.js';
import { formTargetOf, pageHeaders, sendPage } from '../http/pages.js';
import { EMPTY_PARAMS, parseParams, queryOf, single, type Params } from '../http/params.js';
import { errorRedirect } from '../http/redirects.js';
import { sendErrorPage } from '../http/render-error.js';
import { consentPage, type ClientOrigin } from '../http/templates.js';
import { bounded } from '../log.js';
import { OAuthError } from '../policy/oauth-error.js';
import { grantAudience } from '../policy/resource.js';
import { rememberConsent } from '../session/consent.js';
import { csrfToken, csrfValid, sameBrowser } from '../session/csrf.js';
import { expiredSignIn, isLoginId } from '../session/login-request.js';
import { currentSession } from '../session/session.js';
import type { ConsentStore, LoginRequestRecord, LoginRequestStore, PendingAuthorization, SessionRecord, SessionStore } from '../store/types.js';

/** What the consent page uses, wired by buildApp. */
export interface ConsentRouteDeps {
  readonly store: ConsentStore & LoginRequestStore & SessionStore;
  /** The client is found again here; for a metadata-document client that may fetch (DESIGN.md §9), counted first. */
  readonly clients: Pick<ClientDirectory, 'find' | 'fetchesToResolve'>;
  readonly now: () => number;
  readonly cookies: CookieSettings;
  readonly basePath: string;
  readonly issuer: string;
  /** Whether a session's subject is still a user or comes from a configured upstream (DESIGN.md §6). */
  readonly isKnownSubject: (subject: string) => boolean;
  /** The per-address failure counter every endpoint shares, and its limits (DESIGN.md §7): a fetch counts there. */
  readonly failures: FixedWindowLimiter;
  /** This process's requests still being answered, counted against the same limits until they end. */
  readonly inFlight: RequestsInFlight;
  readonly limits: FailureLimits;
}

/** The host of a URL, or undefined when it is none. */
function hostOf(uri: string | undefined): string | undefined {
  if (uri === undefined) return undefined;
  try {
    const { host, protocol } = new URL(uri);
    return host === '' ? protocol.replace(/:$/, '') : host;
  } catch {
    return undefined;
  }
}

/**
 * Where the client comes from, as far as the server knows (DESIGN.md §8): only a metadata document's URL host is
 * verified (the server fetched the client's description from there); a registered client_uri is the client's own word.
 */
function originOf(client: ClientRecord): ClientOrigin {
  if (client.dynamic?.source === 'metadata-document') return { kind: 'verified', host: hostOf(client.clientId) ?? client.clientId };
  const says = hostOf(client.dynamic?.clientUri);
  return says === undefined ? { kind: 'unknown' } : { kind: 'claimed', host: says };
}

interface Pending {
  readonly record: LoginRequestRecord;
  readonly authorization: PendingAuthorization;
  readonly client: ClientRecord;
  readonly session: SessionRecord;
}

type Answer = (pending: Pending) => FastifyReply | Promise<FastifyReply>;

/**
 * The login request, its client and the session, then `answer` with them; an error page when any is missing or from
 * another browser. The client is looked up last, once the login request and the session are known to be this
 * browser's, so a stranger without them makes the server fetch nothing; a lookup that may fetch a metadata document
 * is let in and counted against the address (and the client from it) as at /authorize (DESIGN.md §9).
 */
async function withPending(deps: ConsentRouteDeps, request: FastifyRequest, reply: FastifyReply, loginId: string | undefined, answer: Answer): Promise<FastifyReply> {
  const now = deps.now();
  const record = isLoginId(loginId) ? await deps.store.findLoginRequest(loginId, now) : undefined;
  if (record === undefined || record.purpose.kind !== 'authorize' || !sameBrowser(deps.cookies, request, record.browser)) return sendErrorPage(reply, expiredSignIn());
  const session = await currentSession(deps, request, now);
  if (session === undefined) return sendErrorPage(reply, expiredSignIn());
  const { authorization } = record.purpose;
  const clientId = authorization.clientId;
  const fetches = (): number => deps.clients.fetchesToResolve(clientId);
  return answerPageAdmitted(deps, { address: request.ip, clientId, fetches }, reply, async () => {
    const client = await deps.clients.find(clientId);
    if (client === undefined) return sendErrorPage(reply, expiredSignIn());
    return answer({ record, authorization, client, session });
  });
}

function showPage(deps: ConsentRouteDeps, request: FastifyRequest, reply: FastifyReply, pending: Pending): FastifyReply {
  const { client, authorization, session, record } = pending;
  const target = formTargetOf(authorization.redirectUri);
  const body = consentPage({
    basePath: deps.basePath,
    csrf: csrfToken(deps.cookies, request, reply),
    loginId: record.id,
    clientName: client.dynamic?.clientName ?? client.clientId,
    origin: originOf(client),
    returnsTo: hostOf(authorization.redirectUri) ?? authorization.redirectUri,
    scope: authorization.scope,
    resources: grantAudience({ client, issuer: deps.issuer, scope: authorization.scope, resources: authorization.resources }),
    signedInAs: session.claims.name ?? session.subject,
  });
  return sendPage(reply, 200, 'Allow access?', body, target === undefined ? [] : [target]);
}

async function deny(deps: ConsentRouteDeps, request: FastifyRequest, reply: FastifyReply, pending: Pending): Promise<FastifyReply> {
  const { authorization, client, session, record } = pending;
  await deps.store.takeLoginRequest(record.id, deps.now());
  request.outcome = 'access_denied';
  request.log.info({ audit: true, event: 'consent', outcome: 'denied', subject: session.subject, client_id: bounded(client.clientId) }, 'consent denied');
  const error = new OAuthError('access_denied', 'the person denied the request');
  return pageHeaders(reply).redirect(errorRedirect(deps.issuer, authorization.redirectUri, error, authorization.state), 303);
}

async function allow(deps: ConsentRouteDeps, request: FastifyRequest, reply: FastifyReply, pending: Pending): Promise<FastifyReply> {
  const { authorization, client, session, record } = pending;
  const answer = { subject: session.subject, clientId: client.clientId, authorization, askedAt: record.createdAt };
  const allowed = await rememberConsent(deps.store, answer, deps.now());
  request.outcome = 'ok';
  request.log.info(
    {
      audit: true,
      event: 'consent',
      outcome: 'given',
      subject: session.subject,
      client_id: bounded(client.clientId),
      scope: allowed.scope.join(' '),
      resources: allowed.wholeAudience ? 'all' : allowed.resources,
      redirect_origin: bounded(allowed.redirectOrigin),
    },
    'consent given',
  );
  return pageHeaders(reply).redirect(`${deps.basePath}/authorize/resume?login=${record.id}`, 303);
}

async function answer(deps: ConsentRouteDeps, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const form = (request.body as Params | undefined) ?? EMPTY_PARAMS;
  if (!csrfValid(deps.cookies, request, single(form, 'csrf'))) {
    return sendErrorPage(reply, new OAuthError('invalid_request', 'the consent form expired; start again from the application'));
  }
  return withPending(deps, request, reply, single(form, 'login'), async (pending) => {
    request.clientId = pending.client.clientId;
    const decision = single(form, 'decision');
    if (decision === 'deny') return deny(deps, request, reply, pending);
    if (decision !== 'allow') return sendErrorPage(reply, new OAuthError('invalid_request', 'decision must be allow or deny'));
    return allow(deps, request, reply, pending);
  });
}

export function consentRoutes(deps: ConsentRouteDeps): FastifyPluginAsync {
  return async (app) => {
    app.get('/consent', { config: { page: true } }, async (request, reply) =>
      withPending(deps, request, reply, single(parseParams(queryOf(request.url)), 'login'), (pending) => showPage(deps, request, reply, pending)),
    );
    app.post('/consent', { config: { page: true } }, async (request, reply) => answer(deps, request, reply));
  };
}

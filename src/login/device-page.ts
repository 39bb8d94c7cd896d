/**
 * GET/POST /device (RFC 8628 §3.3): the person enters the user code, signs in, then approves or denies.
 * DESIGN.md §4: a form with one input named `user_code`; then sign-in; then approve / deny buttons.
 */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { CookieSettings } from '../http/cookies.js';
import { admitAgainstAddress, limitedAddress, type RequestsInFlight } from '../http/failure-limit.js';
import type { FixedWindowLimiter } from '../http/rate-limit.js';
import { sendPage } from '../http/pages.js';
import { EMPTY_PARAMS, parseParams, queryOf, repeatedParameter, single, type Params } from '../http/params.js';
import { sendErrorPage } from '../http/render-error.js';
import { deviceApprovalPage, deviceApprovedPage, deviceDeniedPage, deviceEntryPage } from '../http/templates.js';
import { OAuthError } from '../policy/oauth-error.js';
import { formatUserCode, normaliseUserCode } from '../policy/user-code.js';
import { csrfToken, csrfValid } from '../session/csrf.js';
import { startLogin } from '../session/login-request.js';
import { currentSession } from '../session/session.js';
import type { AttemptStore, DeviceAuthorizationRecord, DeviceCodeStore, LoginRequestStore, SessionRecord, SessionStore } from '../store/types.js';

/** What the verification page uses, wired by buildApp. */
export interface DevicePageDeps {
  readonly store: DeviceCodeStore & SessionStore & LoginRequestStore & AttemptStore;
  readonly now: () => number;
  readonly cookies: CookieSettings;
  readonly basePath: string;
  /** Whether a session's subject is still a user or comes from a configured upstream (DESIGN.md §6). */
  readonly isKnownSubject: (subject: string) => boolean;
  /** Where a sign-in starts: the sign-in page, or the only upstream. */
  readonly signInPage: (loginId: string) => string;
  /** The name the page shows for a client (its display_name when it has one). */
  readonly clientTitle: (clientId: string) => string;
  /** RFC 8628 §5.1: wrong user codes per address per window; address_failures for the sign-ins it keeps (DESIGN.md §4). */
  readonly limits: { readonly userCodeFailures: number; readonly userCodeWindowMs: number; readonly addressFailures: number };
  /** The per-address failure counter every endpoint shares: a kept sign-in request counts against it. */
  readonly failures: FixedWindowLimiter;
  readonly inFlight: RequestsInFlight;
}

/** RFC 8628 §5.1: wrong user codes are limited per address, so the code space cannot be searched. */
const attemptKey = (address: string): string => `user-code-address:${limitedAddress(address)}`;

type Lookup =
  | { readonly found: true; readonly record: DeviceAuthorizationRecord }
  | { readonly found: false; readonly status: number; readonly message: string; readonly retryAfterSeconds?: number };

type Refused = Extract<Lookup, { found: false }>;

function entryPage(deps: DevicePageDeps, request: FastifyRequest, reply: FastifyReply, status: number, typed: string, message?: string): FastifyReply {
  const body = deviceEntryPage(deps.basePath, csrfToken(deps.cookies, request, reply), typed, message);
  return sendPage(reply, status, 'Connect a device', body);
}

function approvalPage(deps: DevicePageDeps, request: FastifyRequest, reply: FastifyReply, record: DeviceAuthorizationRecord, session: SessionRecord): FastifyReply {
  const body = deviceApprovalPage({
    basePath: deps.basePath,
    csrf: csrfToken(deps.cookies, request, reply),
    client: deps.clientTitle(record.clientId),
    userCode: record.userCode,
    shownCode: formatUserCode(record.userCode),
    scope: record.scope,
    signedInAs: session.claims.name ?? session.subject,
  });
  return sendPage(reply, 200, 'Approve a device', body);
}

/**
 * Finds the pending authorization for a typed code. The lookup is counted against the address before the code is
 * looked up (one atomic statement, so parallel guesses cannot slip past the limit) and forgiven when the code is
 * known: only wrong codes use up user_code_failures (RFC 8628 §5.1).
 */
async function lookUp(deps: DevicePageDeps, request: FastifyRequest, typed: string): Promise<Lookup> {
  const now = deps.now();
  const key = attemptKey(request.ip);
  const limit = deps.limits.userCodeFailures;
  // An address already over the limit is refused on a read: its further guesses write nothing (a cost audit).
  if ((await deps.store.peekAttempts(key, now)) >= limit || (await deps.store.countAttempt(key, now, deps.limits.userCodeWindowMs)) > limit) {
    const retryAfterSeconds = Math.ceil(deps.limits.userCodeWindowMs / 1000);
    return { found: false, status: 429, message: 'Too many wrong codes. Try again later.', retryAfterSeconds };
  }
  const userCode = normaliseUserCode(typed);
  const record = userCode === undefined ? undefined : await deps.store.findByUserCode(userCode, now);
  if (record === undefined) return { found: false, status: 400, message: 'That code is not known or has expired. Check the code on your device.' };
  await deps.store.forgiveAttempt(key, now);
  request.clientId = record.clientId;
  if (record.status !== 'pending') return { found: false, status: 400, message: 'That code was already used. Start again on your device.' };
  return { found: true, record };
}

function refusal(deps: DevicePageDeps, request: FastifyRequest, reply: FastifyReply, typed: string, lookup: Refused): FastifyReply {
  request.outcome = lookup.status === 429 ? 'too_many_attempts' : 'unknown_user_code';
  if (lookup.retryAfterSeconds !== undefined) reply.header('Retry-After', String(lookup.retryAfterSeconds));
  return entryPage(deps, request, reply, lookup.status, typed, lookup.message);
}

async function decide(
  deps: DevicePageDeps,
  request: FastifyRequest,
  reply: FastifyReply,
  record: DeviceAuthorizationRecord,
  session: SessionRecord,
  decision: string,
): Promise<FastifyReply> {
  if (decision !== 'approve' && decision !== 'deny') {
    return sendErrorPage(reply, new OAuthError('invalid_request', 'decision must be approve or deny'));
  }
  const approved = decision === 'approve';
  const decided = await deps.store.decideDeviceAuthorization(
    record.userCode,
    approved ? { approved: true, subject: session.subject, claims: session.claims, authTime: session.authTime } : { approved: false },
    deps.now(),
  );
  if (!decided) {
    request.outcome = 'unknown_user_code';
    return entryPage(deps, request, reply, 400, '', 'That code was already used or has expired. Start again on your device.');
  }
  request.outcome = approved ? 'ok' : 'access_denied';
  request.log.info({ client_id: record.clientId, approved }, 'device authorization decided');
  return approved
    ? sendPage(reply, 200, 'Device connected', deviceApprovedPage(deps.clientTitle(record.clientId)))
    : sendPage(reply, 200, 'Request denied', deviceDeniedPage(deps.clientTitle(record.clientId)));
}

/** GET: the entry form (prefilled from verification_uri_complete), or straight to approval when signed in. */
async function showDevicePage(deps: DevicePageDeps, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const typed = single(parseParams(queryOf(request.url)), 'user_code');
  const session = typed === undefined ? undefined : await currentSession(deps, request, deps.now());
  // Not signed in (or no code yet): the form; nothing looked up.
  if (typed === undefined || session === undefined) return entryPage(deps, request, reply, 200, typed ?? '');
  // Signed in (e.g. back from sign-in): the lookup counts like a POST.
  const lookup = await lookUp(deps, request, typed);
  if (!lookup.found) return refusal(deps, request, reply, typed, lookup);
  return approvalPage(deps, request, reply, lookup.record, session);
}

/** POST: the typed code, then sign-in when there is no session, then the approval page or the decision on it. */
async function submitDevicePage(deps: DevicePageDeps, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const form = (request.body as Params | undefined) ?? EMPTY_PARAMS;
  const repeated = repeatedParameter(form);
  if (repeated !== undefined) return sendErrorPage(reply, new OAuthError('invalid_request', `${repeated} appears more than once`));
  const typed = single(form, 'user_code') ?? '';
  if (!csrfValid(deps.cookies, request, single(form, 'csrf'))) {
    request.outcome = 'csrf';
    return entryPage(deps, request, reply, 400, typed, 'The form expired. Please enter the code again.');
  }
  if (typed === '') return entryPage(deps, request, reply, 400, typed, 'Enter the code your device shows.');
  const lookup = await lookUp(deps, request, typed);
  if (!lookup.found) return refusal(deps, request, reply, typed, lookup);

  const session = await currentSession(deps, request, deps.now());
  if (session === undefined) {
    // A sign-in request is kept on the server: it counts against the address before it is written, as at /authorize.
    const admission = await admitAgainstAddress(deps.failures, deps.inFlight, deps.limits, request.ip, deps.now);
    if (!admission.ok) return sendErrorPage(reply, admission.error);
    try {
      const start = { store: deps.store, cookies: deps.cookies, now: deps.now(), signInPage: deps.signInPage };
      return await startLogin(start, request, reply, { kind: 'device', userCode: lookup.record.userCode });
    } finally {
      admission.settle('kept', deps.now());
    }
  }
  const decision = single(form, 'decision');
  if (decision === undefined) return approvalPage(deps, request, reply, lookup.record, session);
  return decide(deps, request, reply, lookup.record, session, decision);
}

export function devicePageRoutes(deps: DevicePageDeps): FastifyPluginAsync {
  return async (app) => {
    app.get('/device', { config: { page: true } }, async (request, reply) => showDevicePage(deps, request, reply));
    app.post('/device', { config: { page: true } }, async (request, reply) => submitDevicePage(deps, request, reply));
  };
}

/**
 * GET/POST /device (RFC 8628 §3.3): the person enters the user code, signs in, then approves or denies.
 * DESIGN.md §4: a form with one input named `user_code`; then sign-in; then approve / deny buttons.
 */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { AppContext } from '../context.js';
import { csrfToken, csrfValid } from '../session/csrf.js';
import { startLogin } from '../session/login-request.js';
import { html, scopeList, sendPage, signOutForm } from '../http/pages.js';
import { EMPTY_PARAMS, parseParams, queryOf, repeatedParameter, single, type Params } from '../http/params.js';
import { sendErrorPage } from '../http/render-error.js';
import { currentSession } from '../session/session.js';
import { OAuthError } from '../policy/oauth-error.js';
import { formatUserCode, normaliseUserCode } from '../policy/user-code.js';

import type { AttemptStore, DeviceAuthorizationRecord, DeviceCodeStore, LoginRequestStore, SessionRecord, SessionStore } from '../store/types.js';

/** The state the verification page reads and changes. */
export type DevicePageStores = DeviceCodeStore & SessionStore & LoginRequestStore & AttemptStore;

/** RFC 8628 §5.1: wrong user codes are limited per address, so the code space cannot be searched. */
const attemptKey = (address: string): string => `user-code-address:${address}`;

type Lookup =
  | { readonly found: true; readonly record: DeviceAuthorizationRecord }
  | { readonly found: false; readonly status: number; readonly message: string; readonly retryAfterSeconds?: number };

type Refused = Extract<Lookup, { found: false }>;

export function devicePageRoutes(ctx: AppContext, store: DevicePageStores): FastifyPluginAsync {
  const action = `${ctx.config.basePath}/device`;

  function entryPage(request: FastifyRequest, reply: FastifyReply, status: number, typed: string, message?: string): FastifyReply {
    const csrf = csrfToken(ctx.cookies, request, reply);
    return sendPage(
      reply,
      status,
      'Connect a device',
      html`<h1>Connect a device</h1>
<p class="muted">Enter the code your device shows.</p>
${message === undefined ? html`` : html`<p class="error" role="alert">${message}</p>`}
<form method="post" action="${action}">
<input type="hidden" name="csrf" value="${csrf}">
<label for="user_code">Code</label>
<input type="text" id="user_code" name="user_code" value="${typed}" autocomplete="off" autocapitalize="characters" spellcheck="false" maxlength="64" required autofocus>
<button type="submit">Continue</button>
</form>`,
    );
  }

  function approvalPage(request: FastifyRequest, reply: FastifyReply, record: DeviceAuthorizationRecord, session: SessionRecord): FastifyReply {
    const csrf = csrfToken(ctx.cookies, request, reply);
    // RFC 8628 §5.4: the code is shown again so a person sent a link by someone else can notice.
    return sendPage(
      reply,
      200,
      'Approve a device',
      html`<h1>Approve a device</h1>
<p><strong>${record.clientId}</strong> asks to act on your behalf.</p>
<p class="muted">Only continue if your device shows the code <code>${formatUserCode(record.userCode)}</code>.</p>
<p>It asks for:</p>
${scopeList(record.scope)}
<p class="muted">Signed in as ${session.claims.name ?? session.subject}.</p>
<form method="post" action="${action}">
<input type="hidden" name="csrf" value="${csrf}">
<input type="hidden" name="user_code" value="${record.userCode}">
<button type="submit" name="decision" value="approve">Approve</button>
<button type="submit" name="decision" value="deny" class="secondary">Deny</button>
</form>
${signOutForm(ctx.config.basePath, csrf)}`,
    );
  }

  /**
   * Finds the pending authorization for a typed code. The lookup is counted against the address before the code is
   * looked up (one atomic statement, so parallel guesses cannot slip past the limit) and forgiven when the code is
   * known: only wrong codes use up user_code_failures (RFC 8628 §5.1).
   */
  async function lookUp(request: FastifyRequest, typed: string): Promise<Lookup> {
    const now = ctx.now();
    const key = attemptKey(request.ip);
    if ((await store.countAttempt(key, now, ctx.limits.userCodeWindowMs)) > ctx.limits.userCodeFailures) {
      const retryAfterSeconds = Math.ceil(ctx.limits.userCodeWindowMs / 1000);
      return { found: false, status: 429, message: 'Too many wrong codes. Try again later.', retryAfterSeconds };
    }
    const userCode = normaliseUserCode(typed);
    const record = userCode === undefined ? undefined : await store.findByUserCode(userCode, now);
    if (record === undefined) return { found: false, status: 400, message: 'That code is not known or has expired. Check the code on your device.' };
    await store.forgiveAttempt(key, now);
    request.clientId = record.clientId;
    if (record.status !== 'pending') return { found: false, status: 400, message: 'That code was already used. Start again on your device.' };
    return { found: true, record };
  }

  function refusal(request: FastifyRequest, reply: FastifyReply, typed: string, lookup: Refused): FastifyReply {
    request.outcome = lookup.status === 429 ? 'too_many_attempts' : 'unknown_user_code';
    if (lookup.retryAfterSeconds !== undefined) reply.header('Retry-After', String(lookup.retryAfterSeconds));
    return entryPage(request, reply, lookup.status, typed, lookup.message);
  }

  async function decide(
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
    const decided = await store.decideDeviceAuthorization(
      record.userCode,
      approved ? { approved: true, subject: session.subject, claims: session.claims, authTime: session.authTime } : { approved: false },
      ctx.now(),
    );
    if (!decided) {
      request.outcome = 'unknown_user_code';
      return entryPage(request, reply, 400, '', 'That code was already used or has expired. Start again on your device.');
    }
    request.outcome = approved ? 'ok' : 'access_denied';
    request.log.info({ client_id: record.clientId, approved }, 'device authorization decided');
    return approved
      ? sendPage(reply, 200, 'Device connected', html`<h1>Device connected</h1>
<p><strong>${record.clientId}</strong> is approved. Return to your device; it continues by itself.</p>`)
      : sendPage(reply, 200, 'Request denied', html`<h1>Request denied</h1>
<p><strong>${record.clientId}</strong> gets no access. You can close this page.</p>`);
  }

  return async (app) => {
    app.get('/device', { config: { page: true } }, async (request, reply) => {
      const typed = single(parseParams(queryOf(request.url)), 'user_code');
      const session = typed === undefined ? undefined : await currentSession({ store, cookies: ctx.cookies, isKnownSubject: ctx.isKnownSubject }, request, ctx.now());
      // Not signed in (or no code yet): the form, prefilled from verification_uri_complete; nothing looked up.
      if (typed === undefined || session === undefined) return entryPage(request, reply, 200, typed ?? '');
      // Signed in (e.g. back from sign-in): straight to approval; the lookup counts like a POST.
      const lookup = await lookUp(request, typed);
      if (!lookup.found) return refusal(request, reply, typed, lookup);
      return approvalPage(request, reply, lookup.record, session);
    });

    app.post('/device', { config: { page: true } }, async (request, reply) => {
      const form = (request.body as Params | undefined) ?? EMPTY_PARAMS;
      const repeated = repeatedParameter(form);
      if (repeated !== undefined) return sendErrorPage(reply, new OAuthError('invalid_request', `${repeated} appears more than once`));
      const typed = single(form, 'user_code') ?? '';
      if (!csrfValid(ctx.cookies, request, single(form, 'csrf'))) {
        request.outcome = 'csrf';
        return entryPage(request, reply, 400, typed, 'The form expired. Please enter the code again.');
      }
      if (typed === '') return entryPage(request, reply, 400, typed, 'Enter the code your device shows.');
      const lookup = await lookUp(request, typed);
      if (!lookup.found) return refusal(request, reply, typed, lookup);

      const session = await currentSession({ store, cookies: ctx.cookies, isKnownSubject: ctx.isKnownSubject }, request, ctx.now());
      if (session === undefined) return startLogin({ store, cookies: ctx.cookies, now: ctx.now(), signInPage: ctx.signInPage }, request, reply, { kind: 'device', userCode: lookup.record.userCode });
      const decision = single(form, 'decision');
      if (decision === undefined) return approvalPage(request, reply, lookup.record, session);
      return decide(request, reply, lookup.record, session, decision);
    });
  };
}

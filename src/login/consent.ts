/**
 * GET/POST /consent (DESIGN.md §8): a dynamic client's consent page, after sign-in. It names the client as it
 * describes itself and, since that is self-asserted, the hosts it cannot fake: its metadata document's (the only
 * verified origin) and its redirect URI's; a registered client_uri is shown as what the client says. Allow remembers
 * the consent for the redirect origin and resumes the authorization; deny sends access_denied.
 */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { ClientRecord } from '../config/types.js';
import type { AppContext } from '../context.js';
import { csrfToken, csrfValid, sameBrowser } from '../session/csrf.js';
import { expiredSignIn, isLoginId } from '../session/login-request.js';
import { formTargetOf, html, pageHeaders, scopeList, sendPage, signOutForm, type Html } from '../http/pages.js';
import { EMPTY_PARAMS, parseParams, queryOf, single, type Params } from '../http/params.js';
import { errorRedirect } from '../http/redirects.js';
import { sendErrorPage } from '../http/render-error.js';
import { currentSession } from '../session/session.js';
import { bounded } from '../log.js';
import { redirectOriginOf, widenConsent } from '../policy/consent.js';
import { grantAudience } from '../policy/resource.js';
import { OAuthError } from '../policy/oauth-error.js';
import type { ConsentStore, LoginRequestRecord, LoginRequestStore, PendingAuthorization, SessionRecord, SessionStore } from '../store/types.js';

export type ConsentStores = ConsentStore & LoginRequestStore & SessionStore;

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
function origin(client: ClientRecord): Html {
  if (client.dynamic?.source === 'metadata-document') {
    return html`Verified: its description is published at <strong>${hostOf(client.clientId) ?? client.clientId}</strong>.`;
  }
  const says = hostOf(client.dynamic?.clientUri);
  if (says === undefined) return html`It did not say where it comes from.`;
  return html`It says it is from <strong>${says}</strong>; this is not verified.`;
}

interface Pending {
  readonly record: LoginRequestRecord;
  readonly authorization: PendingAuthorization;
  readonly client: ClientRecord;
  readonly session: SessionRecord;
}

export function consentRoutes(ctx: AppContext, store: ConsentStores): FastifyPluginAsync {
  /** The login request, its client and the session; an error page when any is missing or from another browser. */
  async function load(request: FastifyRequest, loginId: string | undefined): Promise<Pending | OAuthError> {
    const now = ctx.now();
    const record = isLoginId(loginId) ? await store.findLoginRequest(loginId, now) : undefined;
    if (record === undefined || record.purpose.kind !== 'authorize' || !sameBrowser(ctx.cookies, request, record.browser)) return expiredSignIn();
    const session = await currentSession({ store, cookies: ctx.cookies, isKnownSubject: ctx.isKnownSubject }, request, now);
    const client = await ctx.clients.find(record.purpose.authorization.clientId);
    if (session === undefined || client === undefined) return expiredSignIn();
    return { record, authorization: record.purpose.authorization, client, session };
  }

  function page(request: FastifyRequest, reply: FastifyReply, pending: Pending): FastifyReply {
    const { client, authorization, session, record } = pending;
    const csrf = csrfToken(ctx.cookies, request, reply);
    const name = client.dynamic?.clientName ?? client.clientId;
    const returnsTo = hostOf(authorization.redirectUri);
    const resources = grantAudience({ client, issuer: ctx.issuer, scope: authorization.scope, resources: authorization.resources });
    const target = formTargetOf(authorization.redirectUri);
    return sendPage(
      reply,
      200,
      'Allow access?',
      html`<h1>Allow ${name}?</h1>
<p><strong>${name}</strong> asks to act on your behalf.</p>
<p class="muted">${origin(client)} After your answer you go back to <strong>${returnsTo ?? authorization.redirectUri}</strong>.</p>
<p>It asks for:</p>
${scopeList(authorization.scope)}
<p>for these services:</p>
<ul class="resources">${resources.map((resource) => html`<li><code>${resource}</code></li>`)}</ul>
<p class="muted">Signed in as ${session.claims.name ?? session.subject}.</p>
<form method="post" action="${ctx.config.basePath}/consent">
<input type="hidden" name="csrf" value="${csrf}">
<input type="hidden" name="login" value="${record.id}">
<button type="submit" name="decision" value="allow">Allow</button>
<button type="submit" name="decision" value="deny" class="secondary">Deny</button>
</form>
${signOutForm(ctx.config.basePath, csrf)}`,
      target === undefined ? [] : [target],
    );
  }

  return async (app) => {
    app.get('/consent', { config: { page: true } }, async (request, reply) => {
      const pending = await load(request, single(parseParams(queryOf(request.url)), 'login'));
      if (pending instanceof OAuthError) return sendErrorPage(reply, pending);
      return page(request, reply, pending);
    });

    app.post('/consent', { config: { page: true } }, async (request, reply) => {
      const form = (request.body as Params | undefined) ?? EMPTY_PARAMS;
      if (!csrfValid(ctx.cookies, request, single(form, 'csrf'))) return sendErrorPage(reply, new OAuthError('invalid_request', 'the consent form expired; start again from the application'));
      const pending = await load(request, single(form, 'login'));
      if (pending instanceof OAuthError) return sendErrorPage(reply, pending);
      const { authorization, client, session, record } = pending;
      const decision = single(form, 'decision');
      const now = ctx.now();
      request.clientId = client.clientId;
      if (decision === 'deny') {
        await store.takeLoginRequest(record.id, now);
        request.outcome = 'access_denied';
        request.log.info({ audit: true, event: 'consent', outcome: 'denied', subject: session.subject, client_id: bounded(client.clientId) }, 'consent denied');
        const error = new OAuthError('access_denied', 'the person denied the request');
        return pageHeaders(reply).redirect(errorRedirect(ctx.issuer, authorization.redirectUri, error, authorization.state), 303);
      }
      if (decision !== 'allow') return sendErrorPage(reply, new OAuthError('invalid_request', 'decision must be allow or deny'));
      const redirectOrigin = redirectOriginOf(authorization.redirectUri);
      const before = await store.findConsent(session.subject, client.clientId, redirectOrigin);
      const asked = { scope: authorization.scope, resources: authorization.resources, redirectOrigin, promptConsent: false, askedAt: record.createdAt };
      const allowed = widenConsent(before, asked, now);
      await store.saveConsent({ subject: session.subject, clientId: client.clientId, ...allowed });
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
          redirect_origin: bounded(redirectOrigin),
        },
        'consent given',
      );
      return pageHeaders(reply).redirect(`${ctx.config.basePath}/authorize/resume?login=${record.id}`, 303);
    });
  };
}

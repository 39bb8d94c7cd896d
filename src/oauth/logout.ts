/**
 * GET/POST /logout (OpenID Connect RP-Initiated Logout 1.0, DESIGN.md §8). With a valid id_token_hint for the
 * signed-in person the session ends at once; otherwise the person confirms on a page (a CSRF-protected form).
 * A refused logout (error page) keeps the session; logout revokes no refresh token.
 */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { ClientRecord } from '../config/types.js';
import type { AppContext } from '../context.js';
import { verifyIdTokenHint } from '../crypto/jwt.js';
import { csrfToken, csrfValid } from '../session/csrf.js';
import { formTargetOf, html, pageHeaders, sendPage } from '../http/pages.js';
import { checkLimits, EMPTY_PARAMS, parseParams, queryOf, repeatedParameter, single, type Params } from '../http/params.js';
import { sendErrorPage } from '../http/render-error.js';
import { currentSession, endSession } from '../session/session.js';
import { bounded } from '../log.js';
import { OAuthError } from '../policy/oauth-error.js';
import type { SessionStore } from '../store/types.js';
import { redirectWith } from '../http/redirects.js';

interface LogoutRequest {
  readonly client?: ClientRecord;
  /** Checked against the client's post_logout_redirect_uris. */
  readonly redirectUri?: string;
  readonly state?: string;
  /** The subject of a valid id_token_hint. */
  readonly hintSubject?: string;
}

const refused = (description: string): OAuthError => new OAuthError('invalid_request', description);

export function logoutRoutes(ctx: AppContext, store: SessionStore): FastifyPluginAsync {
  const lookup = { store, cookies: ctx.cookies, isKnownSubject: ctx.isKnownSubject };

  /** Reads and checks the parameters; an OAuthError for a refused request (shown as the error page). */
  async function parse(params: Params): Promise<LogoutRequest | OAuthError> {
    const repeated = repeatedParameter(params);
    if (repeated !== undefined) return refused(`${repeated} appears more than once`);
    // DESIGN.md §4: a `state` over the limit is refused here too, never echoed into a redirect.
    const overLimit = checkLimits(params);
    if (overLimit !== undefined) return overLimit;
    const hint = single(params, 'id_token_hint');
    const clientId = single(params, 'client_id');
    let hintSubject: string | undefined;
    let hintClient: string | undefined;
    if (hint !== undefined) {
      try {
        const claims = await verifyIdTokenHint(ctx.keys, hint, ctx.issuer);
        hintSubject = typeof claims.sub === 'string' ? claims.sub : undefined;
        hintClient = typeof claims.aud === 'string' ? claims.aud : undefined;
      } catch {
        return refused('id_token_hint is not an ID token this server issued');
      }
      if (clientId !== undefined && clientId !== hintClient) return refused('client_id does not match the id_token_hint');
    }
    const whose = hintClient ?? clientId;
    // DESIGN.md §7: /logout never fetches a metadata document; one not in the cache is an unknown client here.
    const client = await ctx.clients.findWithoutFetching(whose);
    if (whose !== undefined && client === undefined) return refused(`unknown client "${bounded(whose)}"`);
    const redirectUri = single(params, 'post_logout_redirect_uri');
    // Without a client there is no list to check the URI against: no redirect, the "signed out" page (DESIGN.md §8).
    if (redirectUri !== undefined && client !== undefined && !client.postLogoutRedirectUris.includes(redirectUri)) {
      return refused('post_logout_redirect_uri is not registered for this client');
    }
    return {
      ...(client !== undefined && { client }),
      ...(client !== undefined && redirectUri !== undefined && { redirectUri }),
      ...(single(params, 'state') !== undefined && { state: single(params, 'state') }),
      ...(hintSubject !== undefined && { hintSubject }),
    };
  }

  async function signOut(request: FastifyRequest, reply: FastifyReply, logout: LogoutRequest): Promise<FastifyReply> {
    const session = await currentSession(lookup, request, ctx.now());
    await endSession(store, ctx.cookies, request, reply);
    request.clientId = logout.client?.clientId;
    request.outcome = 'ok';
    request.log.info({ audit: true, event: 'logout', subject: session?.subject, client_id: logout.client?.clientId }, 'signed out');
    if (logout.redirectUri !== undefined) return pageHeaders(reply).redirect(redirectWith(logout.redirectUri, { state: logout.state }), 303);
    return sendPage(reply, 200, 'Signed out', html`<h1>You are signed out</h1>
<p class="muted">You can close this page.</p>`);
  }

  function confirmation(request: FastifyRequest, reply: FastifyReply, logout: LogoutRequest): FastifyReply {
    const csrf = csrfToken(ctx.cookies, request, reply);
    const target = logout.redirectUri === undefined ? undefined : formTargetOf(logout.redirectUri);
    const name = logout.client?.displayName ?? logout.client?.clientId;
    return sendPage(
      reply,
      200,
      'Sign out',
      html`<h1>Sign out?</h1>
${name === undefined ? html`` : html`<p class="muted">${name} asks to sign you out.</p>`}
<form method="post" action="${ctx.config.basePath}/logout">
<input type="hidden" name="csrf" value="${csrf}">
<input type="hidden" name="confirm" value="yes">
${logout.client === undefined ? html`` : html`<input type="hidden" name="client_id" value="${logout.client.clientId}">`}
${logout.redirectUri === undefined ? html`` : html`<input type="hidden" name="post_logout_redirect_uri" value="${logout.redirectUri}">`}
${logout.state === undefined ? html`` : html`<input type="hidden" name="state" value="${logout.state}">`}
<button type="submit">Sign out</button>
</form>`,
      target === undefined ? [] : [target],
    );
  }

  async function handle(request: FastifyRequest, reply: FastifyReply, params: Params, confirmed: boolean): Promise<FastifyReply> {
    const logout = await parse(params);
    if (logout instanceof OAuthError) return sendErrorPage(reply, logout);
    if (confirmed) return signOut(request, reply, logout);
    const session = await currentSession(lookup, request, ctx.now());
    // A valid hint for the person signed in here (or for nobody signed in) ends the session at once.
    if (logout.hintSubject !== undefined && (session === undefined || session.subject === logout.hintSubject)) return signOut(request, reply, logout);
    return confirmation(request, reply, logout);
  }

  return async (app) => {
    app.get('/logout', { config: { page: true } }, async (request, reply) => handle(request, reply, parseParams(queryOf(request.url)), false));
    app.post('/logout', { config: { page: true } }, async (request, reply) => {
      const form = (request.body as Params | undefined) ?? EMPTY_PARAMS;
      if (single(form, 'confirm') === undefined) return handle(request, reply, form, false);
      // The confirmation form (and the sign-out buttons of Pinpoint's pages) must come from this server's pages.
      if (!csrfValid(ctx.cookies, request, single(form, 'csrf'))) return sendErrorPage(reply, refused('the sign-out form expired; try again'));
      const rest = new Map([...form].filter(([name]) => name !== 'csrf' && name !== 'confirm'));
      return handle(request, reply, rest, true);
    });
  };
}

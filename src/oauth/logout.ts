/**
 * GET/POST /logout (OpenID Connect RP-Initiated Logout 1.0, DESIGN.md §8). With a valid id_token_hint for the
 * signed-in person the session ends at once; otherwise the person confirms on a page (a CSRF-protected form).
 * A refused logout (error page) keeps the session; logout revokes no refresh token. A POST from another site comes
 * without the session cookie (SameSite=Lax): it is sent on to GET, which a top-level navigation makes with the cookie.
 */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { ClientDirectory } from '../clients/directory.js';
import type { ClientRecord } from '../config/types.js';
import { verifyIdTokenHint } from '../crypto/jwt.js';
import type { SigningKeys } from '../crypto/keys.js';
import { readCookie, type CookieSettings } from '../http/cookies.js';
import { formTargetOf, pageHeaders, sendPage } from '../http/pages.js';
import { checkLimits, EMPTY_PARAMS, parseParams, queryOf, repeatedParameter, single, type Params } from '../http/params.js';
import { redirectWith } from '../http/redirects.js';
import { sendErrorPage } from '../http/render-error.js';
import { logoutConfirmationPage, signedOutPage } from '../http/templates.js';
import { bounded } from '../log.js';
import { OAuthError } from '../policy/oauth-error.js';
import { csrfToken, csrfValid } from '../session/csrf.js';
import { currentSession, endSession, SESSION_COOKIE } from '../session/session.js';
import type { SessionStore } from '../store/types.js';

/** What /logout uses, wired by buildApp. */
export interface LogoutRouteDeps {
  readonly store: SessionStore;
  /** Clients as far as known without fetching (DESIGN.md §7: /logout never fetches a metadata document). */
  readonly clients: Pick<ClientDirectory, 'findWithoutFetching'>;
  /** The keys in use now, read at each use: keys rotate while the server runs. */
  readonly keys: () => SigningKeys;
  readonly issuer: string;
  readonly now: () => number;
  readonly cookies: CookieSettings;
  readonly basePath: string;
  /** Whether a session's subject is still a user or comes from a configured upstream (DESIGN.md §6). */
  readonly isKnownSubject: (subject: string) => boolean;
}

interface LogoutRequest {
  readonly client?: ClientRecord;
  /** Checked against the client's post_logout_redirect_uris. */
  readonly redirectUri?: string;
  readonly state?: string;
  /** The subject of a valid id_token_hint. */
  readonly hintSubject?: string;
}

const refused = (description: string): OAuthError => new OAuthError('invalid_request', description);

/** The parameters of a logout request (RP-Initiated Logout 1.0 §2), the ones a POST without the session cookie carries to GET. */
const LOGOUT_PARAMETERS = ['id_token_hint', 'logout_hint', 'client_id', 'post_logout_redirect_uri', 'state', 'ui_locales'] as const;

/** Whether the browser sent the session cookie: it does not on a POST from another site (SameSite=Lax). */
const carriesSessionCookie = (deps: LogoutRouteDeps, request: FastifyRequest): boolean =>
  readCookie(request.headers.cookie, deps.cookies, SESSION_COOKIE) !== undefined;

/** The subject and client of a valid id_token_hint; an OAuthError when it is not one of ours or names another client. */
async function readHint(deps: LogoutRouteDeps, hint: string, clientId: string | undefined): Promise<{ subject?: string; clientId?: string } | OAuthError> {
  let subject: string | undefined;
  let hintClient: string | undefined;
  try {
    const claims = await verifyIdTokenHint(deps.keys(), hint, deps.issuer);
    subject = typeof claims.sub === 'string' ? claims.sub : undefined;
    hintClient = typeof claims.aud === 'string' ? claims.aud : undefined;
  } catch {
    return refused('id_token_hint is not an ID token this server issued');
  }
  if (clientId !== undefined && clientId !== hintClient) return refused('client_id does not match the id_token_hint');
  return { ...(subject !== undefined && { subject }), ...(hintClient !== undefined && { clientId: hintClient }) };
}

/** Reads and checks the parameters; an OAuthError for a refused request (shown as the error page). */
async function parse(deps: LogoutRouteDeps, params: Params): Promise<LogoutRequest | OAuthError> {
  const repeated = repeatedParameter(params);
  if (repeated !== undefined) return refused(`${repeated} appears more than once`);
  // DESIGN.md §4: a `state` over the limit is refused here too, never echoed into a redirect.
  const overLimit = checkLimits(params);
  if (overLimit !== undefined) return overLimit;
  const hintText = single(params, 'id_token_hint');
  const clientId = single(params, 'client_id');
  const hint = hintText === undefined ? {} : await readHint(deps, hintText, clientId);
  if (hint instanceof OAuthError) return hint;
  const whose = hint.clientId ?? clientId;
  // DESIGN.md §7: /logout never fetches a metadata document; one not in the cache is an unknown client here.
  const client = await deps.clients.findWithoutFetching(whose);
  if (whose !== undefined && client === undefined) return refused(`unknown client "${bounded(whose)}"`);
  const redirectUri = single(params, 'post_logout_redirect_uri');
  // Without a client there is no list to check the URI against: no redirect, the "signed out" page (DESIGN.md §8).
  if (redirectUri !== undefined && client !== undefined && !client.postLogoutRedirectUris.includes(redirectUri)) {
    return refused('post_logout_redirect_uri is not registered for this client');
  }
  const state = single(params, 'state');
  return {
    ...(client !== undefined && { client }),
    ...(client !== undefined && redirectUri !== undefined && { redirectUri }),
    ...(state !== undefined && { state }),
    ...(hint.subject !== undefined && { hintSubject: hint.subject }),
  };
}

async function signOut(deps: LogoutRouteDeps, request: FastifyRequest, reply: FastifyReply, logout: LogoutRequest): Promise<FastifyReply> {
  const session = await currentSession(deps, request, deps.now());
  // A request without the cookie clears nothing: its clearing Set-Cookie would sign out a browser that did not send it.
  if (carriesSessionCookie(deps, request)) await endSession(deps.store, deps.cookies, request, reply);
  request.clientId = logout.client?.clientId;
  request.outcome = 'ok';
  request.log.info({ audit: true, event: 'logout', subject: session?.subject, client_id: logout.client?.clientId }, 'signed out');
  if (logout.redirectUri !== undefined) return pageHeaders(reply).redirect(redirectWith(logout.redirectUri, { state: logout.state }), 303);
  return sendPage(reply, 200, 'Signed out', signedOutPage());
}

function confirmation(deps: LogoutRouteDeps, request: FastifyRequest, reply: FastifyReply, logout: LogoutRequest): FastifyReply {
  const target = logout.redirectUri === undefined ? undefined : formTargetOf(logout.redirectUri);
  const clientName = logout.client?.displayName ?? logout.client?.clientId;
  const body = logoutConfirmationPage({
    basePath: deps.basePath,
    csrf: csrfToken(deps.cookies, request, reply),
    ...(clientName !== undefined && { clientName }),
    ...(logout.client !== undefined && { clientId: logout.client.clientId }),
    ...(logout.redirectUri !== undefined && { postLogoutRedirectUri: logout.redirectUri }),
    ...(logout.state !== undefined && { state: logout.state }),
  });
  return sendPage(reply, 200, 'Sign out', body, target === undefined ? [] : [target]);
}

async function handle(deps: LogoutRouteDeps, request: FastifyRequest, reply: FastifyReply, params: Params, confirmed: boolean): Promise<FastifyReply> {
  const logout = await parse(deps, params);
  if (logout instanceof OAuthError) return sendErrorPage(reply, logout);
  if (confirmed) return signOut(deps, request, reply, logout);
  const session = await currentSession(deps, request, deps.now());
  // A valid hint for the person signed in here (or for nobody signed in) ends the session at once.
  if (logout.hintSubject !== undefined && (session === undefined || session.subject === logout.hintSubject)) return signOut(deps, request, reply, logout);
  return confirmation(deps, request, reply, logout);
}

/**
 * A logout request POSTed without the session cookie (from another site: SameSite=Lax), checked, then sent to GET with
 * its parameters: that navigation carries the cookie, so the signed-in person's session is found and the usual rules
 * apply (ended at once for a hint naming that person, else the confirmation page), never "nobody is signed in".
 */
async function sendToGet(deps: LogoutRouteDeps, reply: FastifyReply, form: Params): Promise<FastifyReply> {
  const logout = await parse(deps, form);
  if (logout instanceof OAuthError) return sendErrorPage(reply, logout);
  const carried = LOGOUT_PARAMETERS.flatMap((name) => (form.get(name) ?? []).map((value): [string, string] => [name, value]));
  return pageHeaders(reply).redirect(`${deps.basePath}/logout?${new URLSearchParams(carried).toString()}`, 303);
}

/** POST: the confirmation form (or a sign-out button of Pinpoint's pages) when `confirm` is present, else a logout request. */
async function submitted(deps: LogoutRouteDeps, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const form = (request.body as Params | undefined) ?? EMPTY_PARAMS;
  if (single(form, 'confirm') === undefined) {
    return carriesSessionCookie(deps, request) ? handle(deps, request, reply, form, false) : sendToGet(deps, reply, form);
  }
  // The confirmation form (and the sign-out buttons of Pinpoint's pages) must come from this server's pages.
  if (!csrfValid(deps.cookies, request, single(form, 'csrf'))) return sendErrorPage(reply, refused('the sign-out form expired; try again'));
  const rest = new Map([...form].filter(([name]) => name !== 'csrf' && name !== 'confirm'));
  return handle(deps, request, reply, rest, true);
}

export function logoutRoutes(deps: LogoutRouteDeps): FastifyPluginAsync {
  return async (app) => {
    app.get('/logout', { config: { page: true } }, async (request, reply) => handle(deps, request, reply, parseParams(queryOf(request.url)), false));
    app.post('/logout', { config: { page: true } }, async (request, reply) => submitted(deps, request, reply));
  };
}

/** GET/POST /authorize (RFC 6749 §4.1, OIDC Core §3.1.2): validate everything, then sign-in or a code. */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { AppContext } from '../context.js';
import { OAuthError } from '../errors.js';
import { EMPTY_PARAMS, parseParams, queryOf, type Params } from '../http/params.js';
import { sendErrorPage } from '../http/render-error.js';
import { beginSignIn } from '../login/begin.js';
import { pageHeaders } from '../login/pages.js';
import { currentSession } from '../login/session.js';
import { errorRedirect, validateAuthorizationRequest } from './authorization-request.js';
import { completeAuthorization } from './complete-authorization.js';
import { countFailure, tooManyFailures } from '../http/failure-limit.js';

export function authorizeRoutes(ctx: AppContext): FastifyPluginAsync {
  async function handle(request: FastifyRequest, reply: FastifyReply, params: Params): Promise<FastifyReply> {
    const claimedClient = params.get('client_id')?.[0];
    const limited = tooManyFailures(ctx, request, claimedClient);
    if (limited !== undefined) return sendErrorPage(reply, limited);
    const validation = validateAuthorizationRequest(params, ctx.config.clients, ctx.issuer);
    if (!validation.ok) {
      const error = 'page' in validation ? validation.page : validation.redirect.error;
      countFailure(ctx, request, claimedClient, error.status);
      if ('page' in validation) return sendErrorPage(reply, validation.page);
      const { redirectUri, state } = validation.redirect;
      request.outcome = error.code;
      return pageHeaders(reply).redirect(errorRedirect(ctx.issuer, redirectUri, error, state), 303);
    }
    const authorization = validation.request;
    request.clientId = authorization.clientId;

    const session = await currentSession(ctx, request);
    const tooOld =
      session !== undefined && authorization.maxAge !== undefined && ctx.now() - session.authTime > authorization.maxAge * 1000;
    if (session === undefined || authorization.prompt === 'login' || tooOld) {
      if (authorization.prompt === 'none') {
        request.outcome = 'login_required';
        const error = new OAuthError('login_required', 'the person is not signed in');
        return pageHeaders(reply).redirect(errorRedirect(ctx.issuer, authorization.redirectUri, error, authorization.state), 303);
      }
      return beginSignIn(ctx, reply, { kind: 'authorize', request: authorization });
    }
    request.outcome = 'ok';
    return pageHeaders(reply).redirect(await completeAuthorization(ctx, authorization, session), 303);
  }

  return async (app) => {
    app.get('/authorize', { config: { page: true } }, async (request, reply) =>
      handle(request, reply, parseParams(queryOf(request.url))),
    );
    app.post('/authorize', { config: { page: true } }, async (request, reply) =>
      handle(request, reply, (request.body as Params | undefined) ?? EMPTY_PARAMS),
    );
  };
}

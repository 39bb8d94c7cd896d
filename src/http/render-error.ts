/** The one place errors become responses: JSON for the OAuth endpoints, an HTML page for pages. */
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { OAuthError } from '../policy/oauth-error.js';
import { errorPage } from './pages.js';

/** Turns anything thrown into an OAuthError; unknown failures become server_error (logged, not shown). */
export function toOAuthError(error: unknown, request: FastifyRequest): OAuthError {
  if (error instanceof OAuthError) {
    // A store outage carries the backend's error: the operator needs it, the client never sees it.
    if (error.status === 503 && error.cause !== undefined) {
      request.log.error({ err: { message: String((error.cause as Error | undefined)?.message ?? error.cause) } }, 'state store unavailable');
    }
    return error;
  }
  const fastifyError = error as Partial<FastifyError>;
  switch (fastifyError.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      // The limit that refused it: the route's own (16 KiB at /register), else the server's 64 KiB (DESIGN.md §4, §7).
      return new OAuthError('invalid_request', `the request body is larger than ${kibibytes(request.routeOptions.bodyLimit)}`, 413);
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new OAuthError('invalid_request', 'the body must be application/x-www-form-urlencoded', 415);
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new OAuthError('invalid_request', 'the request body is malformed', 400);
    // What the router refuses before any route runs (transport.ts answers them): never the path back, which holds the query.
    case 'FST_ERR_BAD_URL':
      return new OAuthError('invalid_request', 'the request path is not validly percent-encoded', 400);
    case 'FST_ERR_MAX_PARAM_LENGTH':
      return new OAuthError('invalid_request', 'a segment of the request path is too long', 414);
    default:
      break;
  }
  const status = fastifyError.statusCode;
  if (status !== undefined && status >= 400 && status < 500) {
    return new OAuthError('invalid_request', 'the request is malformed', status);
  }
  request.log.error({ err: { message: fastifyError.message, stack: fastifyError.stack } }, 'unexpected error');
  return new OAuthError('server_error', 'the server could not complete the request', 500);
}

const kibibytes = (bytes: number): string => (bytes % 1024 === 0 ? `${bytes / 1024} KiB` : `${bytes} bytes`);

export function sendJsonError(reply: FastifyReply, error: OAuthError): FastifyReply {
  reply.request.outcome = error.code;
  for (const [name, value] of Object.entries(error.headers)) reply.header(name, value);
  return reply
    .code(error.status)
    .header('Cache-Control', 'no-store')
    .header('Pragma', 'no-cache')
    .send({ error: error.code, error_description: error.description });
}

export function sendErrorPage(reply: FastifyReply, error: OAuthError): FastifyReply {
  reply.request.outcome = error.code;
  for (const [name, value] of Object.entries(error.headers)) reply.header(name, value);
  return errorPage(reply, error.status, error.code, error.description);
}

/** The common front of the form-posting OAuth endpoints (/token, /device_authorization). */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { OAuthError } from '../policy/oauth-error.js';
import { countAgainstAddress, countFailure, tooManyFailures, type FailureLimits } from '../http/failure-limit.js';
import { checkLimits, EMPTY_PARAMS, repeatedParameter, type Params } from '../http/params.js';
import { sendJsonError, toOAuthError } from '../http/render-error.js';
import type { FixedWindowLimiter } from '../http/rate-limit.js';
import { readClientCredentials, type PresentedCredentials } from '../clients/authentication.js';

/** What the front of a form endpoint uses: the failure counter every endpoint shares (DESIGN.md §7), its limits, the clock. */
export interface FormEndpointDeps {
  readonly failures: FixedWindowLimiter;
  readonly limits: FailureLimits;
  readonly now: () => number;
  /** Whether resolving this client_id would fetch its metadata document now (clients/directory.ts). */
  readonly fetchesToResolve: (clientId: string) => boolean;
}

/** Content type, limits, repeats and rate limits, then `handle`; every error rendered as JSON in one place. */
export async function handleFormEndpoint(
  deps: FormEndpointDeps,
  request: FastifyRequest,
  reply: FastifyReply,
  handle: (params: Params, presented: PresentedCredentials) => Promise<{ status?: number; body: unknown }>,
): Promise<FastifyReply> {
  const params = (request.body as Params | undefined) ?? EMPTY_PARAMS;
  const presented = readClientCredentials(request.headers.authorization, params);
  const clientId = presented.claimedClientId;
  request.clientId = clientId;
  try {
    const limited = tooManyFailures(deps.failures, deps.limits, request.ip, clientId, deps.now());
    if (limited !== undefined) throw limited;
    // DESIGN.md §9: a document fetch counts against the address, before it starts and in the same step as the check,
    // so neither a success nor a burst of parallel requests makes the server fetch beyond the address's limit.
    if (clientId !== undefined && deps.fetchesToResolve(clientId)) countAgainstAddress(deps.failures, request.ip, deps.now());
    if (request.headers['content-type'] === undefined && request.body === undefined) {
      throw new OAuthError('invalid_request', 'the body must be application/x-www-form-urlencoded', 415);
    }
    const limitError = checkLimits(params);
    if (limitError !== undefined) throw limitError;
    // DESIGN.md §4: every parameter at most once; `resource` repeats are the policy's to judge (§5).
    const repeated = repeatedParameter(params, ['resource']);
    if (repeated !== undefined) throw new OAuthError('invalid_request', `${repeated} appears more than once`);
    const { status, body } = await handle(params, presented);
    request.outcome = 'ok';
    return reply.code(status ?? 200).header('Cache-Control', 'no-store').header('Pragma', 'no-cache').send(body);
  } catch (error) {
    const oauthError = toOAuthError(error, request);
    // RFC 8628 §3.5: authorization_pending and slow_down are how polling waits, not failed requests.
    if (oauthError.code !== 'authorization_pending' && oauthError.code !== 'slow_down') {
      countFailure(deps.failures, request.ip, clientId, oauthError.status, deps.now());
    }
    return sendJsonError(reply, oauthError);
  }
}


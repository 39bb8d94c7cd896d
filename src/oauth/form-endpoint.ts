/** The common front of the form-posting OAuth endpoints (/token, /device_authorization). */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { OAuthError } from '../policy/oauth-error.js';
import { admitRequest, countsAsFailure, type FailureLimits, type RequestOutcome, type RequestsInFlight } from '../http/failure-limit.js';
import { checkLimits, EMPTY_PARAMS, repeatedParameter, type Params } from '../http/params.js';
import { sendJsonError, toOAuthError } from '../http/render-error.js';
import type { FixedWindowLimiter } from '../http/rate-limit.js';
import { readClientCredentials, type PresentedCredentials } from '../clients/authentication.js';

/** What the front of a form endpoint uses: the failure counter every endpoint shares (DESIGN.md §7), its limits, the clock. */
export interface FormEndpointDeps {
  readonly failures: FixedWindowLimiter;
  /** This process's requests still being answered, counted against the same limits until they end. */
  readonly inFlight: RequestsInFlight;
  readonly limits: FailureLimits;
  readonly now: () => number;
  /** How many fetches resolving this client_id (with an assertion: and its key set) would make now (clients/directory.ts). */
  readonly fetchesToResolve: (clientId: string, withAssertion: boolean) => number;
  /** Whether a client_id may name a client, reading nothing (clients/directory.ts isKnownClient). */
  readonly isKnownClient: (clientId: string) => boolean;
}

/** A form endpoint's answer; `kept` when it made the server keep something, which counts against the address (DESIGN.md §4). */
export interface FormAnswer {
  readonly status?: number;
  readonly body: unknown;
  readonly kept?: boolean;
}

/** Content type, limits, repeats and rate limits, then `handle`; every error rendered as JSON in one place. */
export async function handleFormEndpoint(
  deps: FormEndpointDeps,
  request: FastifyRequest,
  reply: FastifyReply,
  handle: (params: Params, presented: PresentedCredentials) => Promise<FormAnswer>,
): Promise<FastifyReply> {
  const params = (request.body as Params | undefined) ?? EMPTY_PARAMS;
  const presented = readClientCredentials(request.headers.authorization, params);
  const clientId = presented.claimedClientId;
  // The access line names only a client_id that can be one: a client that swapped its fields sends a secret or a
  // refresh token here, which no log line may hold (DESIGN.md §7).
  request.clientId = clientId !== undefined && deps.isKnownClient(clientId) ? clientId : undefined;
  // DESIGN.md §9: a document fetch counts against the address, before it starts and in the same step as the check,
  // so neither a success nor a burst of parallel requests makes the server fetch beyond the address's limit.
  const withAssertion = presented.assertion?.jwt !== undefined;
  const fetches = (): number => (clientId === undefined ? 0 : deps.fetchesToResolve(clientId, withAssertion));
  const admitting = admitRequest(deps.failures, deps.inFlight, deps.limits, { address: request.ip, clientId, fetches }, deps.now);
  // Most requests are let in at once: no await for them.
  const admission = admitting instanceof Promise ? await admitting : admitting;
  if (!admission.ok) return sendJsonError(reply, admission.error);
  // Counted once, however the request ends (a refusal sets it below).
  let outcome: RequestOutcome = 'done';
  try {
    if (request.headers['content-type'] === undefined && request.body === undefined) {
      throw new OAuthError('invalid_request', 'the body must be application/x-www-form-urlencoded', 415);
    }
    const limitError = checkLimits(params);
    if (limitError !== undefined) throw limitError;
    // DESIGN.md §4: every parameter at most once; `resource` repeats are the policy's to judge (§5).
    const repeated = repeatedParameter(params, ['resource']);
    if (repeated !== undefined) throw new OAuthError('invalid_request', `${repeated} appears more than once`);
    const { status, body, kept } = await handle(params, presented);
    if (kept === true) outcome = 'kept';
    request.outcome = 'ok';
    return reply.code(status ?? 200).header('Cache-Control', 'no-store').header('Pragma', 'no-cache').send(body);
  } catch (error) {
    const oauthError = toOAuthError(error, request);
    // RFC 8628 §3.5: authorization_pending and slow_down are how polling waits, not failed requests.
    const waiting = oauthError.code === 'authorization_pending' || oauthError.code === 'slow_down';
    if (!waiting && countsAsFailure(oauthError.status)) outcome = 'failed';
    return sendJsonError(reply, oauthError);
  } finally {
    admission.settle(outcome, deps.now());
  }
}

/**
 * POST /register (RFC 7591 dynamic client registration, DESIGN.md §9), when `dynamic_clients.registration` is
 * "open" or "token". Registered clients live in the store, so every instance knows them. A registration counts
 * against the address's limits and answers CORS from any origin (browser-based MCP clients register from a page).
 */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { DynamicClientsConfig } from '../config/types.js';
import { digestOf, matchesDigest, sha256 } from '../crypto/digest.js';
import { randomText } from '../crypto/random.js';
import { newRegisteredClientId } from '../clients/directory.js';
import { admitAgainstAddress, type FailureLimits, type RequestsInFlight } from '../http/failure-limit.js';
import type { FixedWindowLimiter } from '../http/rate-limit.js';
import { sendJsonError } from '../http/render-error.js';
import { bounded } from '../log.js';
import { OAuthError } from '../policy/oauth-error.js';
import { dynamicRedirectUriProblem } from '../policy/redirect-uri.js';
import { OFFLINE_ACCESS } from '../policy/grant-eligibility.js';
import { parseScope } from '../policy/scope.js';
import type { RegisteredClientMetadata, RegisteredClientStore } from '../store/types.js';

/** What /register uses, wired by buildApp. */
export interface RegistrationRouteDeps {
  readonly store: RegisteredClientStore;
  /** The `dynamic_clients` block: without it, or with registration "off", there is no /register. */
  readonly dynamicClients?: DynamicClientsConfig;
  readonly now: () => number;
  /** The per-address failure counter every endpoint shares, and its limits (DESIGN.md §7). */
  readonly failures: FixedWindowLimiter;
  readonly inFlight: RequestsInFlight;
  readonly limits: FailureLimits;
}

/** DESIGN.md §9: a registration nobody uses is removed after 24 h. */
export const UNUSED_REGISTRATION_MS = 24 * 3_600_000;
const BODY_LIMIT = 16 * 1024;

const badMetadata = (description: string): OAuthError => new OAuthError('invalid_client_metadata', description);
const badRedirect = (description: string): OAuthError => new OAuthError('invalid_redirect_uri', description);

const text = (max: number) => z.string().min(1).max(max);
const MAX_REDIRECT_URIS = 20;
const MAX_GRANT_TYPES = 20;
/** The grants a dynamic client may have (DESIGN.md §9); what else a host asks for is left out of its registration. */
const DYNAMIC_GRANT_TYPES: readonly string[] = ['authorization_code', 'refresh_token'];
const httpsUrl = text(2048).refine((value) => URL.canParse(value) && new URL(value).protocol === 'https:', { message: 'must be an https URL' });

const REQUEST = z.object({
  redirect_uris: z
    .array(z.string().max(2048), { error: (issue) => (issue.code === 'invalid_type' ? 'redirect_uris is required: a list of redirect URIs' : undefined) })
    .min(1, 'redirect_uris must not be empty')
    .max(MAX_REDIRECT_URIS, `redirect_uris may hold at most ${MAX_REDIRECT_URIS} URIs`),
  token_endpoint_auth_method: z.enum(['none', 'client_secret_basic', 'client_secret_post']).optional(),
  grant_types: z.array(text(256)).min(1, 'grant_types must not be empty').max(MAX_GRANT_TYPES, `grant_types may hold at most ${MAX_GRANT_TYPES} values`).optional(),
  response_types: z.array(z.literal('code')).length(1).optional(),
  application_type: z.enum(['native', 'web']).optional(),
  client_name: text(200).optional(),
  client_uri: httpsUrl.optional(),
  logo_uri: httpsUrl.optional(),
  scope: text(1000).optional(),
  dpop_bound_access_tokens: z.boolean({ error: 'dpop_bound_access_tokens must be true or false' }).optional(),
});

/** Checks a registration request fully before anything is stored (DESIGN.md §1). */
export function validateRegistration(body: unknown, dynamic: DynamicClientsConfig): RegisteredClientMetadata {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw badMetadata('the body must be a JSON object');
  // DESIGN.md §7: a NUL anywhere is refused before any field is judged (PostgreSQL text cannot even hold one).
  const withNul = pathOfNul(body);
  if (withNul !== undefined) throw badMetadata(`${withNul} holds a NUL character`);
  const parsed = REQUEST.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const field = issue?.path.join('.') ?? 'the body';
    const error = field.startsWith('redirect_uris') ? badRedirect : badMetadata;
    throw error(`${field}: ${issue?.message ?? 'is not valid'}`);
  }
  const request = parsed.data;
  for (const uri of request.redirect_uris) {
    const problem = dynamicRedirectUriProblem(uri, request.application_type);
    if (problem !== undefined) throw badRedirect(`"${bounded(uri)}" ${problem}`);
  }
  // RFC 7591 §2, §3.2.1: the server may replace what it does not grant, and answers what it registered. VS Code asks
  // for every grant type the metadata lists (device_code too): refusing it would leave such hosts unable to register.
  const grantTypes = [...new Set(request.grant_types ?? ['authorization_code'])].filter((grantType) => DYNAMIC_GRANT_TYPES.includes(grantType)) as ('authorization_code' | 'refresh_token')[];
  // RFC 7591 §2.1: the code response type, the only one, goes with the authorization_code grant.
  if (!grantTypes.includes('authorization_code')) throw badMetadata('grant_types must include authorization_code (the code response type needs it)');
  const scope = registeredScope(request.scope, dynamic, grantTypes);
  return {
    redirect_uris: [...new Set(request.redirect_uris)],
    token_endpoint_auth_method: request.token_endpoint_auth_method ?? 'none',
    grant_types: grantTypes,
    response_types: ['code'],
    ...(request.application_type !== undefined && { application_type: request.application_type }),
    ...(request.client_name !== undefined && { client_name: request.client_name }),
    ...(request.client_uri !== undefined && { client_uri: request.client_uri }),
    ...(request.logo_uri !== undefined && { logo_uri: request.logo_uri }),
    ...(scope !== undefined && { scope }),
    // RFC 9449 §5.2, DESIGN.md §13: stored and answered only when true (false is the default anyway).
    ...(request.dpop_bound_access_tokens === true && { dpop_bound_access_tokens: true }),
  };
}

/**
 * The scope to register: within `dynamic_clients.scopes`, plus offline_access, which a client that gets refresh tokens
 * may ask (DESIGN.md §9). A client that gets none is registered without it (RFC 7591 §3.2.1: the server may replace
 * a value, and answers what it registered), so a host that adds it can still use the rest; undefined when none is left.
 */
function registeredScope(sent: string | undefined, dynamic: DynamicClientsConfig, grantTypes: readonly string[]): string | undefined {
  if (sent === undefined) return undefined;
  const scope = parseScope(sent);
  if (scope === undefined) throw badMetadata('scope is malformed');
  const outside = scope.find((value) => !dynamic.scopes.includes(value) && value !== OFFLINE_ACCESS);
  if (outside !== undefined) throw badMetadata(`scope "${outside}" is beyond what dynamic clients may ask`);
  const refreshes = grantTypes.includes('refresh_token') && dynamic.refreshLifetimeMs !== undefined;
  if (refreshes || !scope.includes(OFFLINE_ACCESS)) return sent;
  const kept = scope.filter((value) => value !== OFFLINE_ACCESS);
  return kept.length === 0 ? undefined : kept.join(' ');
}

/** Where the first string (a value or a member name) holding U+0000 is, e.g. `redirect_uris.0`; undefined when none does. */
function pathOfNul(body: object): string | undefined {
  // Iterative, depth first in document order: a 16 KiB body can nest thousands of levels, too deep for recursion.
  const pending: [unknown, string][] = [[body, '']];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const [value, path] = next;
    if (typeof value === 'string' && value.includes('\u0000')) return path;
    if (typeof value !== 'object' || value === null) continue;
    const members = Object.entries(value);
    for (const [key] of members) if (key.includes('\u0000')) return `a member name in ${path === '' ? 'the body' : path}`;
    const prefix = path === '' ? '' : `${path}.`;
    // Paths are echoed in the description, so each is cut like any text taken from a request.
    for (const [key, member] of members.reverse()) pending.push([member, bounded(`${prefix}${key}`) as string]);
  }
  return undefined;
}

/** The registration settings, with the SHA-256 of the initial access token when there is one. */
interface Registration extends DynamicClientsConfig {
  readonly expectedToken?: Buffer;
}

/** RFC 6750 §2.1: whether the request carries the initial access token, when registration needs one (DESIGN.md §9). */
function tokenAccepted(expectedToken: Buffer | undefined, request: FastifyRequest): boolean {
  if (expectedToken === undefined) return true;
  const match = /^Bearer ([\x21-\x7E]+)$/i.exec(request.headers.authorization ?? '');
  return match !== null && matchesDigest(match[1] as string, expectedToken);
}

/** The answer to a registration refused before its body is read (no initial access token); undefined when it may go on. */
function refusedUpFront(request: FastifyRequest, reply: FastifyReply, settings: Registration): FastifyReply | undefined {
  if (settings.registration === 'token' && !tokenAccepted(settings.expectedToken, request)) {
    request.outcome = 'invalid_token';
    return reply
      .code(401)
      .header('WWW-Authenticate', 'Bearer error="invalid_token", error_description="registration needs the initial access token"')
      .header('Cache-Control', 'no-store')
      .send({ error: 'invalid_token', error_description: 'registration needs the initial access token' });
  }
  return undefined;
}

/** Keeps the new client in the store: its id, and its secret when it authenticates with one (answered once, kept as a digest). */
async function saveClient(store: RegisteredClientStore, metadata: RegisteredClientMetadata, now: number): Promise<{ clientId: string; secret?: string }> {
  const clientId = newRegisteredClientId();
  const secret = metadata.token_endpoint_auth_method === 'none' ? undefined : randomText(32);
  await store.saveRegisteredClient({
    clientId,
    ...(secret !== undefined && { secretDigest: digestOf(secret) }),
    metadata,
    createdAt: now,
    expiresAt: now + UNUSED_REGISTRATION_MS,
  });
  return { clientId, ...(secret !== undefined && { secret }) };
}

/** Every registration attempt counts against the address (DESIGN.md §9), let in by the same rule as a failure and never given back. */
async function register(deps: RegistrationRouteDeps, request: FastifyRequest, reply: FastifyReply, settings: Registration): Promise<FastifyReply> {
  const admission = await admitAgainstAddress(deps.failures, deps.inFlight, deps.limits, request.ip, deps.now);
  if (!admission.ok) return sendJsonError(reply, admission.error);
  try {
    return await registerAdmitted(deps, request, reply, settings);
  } finally {
    admission.settle('kept', deps.now());
  }
}

async function registerAdmitted(deps: RegistrationRouteDeps, request: FastifyRequest, reply: FastifyReply, settings: Registration): Promise<FastifyReply> {
  const now = deps.now();
  const refused = refusedUpFront(request, reply, settings);
  if (refused !== undefined) return refused;
  let metadata: RegisteredClientMetadata;
  try {
    metadata = validateRegistration(request.body, settings);
  } catch (error) {
    if (error instanceof OAuthError) return sendJsonError(reply, error);
    throw error;
  }
  const { clientId, secret } = await saveClient(deps.store, metadata, now);
  request.clientId = clientId;
  request.outcome = 'ok';
  request.log.info({ audit: true, event: 'registration', client_id: clientId, client_name: bounded(metadata.client_name), address: request.ip }, 'client registered');
  return reply
    .code(201)
    .header('Cache-Control', 'no-store')
    .send({
      ...metadata,
      client_id: clientId,
      client_id_issued_at: Math.floor(now / 1000),
      ...(secret !== undefined && { client_secret: secret, client_secret_expires_at: 0 }),
    });
}

export function registrationRoutes(deps: RegistrationRouteDeps): FastifyPluginAsync {
  const dynamic = deps.dynamicClients;
  return async (app) => {
    if (dynamic === undefined || dynamic.registration === 'off') return;
    const settings: Registration = { ...dynamic, ...(dynamic.registrationToken !== undefined && { expectedToken: sha256(dynamic.registrationToken) }) };
    // RFC 7591 §3: the one JSON endpoint. Its parsers are scoped to this plugin: JSON, and a refusal for anything else.
    app.removeAllContentTypeParsers();
    app.addContentTypeParser('application/json', { parseAs: 'string', bodyLimit: BODY_LIMIT }, (_request, body, done) => {
      try {
        done(null, JSON.parse(body as string));
      } catch {
        done(badMetadata('the body is not valid JSON'), undefined);
      }
    });
    app.addContentTypeParser('*', (_request, _payload, done) => {
      done(new OAuthError('invalid_client_metadata', 'the body must be application/json', 415), undefined);
    });
    // The route's own limit, so the 413 states it (http/render-error.ts reads it back).
    app.post('/register', { bodyLimit: BODY_LIMIT }, async (request, reply) => register(deps, request, reply, settings));
  };
}

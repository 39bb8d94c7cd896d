/**
 * The Fastify instance and what every request goes through, whatever its route (DESIGN.md §4, §10): proxies,
 * request ids, form bodies only, CORS, the access line and request metrics, HSTS, and the one place a thrown error
 * or an unknown path becomes an answer. buildApp adds the routes.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import formbody from '@fastify/formbody';
import proxyAddr from '@fastify/proxy-addr';
import Fastify, { LogController, type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { bounded } from '../log.js';
import { OAuthError } from '../policy/oauth-error.js';
import { clientErrorHandler, isApiPath, RequestsBeingReceived } from './client-error.js';
import { announcedBodyBytes, BodyBudget } from './body-budget.js';
import { capConnectionsPerAddress } from './connection-cap.js';
import { corsHook } from './cors.js';
import { limitedAddress } from './failure-limit.js';
import { requestRecorder, type Metrics } from './metrics.js';
import { LIMITS, parseParams, pathOf } from './params.js';
import { proxyTrust, REQUEST_ID_SHAPE, type ProxyTrust } from './proxies.js';
import { sendErrorPage, sendJsonError, toOAuthError } from './render-error.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** client_id once known, for the access log. */
    clientId: string | undefined;
    /** The OAuth error code or "ok", for the access log. */
    outcome: string | undefined;
    /** Audit fields of this request (DESIGN.md §10), carried by its access line, which then has `audit: true`. */
    audit: Record<string, unknown> | undefined;
  }
}

/** The methods Pinpoint's routes use (HEAD comes with GET). */
const ROUTED_METHODS = ['GET', 'HEAD', 'POST'] as const;

export interface TransportOptions {
  readonly logger: Logger;
  readonly baseUrl: string;
  readonly basePath: string;
  readonly trustedProxies: readonly string[];
  readonly https?: { key: Buffer; cert: Buffer };
  readonly metrics: Metrics;
  /** Whether a browser origin is one of some client's redirect URIs (CORS, DESIGN.md §4). */
  readonly isClientOrigin: (origin: string) => boolean;
  /** Counts a refused request against its address (a malformed request is a failure too, DESIGN.md §4). */
  readonly countFailure: (address: string, status: number) => void;
  /** Headers and body must arrive within this (Node's requestTimeout and headersTimeout); then 408 and the socket closed. */
  readonly requestTimeoutMs: number;
  /** Connections one client address may hold open at once (connection-cap.ts). */
  readonly addressConnections: number;
  /** Request bodies held while they arrive (body-budget.ts); tests pass a small one. */
  readonly bodyBudget?: BodyBudget;
}

/** A Fastify instance with every cross-cutting part in place and no route yet. */
export async function createTransport(options: TransportOptions): Promise<FastifyInstance> {
  const requests = new RequestsBeingReceived();
  const accessLine = accessLineWriter(options.metrics);
  const trusted = proxyTrust(options.trustedProxies);
  const app = createFastify(options, trusted, requests, accessLine);
  capConnectionsPerAddress(app.server, {
    perAddress: options.addressConnections,
    trusted,
    refused: refusalReporter(options),
  });
  app.decorateRequest('clientId', undefined);
  app.decorateRequest('outcome', undefined);
  app.decorateRequest('audit', undefined);
  // Only form bodies are accepted (DESIGN.md §4): anything else is 415.
  app.removeAllContentTypeParsers();
  // The body is a Params map; formbody types it as a record, hence the cast.
  await app.register(formbody, { parser: parseParams as unknown as (text: string) => Record<string, unknown>, bodyLimit: LIMITS.bodyBytes });
  app.addHook('onResponse', (request, reply, done) => {
    accessLine(request, reply, request.ip);
    done();
  });
  await addRequestIdAndCors(app, options, requests);
  if (isHttpsIssuer(options)) {
    app.addHook('onSend', async (_request, reply) => {
      reply.header(...STRICT_TRANSPORT);
    });
  }
  addErrorAnswers(app, options);
  return app;
}

/** How often at most a warning says that connections are being refused, so a flood of them is not a flood of lines. */
const REFUSAL_WARNING_MS = 10_000;

/** Each connection refused by the cap is counted in /metrics; a warning line names an address at most every 10 s. */
function refusalReporter(options: TransportOptions): (address: string) => void {
  let warnedAt = -Infinity;
  let refusedSince = 0;
  return (address) => {
    options.metrics.connectionsRefused.inc();
    refusedSince += 1;
    const now = performance.now();
    if (now - warnedAt < REFUSAL_WARNING_MS) return;
    options.logger.warn({ address, refused: refusedSince, limit: options.addressConnections }, 'connections refused: this address holds limits.address_connections open');
    warnedAt = now;
    refusedSince = 0;
  };
}

/** RFC 6797: an https issuer tells browsers to use nothing else for a year. */
const STRICT_TRANSPORT = ['Strict-Transport-Security', 'max-age=31536000'] as const;
const isHttpsIssuer = (options: TransportOptions): boolean => options.baseUrl.startsWith('https:');

function createFastify(options: TransportOptions, trusted: ProxyTrust, requests: RequestsBeingReceived, accessLine: AccessLineWriter): FastifyInstance {
  // Fastify's default (0) lets a sender that trickles its body hold a connection forever; Node checks these every
  // connectionsCheckingInterval, so a slow request ends between requestTimeout and a sixth more.
  const timeouts = {
    headersTimeout: options.requestTimeoutMs,
    connectionsCheckingInterval: Math.max(100, Math.round(options.requestTimeoutMs / 6)),
  };
  return Fastify({
    requestTimeout: options.requestTimeoutMs,
    loggerInstance: options.logger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: LIMITS.bodyBytes,
    // DESIGN.md §3: forwarded headers are believed from trusted_proxies only, in every tls mode.
    // Without trusted proxies Fastify's fast path applies: the socket address is the client.
    trustProxy: options.trustedProxies.length === 0 ? false : (address: string) => trusted(address),
    // The request id of a trusted proxy is kept (one id across the proxy's logs and ours); a client's never is.
    genReqId: (raw) => {
      const forwarded = raw.headers['x-request-id'];
      return typeof forwarded === 'string' && REQUEST_ID_SHAPE.test(forwarded) && trusted(raw.socket.remoteAddress) ? forwarded : randomUUID();
    },
    requestIdHeader: false,
    // A closing server answers what already reached it (DESIGN.md §11: a draining worker refuses no request); new
    // connections go to the other workers, and each answer closes its connection.
    return503OnClosing: false,
    clientErrorHandler: clientErrorHandler({
      basePath: options.basePath,
      log: options.logger,
      requests,
      trusted,
      countFailure: options.countFailure,
      strictTransport: isHttpsIssuer(options) ? STRICT_TRANSPORT.join(': ') : undefined,
    }),
    frameworkErrors: routerRefusal(options, trusted, accessLine),
    // node:https takes node:http's server options beside the TLS ones; Fastify hands `http` to node:http only.
    ...(options.https ? { https: { ...options.https, ...timeouts } } : { http: timeouts }),
  }) as unknown as FastifyInstance;
}

/** The field that marks an access line as an audit line (DESIGN.md §10). */
const AUDITED = { audit: true } as const;

/** Records an answered request: its metrics and its one access line, naming `address` as the client's. */
type AccessLineWriter = (request: FastifyRequest, reply: FastifyReply, address: string | undefined) => void;

/**
 * The request metrics, then one access-log line per request, with chosen fields only (DESIGN.md §10): never a query
 * string, header or body, and a value taken from the request at most 256 characters long.
 */
function accessLineWriter(metrics: Metrics): AccessLineWriter {
  const recordRequest = requestRecorder(metrics);
  return (request, reply, address) => {
    recordRequest(request, reply);
    const line: Record<string, unknown> = {
      method: request.method,
      path: bounded(pathOf(request.url)),
      status: reply.statusCode,
      ms: Math.round(reply.elapsedTime),
      // reqId comes from the request logger's bindings.
      address,
      client_id: bounded(request.clientId),
      outcome: request.outcome ?? (reply.statusCode < 400 ? 'ok' : 'error'),
    };
    // One line per request: an audited request's access line is its audit line (its fields after these, as written).
    if (request.audit !== undefined) Object.assign(line, AUDITED, request.audit);
    if (reply.statusCode >= 500) request.log.error(line, 'request');
    else request.log.info(line, 'request');
  };
}

/**
 * The client's address as Fastify's trustProxy finds it for a routed request (DESIGN.md §3), by the same library
 * (@fastify/proxy-addr). Only for requests the router refused, whose request object Fastify builds without that setting.
 */
const forwardedClient = (raw: IncomingMessage, trusted: ProxyTrust): string | undefined =>
  raw.socket.remoteAddress === undefined ? undefined : proxyAddr(raw, (address) => trusted(address));

/**
 * Fastify's frameworkErrors: what its router refuses before any route or hook runs (a path that does not decode,
 * FST_ERR_BAD_URL; a route parameter over its length, FST_ERR_MAX_PARAM_LENGTH) is answered like any malformed request
 * (DESIGN.md §4, §10): the error page or JSON by path, the request id and HSTS the hooks would add, counted as a
 * failure of its address, and its access line.
 */
function routerRefusal(options: TransportOptions, trusted: ProxyTrust, accessLine: AccessLineWriter): (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => void {
  return (error, request, reply) => {
    const address = forwardedClient(request.raw, trusted);
    const refusal = toOAuthError(error, request);
    if (address !== undefined) options.countFailure(address, refusal.status);
    reply.header('X-Request-Id', request.id);
    if (isHttpsIssuer(options)) reply.header(...STRICT_TRANSPORT);
    if (isApiPath(pathOf(request.url), options.basePath)) sendJsonError(reply, refusal);
    else sendErrorPage(reply, refusal);
    accessLine(request, reply, address);
  };
}

/** The answer to a body the budget has no room for: the worker holds as much of its address's bodies, or of all, as it may. */
const bodiesRefused = (bound: 'address' | 'all'): OAuthError =>
  new OAuthError('temporarily_unavailable', `too many request bodies are arriving ${bound === 'address' ? 'from this address at once' : 'at once'}; try again shortly`, 503, { 'Retry-After': '5' });

/**
 * One onRequest hook, callback style (no promise per request): every answer names its request, so an operator can
 * find its log lines (DESIGN.md §10), a body is weighed before it is read (body-budget.ts), CORS runs for the requests
 * that carry an Origin (cors.ts), and a body too slow to arrive is answered for the path it was sent to
 * (client-error.ts).
 */
async function addRequestIdAndCors(app: FastifyInstance, options: TransportOptions, requests: RequestsBeingReceived): Promise<void> {
  const cors = await corsHook(app, options.basePath, options.isClientOrigin);
  const bodies = options.bodyBudget ?? new BodyBudget();
  app.addHook('onRequest', (request, reply, done) => {
    requests.started(reply.raw);
    reply.header('X-Request-Id', request.id);
    const bytes = announcedBodyBytes(request.headers, LIMITS.bodyBytes);
    if (bytes > 0) {
      const group = limitedAddress(request.ip);
      const refused = bodies.take(group, bytes);
      if (refused !== undefined) {
        // Answered before the body is read; not a failure of the address, which only sent what it may.
        const refusal = bodiesRefused(refused);
        if (isApiPath(pathOf(request.url), options.basePath)) sendJsonError(reply, refusal);
        else sendErrorPage(reply, refusal);
        return;
      }
      // Whichever comes first: the body read or the socket gone (request), or the answer ended (reply). A pipelined
      // request queued behind one whose socket dies gets no reply 'close' at all (Node): its bytes would stay held.
      let held = true;
      const giveBack = (): void => {
        if (held) bodies.give(group, bytes);
        held = false;
      };
      request.raw.once('close', giveBack);
      reply.raw.once('close', giveBack);
    }
    // What @fastify/cors sends without an Origin: the answer differs by Origin, so caches must key on it.
    if (request.headers.origin === undefined) {
      reply.header('Vary', 'Origin');
      done();
    } else cors(request, reply, done);
  });
}

/** Thrown errors and unknown paths: JSON at API paths, the HTML error page for pages (DESIGN.md §4). */
function addErrorAnswers(app: FastifyInstance, options: TransportOptions): void {
  app.setErrorHandler(async (error, request, reply) => {
    const oauthError = toOAuthError(error, request);
    // Malformed requests (bad bodies, NUL bytes, ...) are failures of their address too (DESIGN.md §4).
    options.countFailure(request.ip, oauthError.status);
    if (request.routeOptions.config?.page === true) return sendErrorPage(reply, oauthError);
    return sendJsonError(reply, oauthError);
  });
  app.setNotFoundHandler(async (request, reply) => {
    const path = pathOf(request.url);
    // RFC 9110 §15.5.6: a path that exists under other methods answers 405 with the methods it has.
    const allowed = ROUTED_METHODS.filter((method) => app.hasRoute({ method, url: path }));
    if (allowed.length > 0) reply.header('Allow', allowed.join(', '));
    const refusal =
      allowed.length > 0
        ? new OAuthError('invalid_request', `${request.method} is not allowed here; use ${allowed.join(' or ')}`, 405)
        : new OAuthError('not_found', 'no such endpoint', 404);
    // DESIGN.md §4: a browser asking for a page gets the HTML error page.
    if (!isApiPath(path, options.basePath) && /\btext\/html\b/.test(request.headers.accept ?? '')) return sendErrorPage(reply, refusal);
    return sendJsonError(reply, refusal);
  });
}

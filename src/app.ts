/** buildApp(): the Fastify instance with every route, without listen(), so tests can inject(). */
import { randomUUID } from 'node:crypto';
import formbody from '@fastify/formbody';
import Fastify, { LogController, type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { makeContext, type AppContext, type AppLimits } from './context.js';
import type { Config } from './config/types.js';
import { clientErrorHandler, isApiPath } from './http/client-error.js';
import { corsHook } from './http/cors.js';
import { ClientDirectory, type DocumentResolver } from './http/clients.js';
import { createMetrics, measuredStore, requestRecorder, type Metrics } from './http/metrics.js';
import { proxyTrust, REQUEST_ID_SHAPE } from './http/proxies.js';
import type { LimiterLink } from './http/shared-limiter.js';
import { countFailure } from './http/failure-limit.js';
import { LIMITS, parseParams } from './http/params.js';
import { sendErrorPage, sendJsonError, toOAuthError } from './http/render-error.js';
import { OAuthError } from './policy/oauth-error.js';
import { consentRoutes } from './login/consent.js';
import { devicePageRoutes } from './login/device-page.js';
import { federationRoutes } from './login/federation.js';
import { loginRoutes } from './login/routes.js';
import { authorizeRoutes } from './oauth/authorize.js';
import { deviceAuthorizationRoutes } from './oauth/device-authorization.js';
import { healthRoutes } from './oauth/health.js';
import { introspectionRoutes } from './oauth/introspect.js';
import { logoutRoutes } from './oauth/logout.js';
import { registrationRoutes } from './oauth/register.js';
import { revocationRoutes } from './oauth/revoke.js';
import { metadataRoutes, wellKnownAtRoot } from './oauth/metadata.js';
import { tokenRoutes } from './oauth/token.js';
import { userinfoRoutes } from './oauth/userinfo.js';
import type { KeyRing, SigningKeys } from './crypto/keys.js';
import type { Store } from './store/types.js';

import { bounded, createLogger } from './log.js';

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

export interface BuildAppOptions {
  readonly config: Config;
  readonly store: Store;
  readonly keys: SigningKeys | KeyRing;
  readonly logger?: Logger;
  readonly now?: () => number;
  readonly limits?: Partial<AppLimits>;
  readonly https?: { key: Buffer; cert: Buffer };
  /** The registry the metrics listener serves; a private one when absent. */
  readonly metrics?: Metrics;
  /** Fetches client ID metadata documents (DESIGN.md §9); none: such client_ids are unknown. */
  readonly documents?: DocumentResolver;
  /** Where limiter counts are shared with the other workers (DESIGN.md §11); none: this process's alone. */
  readonly limiterLink?: LimiterLink;
}

export async function buildApp(options: BuildAppOptions): Promise<{ app: FastifyInstance; ctx: AppContext }> {
  const metrics = options.metrics ?? createMetrics({ processMetrics: false });
  const store = measuredStore(options.store, metrics);
  const clients = new ClientDirectory(options.config, store, options.documents);
  const ctx = makeContext(options.config, options.keys, clients, { now: options.now, limits: options.limits, metrics, limiterLink: options.limiterLink });
  const logger = options.logger ?? createLogger('silent');
  const trusted = proxyTrust(options.config.trustedProxies);
  const app = Fastify({
    loggerInstance: logger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: LIMITS.bodyBytes,
    // DESIGN.md §3: forwarded headers are believed from trusted_proxies only, in every tls mode.
    // Without trusted proxies Fastify's fast path applies: the socket address is the client.
    trustProxy: options.config.trustedProxies.length === 0 ? false : (address: string) => trusted(address),
    // The request id of a trusted proxy is kept (one id across the proxy's logs and ours); a client's never is.
    genReqId: (raw) => {
      const forwarded = raw.headers['x-request-id'];
      return typeof forwarded === 'string' && REQUEST_ID_SHAPE.test(forwarded) && trusted(raw.socket.remoteAddress) ? forwarded : randomUUID();
    },
    requestIdHeader: false,
    // A closing server answers what already reached it (DESIGN.md §11: a draining worker refuses no request); new
    // connections go to the other workers, and each answer closes its connection.
    return503OnClosing: false,
    clientErrorHandler: clientErrorHandler(options.config.basePath, logger),
    ...(options.https ? { https: options.https } : {}),
  }) as unknown as FastifyInstance;

  app.decorateRequest('clientId', undefined);
  app.decorateRequest('outcome', undefined);
  app.decorateRequest('audit', undefined);

  // Only form bodies are accepted (DESIGN.md §4): anything else is 415.
  app.removeAllContentTypeParsers();
  // The body is a Params map; formbody types it as a record, hence the cast.
  await app.register(formbody, { parser: parseParams as unknown as (text: string) => Record<string, unknown>, bodyLimit: LIMITS.bodyBytes });

  const recordRequest = requestRecorder(ctx.metrics);
  // One onResponse hook: the request metrics, then one access-log line per request, with chosen fields only
  // (DESIGN.md §10): never a query string, header or body, and a value taken from the request at most 256 characters long.
  app.addHook('onResponse', (request, reply, done) => {
    recordRequest(request, reply);
    const line = {
      method: request.method,
      path: bounded(request.url.split('?')[0]),
      status: reply.statusCode,
      ms: Math.round(reply.elapsedTime),
      // reqId comes from the request logger's bindings.
      address: request.ip,
      client_id: bounded(request.clientId),
      outcome: request.outcome ?? (reply.statusCode < 400 ? 'ok' : 'error'),
      // One line per request: an audited request's access line is its audit line.
      ...(request.audit !== undefined && { audit: true, ...request.audit }),
    };
    if (reply.statusCode >= 500) request.log.error(line, 'request');
    else request.log.info(line, 'request');
    done();
  });
  // One onRequest hook, callback style (no promise per request): every answer names its request, so an operator can
  // find its log lines (DESIGN.md §10), and CORS runs for the requests that carry an Origin (http/cors.ts).
  const cors = await corsHook(app, options.config.basePath, (origin) => ctx.clients.isClientOrigin(origin));
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('X-Request-Id', request.id);
    // What @fastify/cors sends without an Origin: the answer differs by Origin, so caches must key on it.
    if (request.headers.origin === undefined) {
      reply.header('Vary', 'Origin');
      done();
    } else cors(request, reply, done);
  });

  // RFC 6797: an https issuer tells browsers to use nothing else for a year.
  if (options.config.baseUrl.startsWith('https:')) {
    app.addHook('onSend', async (_request, reply) => {
      reply.header('Strict-Transport-Security', 'max-age=31536000');
    });
  }

  app.setErrorHandler(async (error, request, reply) => {
    const oauthError = toOAuthError(error, request);
    // Malformed requests (bad bodies, NUL bytes, ...) are failures of their address too (DESIGN.md §4).
    countFailure(ctx.failures, request.ip, undefined, oauthError.status, ctx.now());
    if (request.routeOptions.config?.page === true) return sendErrorPage(reply, oauthError);
    return sendJsonError(reply, oauthError);
  });
  app.setNotFoundHandler(async (request, reply) => {
    const path = request.url.split('?')[0] ?? '';
    // RFC 9110 §15.5.6: a path that exists under other methods answers 405 with the methods it has.
    const allowed = ROUTED_METHODS.filter((method) => app.hasRoute({ method, url: path }));
    if (allowed.length > 0) reply.header('Allow', allowed.join(', '));
    const refusal =
      allowed.length > 0
        ? new OAuthError('invalid_request', `${request.method} is not allowed here; use ${allowed.join(' or ')}`, 405)
        : new OAuthError('not_found', 'no such endpoint', 404);
    // DESIGN.md §4: a browser asking for a page gets the HTML error page.
    if (!isApiPath(path, options.config.basePath) && /\btext\/html\b/.test(request.headers.accept ?? '')) return sendErrorPage(reply, refusal);
    return sendJsonError(reply, refusal);
  });

  // RFC 8414 §3.1 copies of the metadata live outside the prefix.
  await app.register(wellKnownAtRoot(ctx));
  await app.register(
    async (scoped) => {
      await scoped.register(metadataRoutes(ctx));
      // Each plugin gets the narrow part of the store it uses (its parameter type says which).
      await scoped.register(healthRoutes(store));
      await scoped.register(authorizeRoutes(ctx, store));
      await scoped.register(loginRoutes(ctx, store));
      await scoped.register(tokenRoutes(ctx, store));
      await scoped.register(userinfoRoutes(ctx, store));
      await scoped.register(deviceAuthorizationRoutes(ctx, store));
      await scoped.register(devicePageRoutes(ctx, store));
      await scoped.register(federationRoutes(ctx, store));
      await scoped.register(consentRoutes(ctx, store));
      await scoped.register(logoutRoutes(ctx, store));
      await scoped.register(revocationRoutes(ctx, store));
      await scoped.register(introspectionRoutes(ctx, store));
      await scoped.register(registrationRoutes(ctx, store));
    },
    { prefix: ctx.config.basePath },
  );
  return { app, ctx };
}

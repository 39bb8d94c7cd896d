/**
 * Prometheus metrics (DESIGN.md §10) with prom-client, one registry per app (tests build many apps). Served on
 * the `metrics.listen` address only, never on the main listener (server.ts).
 */
import { createServer, type Server } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export interface Metrics {
  readonly registry: Registry;
  readonly tokensIssued: Counter<'grant_type'>;
  readonly oauthErrors: Counter<'code'>;
  readonly refreshReuse: Counter;
  readonly storeOperations: Histogram<'operation'>;
}

/** Seconds: request and store latencies of an authorization server sit between 0.1 ms and a few seconds. */
const BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

export function createMetrics(options: { processMetrics: boolean }): Metrics {
  const registry = new Registry();
  if (options.processMetrics) collectDefaultMetrics({ register: registry });
  return {
    registry,
    tokensIssued: new Counter({ name: 'pinpoint_tokens_issued_total', help: 'Access tokens issued, by grant type', labelNames: ['grant_type'], registers: [registry] }),
    oauthErrors: new Counter({ name: 'pinpoint_oauth_errors_total', help: 'OAuth error answers, by error code', labelNames: ['code'], registers: [registry] }),
    refreshReuse: new Counter({ name: 'pinpoint_refresh_reuse_detected_total', help: 'Replayed codes and rotated refresh tokens that revoked their grant', registers: [registry] }),
    storeOperations: new Histogram({
      name: 'pinpoint_store_operation_duration_seconds',
      help: 'State store operations, by operation',
      labelNames: ['operation'],
      buckets: BUCKETS,
      registers: [registry],
    }),
  };
}

/** The error codes of the OAuth registries (RFC 6749, 6750, 7591, 8628, 8707, OpenID Connect) this server answers. */
const OAUTH_ERROR_CODES = new Set([
  'invalid_request', 'invalid_client', 'invalid_grant', 'unauthorized_client', 'unsupported_grant_type', 'invalid_scope',
  'unsupported_response_type', 'access_denied', 'server_error', 'temporarily_unavailable', 'invalid_target', 'invalid_token',
  'authorization_pending', 'slow_down', 'expired_token', 'invalid_redirect_uri', 'invalid_client_metadata', 'login_required',
  'consent_required', 'interaction_required',
]);

/** What the access hook records of one answered request. */
export type RequestRecorder = (request: FastifyRequest, reply: FastifyReply) => void;

/** Requests by route and status, and a duration histogram per route; the route is the pattern, so labels stay few. */
export function requestRecorder(metrics: Metrics): RequestRecorder {
  const requests = new Counter({
    name: 'pinpoint_http_requests_total',
    help: 'HTTP requests, by route and status',
    labelNames: ['method', 'route', 'status'],
    registers: [metrics.registry],
  });
  const duration = new Histogram({
    name: 'pinpoint_http_request_duration_seconds',
    help: 'HTTP request duration, by route',
    labelNames: ['route'],
    buckets: BUCKETS,
    registers: [metrics.registry],
  });
  return (request, reply) => {
    const route = request.routeOptions.url ?? 'unknown';
    requests.inc({ method: request.method, route, status: String(reply.statusCode) });
    duration.observe({ route }, reply.elapsedTime / 1000);
    const outcome = request.outcome;
    // Page outcomes (a wrong password, a 404) are not OAuth errors; the request counter has them by status.
    if (reply.statusCode >= 400 && outcome !== undefined && OAUTH_ERROR_CODES.has(outcome)) metrics.oauthErrors.inc({ code: outcome });
  };
}

/** GET /metrics in Prometheus text on `listen`, and nothing else. */
export async function serveMetrics(metrics: Metrics, listen: { readonly host: string; readonly port: number }): Promise<Server> {
  const server = createServer((request, response) => {
    if (request.method !== 'GET' || request.url?.split('?')[0] !== '/metrics') {
      response.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
      return;
    }
    metrics.registry.metrics().then(
      (text) => response.writeHead(200, { 'content-type': metrics.registry.contentType, 'cache-control': 'no-store' }).end(text),
      () => response.writeHead(500).end(),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(listen.port, listen.host, resolve);
  });
  return server;
}

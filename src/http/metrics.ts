/**
 * Prometheus metrics (DESIGN.md §10) with prom-client, one registry per app (tests build many apps). Served on
 * the `metrics.listen` address only, never on the main listener: by the primary, which sums its workers' figures
 * (DESIGN.md §11, prom-client's cluster aggregation).
 */
import type { Worker } from 'node:cluster';
import { createServer, type Server } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { AggregatorRegistry, Counter, Histogram, Registry, collectDefaultMetrics, type MetricObjectWithValues, type MetricValue } from 'prom-client';

export interface Metrics {
  readonly registry: Registry;
  readonly tokensIssued: Counter<'grant_type'>;
  readonly oauthErrors: Counter<'code'>;
  readonly refreshReuse: Counter;
  readonly storeOperations: Histogram<'operation'>;
  readonly connectionsRefused: Counter;
}

/** Seconds: request and store latencies of an authorization server sit between 0.1 ms and a few seconds. */
const BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/**
 * `processMetrics`: prom-client's default metrics (memory, CPU, event-loop lag...). `worker` labels them: they are
 * figures of one process, kept apart per worker when the primary sums the rest (DESIGN.md §11).
 */
export function createMetrics(options: { processMetrics: boolean; worker?: string }): Metrics {
  const registry = options.processMetrics ? processRegistry(options.worker) : new Registry();
  return {
    registry,
    tokensIssued: new Counter({ name: 'pinpoint_tokens_issued_total', help: 'Access tokens issued, by grant type', labelNames: ['grant_type'], registers: [registry] }),
    oauthErrors: new Counter({ name: 'pinpoint_oauth_errors_total', help: 'OAuth error answers, by error code', labelNames: ['code'], registers: [registry] }),
    refreshReuse: new Counter({ name: 'pinpoint_refresh_reuse_detected_total', help: 'Replayed codes and rotated refresh tokens that revoked their grant', registers: [registry] }),
    connectionsRefused: new Counter({
      name: 'pinpoint_connections_refused_total',
      help: 'Connections closed at once because their address held limits.address_connections open',
      registers: [registry],
    }),
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
  'consent_required', 'interaction_required', 'invalid_dpop_proof', 'invalid_request_uri', 'request_not_supported',
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

/** A registry holding the default process metrics, labelled `worker` when given. */
export function processRegistry(worker?: string): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, ...(worker !== undefined && { labels: { worker } }) });
  return registry;
}

/** What the metrics listener serves: Prometheus text and its content type. */
export type MetricsText = Pick<Registry, 'metrics' | 'contentType'>;

/** GET /metrics in Prometheus text on `listen`, and nothing else. */
export async function serveMetrics(metrics: { readonly registry: MetricsText }, listen: { readonly host: string; readonly port: number }): Promise<Server> {
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

/** A worker's answer to the primary's request for its figures. */
interface MetricsMessage {
  readonly pinpoint: 'metrics';
  readonly id: number;
  /** Absent in the primary's request; the worker's registry as JSON in its answer. */
  readonly metrics?: MetricObjectWithValues<MetricValue<string>>[];
}

const isMetricsMessage = (message: unknown): message is MetricsMessage =>
  typeof message === 'object' && message !== null && (message as { pinpoint?: unknown }).pinpoint === 'metrics';

/** How long the primary waits for a worker's figures; a worker that is busy or dying is left out of that scrape. */
const WORKER_ANSWER_MS = 2000;

/** In a worker: answers the primary's requests with this process's figures. */
export function answerMetricsRequests(registry: Registry): void {
  process.on('message', (message: unknown) => {
    if (!isMetricsMessage(message) || message.metrics !== undefined) return;
    void registry.getMetricsAsJSON().then((metrics) => {
      // A worker whose channel closed (it is stopping) has nothing to answer.
      if (process.connected) process.send?.({ pinpoint: 'metrics', id: message.id, metrics } satisfies MetricsMessage, undefined, {}, () => undefined);
    });
  });
}

/** One series of a metric as getMetricsAsJSON answers it (a histogram's carry metricName: _bucket, _sum, _count). */
interface SeriesJson {
  readonly value: number;
  readonly labels: Readonly<Record<string, string | number>>;
  readonly metricName?: string;
}

/** A metric as getMetricsAsJSON answers it and AggregatorRegistry.aggregate takes it (prom-client's types ask for more). */
interface MetricJson {
  readonly name: string;
  readonly help: string;
  readonly type: string;
  readonly aggregator: string;
  readonly values: readonly SeriesJson[];
}

/** A worker the primary asks for its figures; `current` is false for one draining after its slot got a new worker. */
export interface MetricsSource {
  readonly worker: Worker;
  readonly current: boolean;
}

/** A per-process figure: labelled with its worker (DESIGN.md §11), one series per process, not part of any sum. */
const isPerProcess = (value: SeriesJson): boolean => value.labels.worker !== undefined;

/**
 * A draining worker's answer without its per-process figures: its slot's new worker reports them under the same
 * `worker` label, and the two would be added up (an audit saw a slot's memory doubled during a reload).
 */
function withoutPerProcess(answer: readonly MetricJson[]): MetricJson[] {
  return answer.flatMap((metric) => {
    const values = metric.values.filter((value) => !isPerProcess(value));
    return values.length === 0 ? [] : [{ ...metric, values }];
  });
}

/** One summed series of a counter or histogram: what it was last reported as, and what is added to keep it from going down. */
interface HeldSeries {
  readonly metric: Pick<MetricJson, 'name' | 'help' | 'type' | 'aggregator'>;
  readonly labels: SeriesJson['labels'];
  readonly metricName: string | undefined;
  reported: number;
  carried: number;
}

const seriesKey = (name: string, value: SeriesJson): string =>
  `${value.metricName ?? name}\u0000${JSON.stringify(Object.entries(value.labels).sort(([a], [b]) => (a < b ? -1 : 1)))}`;

/**
 * Keeps the summed counters and histograms from going down when a worker's figures leave the sum (it died, or it
 * drained after a reload): Prometheus reads any drop as a reset, and rate() as a burst of everything the other
 * workers counted. What the gone worker counted is carried on as of the last scrape that reached it.
 */
export class CarriedSums {
  readonly #series = new Map<string, HeldSeries>();

  /** `answers` and one more answer: what each summed series needs added so it is never below its last report. */
  carry(answers: readonly (readonly MetricJson[])[]): MetricJson[][] {
    const sums = new Map<string, { metric: MetricJson; value: SeriesJson; sum: number }>();
    for (const answer of answers) {
      for (const metric of answer) {
        if ((metric.type !== 'counter' && metric.type !== 'histogram') || metric.aggregator !== 'sum') continue;
        for (const value of metric.values) {
          if (isPerProcess(value)) continue;
          const key = seriesKey(metric.name, value);
          const summed = sums.get(key);
          if (summed === undefined) sums.set(key, { metric, value, sum: value.value });
          else summed.sum += value.value;
        }
      }
    }
    for (const [key, { metric: { name, help, type, aggregator }, value }] of sums) {
      if (!this.#series.has(key)) this.#series.set(key, { metric: { name, help, type, aggregator }, labels: value.labels, metricName: value.metricName, reported: 0, carried: 0 });
    }
    const carriedAnswer = new Map<string, MetricJson>();
    for (const [key, series] of this.#series) {
      const sum = sums.get(key)?.sum ?? 0;
      series.carried = Math.max(series.carried, series.reported - sum);
      series.reported = sum + series.carried;
      if (series.carried === 0) continue;
      const metric = carriedAnswer.get(series.metric.name) ?? { ...series.metric, values: [] };
      (metric.values as SeriesJson[]).push({ labels: series.labels, value: series.carried, ...(series.metricName !== undefined && { metricName: series.metricName }) });
      carriedAnswer.set(series.metric.name, metric);
    }
    return [...answers.map((answer) => [...answer]), [...carriedAnswer.values()]];
  }
}

/**
 * In the primary: the sum over `workers` (and the primary's own process figures) with prom-client's cluster
 * aggregation: counters and histograms add up, and never go down when a worker leaves (CarriedSums); labelled
 * per-process figures stay one series per worker, from the worker that holds its slot now.
 */
export function clusterMetrics(own: Registry, workers: () => Iterable<MetricsSource>): MetricsText {
  const carried = new CarriedSums();
  let nextId = 0;
  const ask = (worker: Worker, id: number): Promise<MetricObjectWithValues<MetricValue<string>>[]> =>
    new Promise((resolve) => {
      const done = (metrics: MetricObjectWithValues<MetricValue<string>>[]): void => {
        clearTimeout(timer);
        worker.off('message', onMessage);
        worker.off('exit', onExit);
        resolve(metrics);
      };
      const onMessage = (message: unknown): void => {
        if (isMetricsMessage(message) && message.id === id && message.metrics !== undefined) done(message.metrics);
      };
      const onExit = (): void => done([]);
      const timer = setTimeout(() => done([]), WORKER_ANSWER_MS);
      worker.on('message', onMessage);
      worker.on('exit', onExit);
      worker.send({ pinpoint: 'metrics', id } satisfies MetricsMessage, undefined, () => undefined);
    });
  return {
    contentType: own.contentType,
    async metrics(): Promise<string> {
      const id = nextId++;
      const answers = await Promise.all([
        own.getMetricsAsJSON(),
        ...[...workers()].map(async ({ worker, current }) => {
          const answer = await ask(worker, id);
          return current ? answer : withoutPerProcess(answer as unknown as MetricJson[]);
        }),
      ]);
      const summed = carried.carry(answers as unknown as MetricJson[][]);
      return AggregatorRegistry.aggregate(summed as unknown as Parameters<typeof AggregatorRegistry.aggregate>[0]).metrics();
    },
  };
}

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

/** The primary's request for a worker's figures, and the worker's answer. */
interface MetricsMessage {
  readonly pinpoint: 'metrics';
  /** The request's number, repeated in its answer; absent from the last figures a stopping worker sends unasked. */
  readonly id?: number;
  /** Absent in the primary's request; the worker's registry as JSON in its answer. */
  readonly metrics?: MetricObjectWithValues<MetricValue<string>>[];
}

const isMetricsMessage = (message: unknown): message is MetricsMessage =>
  typeof message === 'object' && message !== null && (message as { pinpoint?: unknown }).pinpoint === 'metrics';

/** How long a scrape waits for a worker's figures; one that answers later counts with its last answer meanwhile. */
const WORKER_ANSWER_MS = 2000;

/**
 * How often the primary takes every worker's figures besides the scrapes, while metrics.listen is open: a worker
 * that crashes loses what it counted since, at most this long. Each time costs a worker about 0.5 ms of CPU (measured,
 * with the process figures: about 50 KB of JSON).
 */
export const COLLECT_EVERY_MS = 10_000;

/** A worker's side of the primary's metrics. */
export interface FiguresForPrimary {
  /** Sends this process's figures unasked (a stopping worker, its last request answered); resolves once written. */
  sendLast(): Promise<void>;
}

/** In a worker: answers the primary's requests with this process's figures, in the order asked. */
export function answerMetricsRequests(registry: Registry): FiguresForPrimary {
  let sent = Promise.resolve();
  // One after another: the primary keeps the figures it received last, so they must be the ones taken last.
  const send = (id: number | undefined): Promise<void> =>
    (sent = sent
      .then(async () => {
        const metrics = await registry.getMetricsAsJSON();
        // A worker whose channel closed has nobody to tell.
        if (!process.connected || process.send === undefined) return;
        const message: MetricsMessage = { pinpoint: 'metrics', ...(id !== undefined && { id }), metrics };
        await new Promise<void>((resolve) => process.send?.(message, undefined, {}, () => resolve()));
      })
      .catch(() => undefined));
  process.on('message', (message: unknown) => {
    if (isMetricsMessage(message) && message.metrics === undefined) void send(message.id);
  });
  return { sendLast: () => send(undefined) };
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
 * workers counted. What the gone worker counted is carried on as of the last sum that had its figures.
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

/** A scrape waiting for a worker's answer to its request `id`. */
interface Waiter {
  readonly id: number;
  readonly done: () => void;
}

/**
 * In the primary: what metrics.listen serves (DESIGN.md §11), its own process figures and the sum over its workers
 * with prom-client's cluster aggregation. Each worker's latest figures are kept by worker: one that answers a scrape
 * late counts with its last figures, never twice; one that has exited (died, or drained and sent its last figures)
 * is carried for good (CarriedSums). Labelled per-process figures stay one series per worker, from the worker that
 * holds its slot now.
 */
export class ClusterMetrics implements MetricsText {
  readonly contentType: MetricsText['contentType'];
  readonly #own: Registry;
  readonly #sources: () => Iterable<MetricsSource>;
  /** The last figures received of each worker that has not left, by cluster worker id. */
  readonly #latest = new Map<number, MetricJson[]>();
  readonly #waiting = new Map<number, Set<Waiter>>();
  readonly #carried = new CarriedSums();
  #lastId = 0;

  /** `sources`: the workers serving now (a draining one included), asked at each scrape. */
  constructor(own: Registry, sources: () => Iterable<MetricsSource>) {
    this.contentType = own.contentType;
    this.#own = own;
    this.#sources = sources;
  }

  /** Takes `message` from `worker` when it is its figures (an answer, or its last as it stops); false when it is not. */
  received(worker: Worker, message: unknown): boolean {
    if (!isMetricsMessage(message) || message.metrics === undefined) return false;
    // A worker sends its figures in the order it took them, over one channel: the last received are the newest.
    this.#latest.set(worker.id, message.metrics as unknown as MetricJson[]);
    for (const waiter of this.#waiting.get(worker.id) ?? []) if (message.id === undefined || waiter.id <= message.id) waiter.done();
    return true;
  }

  /** `worker` has exited and its channel is closed, so no figures of it are still on their way: they are carried for good. */
  left(worker: Worker): void {
    for (const waiter of this.#waiting.get(worker.id) ?? []) waiter.done();
    const last = this.#latest.get(worker.id);
    if (last === undefined) return;
    this.#latest.delete(worker.id);
    const others = [...this.#latest.values()];
    // The sum with its last figures, then without them, the others' held still: exactly what it counted is carried.
    this.#carried.carry([...others, last]);
    this.#carried.carry(others);
  }

  /** Asks every worker for its figures, waiting for none: a scrape that finds one busy counts it with these. */
  collect(): void {
    const id = ++this.#lastId;
    for (const { worker } of this.#sources()) ask(worker, id);
  }

  async metrics(): Promise<string> {
    const id = ++this.#lastId;
    const sources = [...this.#sources()];
    await Promise.all(sources.map(({ worker }) => this.#answered(worker, id)));
    const own = (await this.#own.getMetricsAsJSON()) as unknown as MetricJson[];
    const current = new Set(sources.filter((source) => source.current).map((source) => source.worker.id));
    const answers = [...this.#latest].map(([worker, answer]) => (current.has(worker) ? answer : withoutPerProcess(answer)));
    const summed = [own, ...this.#carried.carry(answers)];
    return AggregatorRegistry.aggregate(summed as unknown as Parameters<typeof AggregatorRegistry.aggregate>[0]).metrics();
  }

  /** Asks `worker` for its figures; resolves once it answered this request (or a later one), or after WORKER_ANSWER_MS. */
  #answered(worker: Worker, id: number): Promise<void> {
    if (!worker.isConnected()) return Promise.resolve();
    return new Promise((resolve) => {
      const waiting = this.#waiting.get(worker.id) ?? new Set<Waiter>();
      this.#waiting.set(worker.id, waiting);
      const waiter: Waiter = {
        id,
        done: () => {
          clearTimeout(timer);
          waiting.delete(waiter);
          if (waiting.size === 0 && this.#waiting.get(worker.id) === waiting) this.#waiting.delete(worker.id);
          resolve();
        },
      };
      const timer = setTimeout(waiter.done, WORKER_ANSWER_MS);
      waiting.add(waiter);
      ask(worker, id);
    });
  }
}

/** Sends the primary's request number `id` to `worker`, unless its channel is closed. */
function ask(worker: Worker, id: number): void {
  if (worker.isConnected()) worker.send({ pinpoint: 'metrics', id } satisfies MetricsMessage, undefined, () => undefined);
}

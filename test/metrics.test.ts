/** DESIGN.md §4, §10: Prometheus text on its own listener, scraped and parsed; never on the main listener. */
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { AggregatorRegistry, Counter, Histogram, Registry } from 'prom-client';
import { CarriedSums, createMetrics, serveMetrics } from '../src/http/metrics.js';
import { basic, exchangeCode, postToken, refresh, SECRET, signInForCode, testApp, type TestApp } from './helpers/app.js';

/** Prometheus text exposition: `name{label="value",...} number` per sample line. */
function parse(text: string): { name: string; labels: Record<string, string>; value: number }[] {
  return text
    .split('\n')
    .filter((line) => line !== '' && !line.startsWith('#'))
    .map((line) => {
      const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
      assert.ok(match, `a valid sample line: ${line}`);
      const labels = Object.fromEntries([...(match[2] ?? '').matchAll(/([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1], m[2]]));
      return { name: match[1] as string, labels: labels as Record<string, string>, value: Number(match[3]) };
    });
}

describe('/metrics', () => {
  let t: TestApp;
  let server: Awaited<ReturnType<typeof serveMetrics>>;
  let url: string;
  before(async () => {
    const metrics = createMetrics({ processMetrics: true });
    t = await testApp({ metrics });
    server = await serveMetrics(metrics, { host: '127.0.0.1', port: 0 });
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`;
  });
  after(async () => {
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await t.app.close();
  });

  test('requests, durations, tokens by grant type, OAuth errors, reuse detections, store latency, process metrics', async () => {
    assert.equal((await postToken(t.app, [['grant_type', 'client_credentials']], basic('service', SECRET))).statusCode, 200);
    assert.equal((await postToken(t.app, [['grant_type', 'client_credentials']], basic('service', 'wrong'))).statusCode, 401);
    const first = (await exchangeCode(t.app, await signInForCode(t.app))).json().refresh_token as string;
    assert.equal((await refresh(t.app, first)).statusCode, 200);
    assert.equal((await refresh(t.app, first)).statusCode, 400, 'reuse');
    assert.equal((await t.app.inject({ url: '/no-such-endpoint' })).statusCode, 404);

    const response = await fetch(url);
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type') ?? '', /^text\/plain/);
    const samples = parse(await response.text());
    const value = (name: string, labels: Record<string, string> = {}): number =>
      samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)).reduce((sum, s) => sum + s.value, 0);

    assert.equal(value('pinpoint_tokens_issued_total', { grant_type: 'client_credentials' }), 1);
    assert.equal(value('pinpoint_tokens_issued_total', { grant_type: 'authorization_code' }), 1);
    assert.equal(value('pinpoint_tokens_issued_total', { grant_type: 'refresh_token' }), 1);
    assert.equal(value('pinpoint_oauth_errors_total', { code: 'invalid_client' }), 1);
    assert.equal(value('pinpoint_oauth_errors_total', { code: 'invalid_grant' }), 1);
    assert.equal(value('pinpoint_oauth_errors_total'), 2, 'a 404 is no OAuth error');
    assert.equal(value('pinpoint_refresh_reuse_detected_total'), 1);
    assert.ok(value('pinpoint_http_requests_total', { route: '/token', status: '200' }) >= 3);
    assert.ok(value('pinpoint_http_request_duration_seconds_count', { route: '/token' }) >= 5);
    assert.ok(value('pinpoint_store_operation_duration_seconds_count', { operation: 'rotateRefreshToken' }) >= 1);
    assert.ok(samples.some((s) => s.name === 'process_cpu_user_seconds_total'), 'the default process metrics');
  });

  test('the main listener has no /metrics', async () => {
    assert.equal((await t.app.inject({ url: '/metrics' })).statusCode, 404);
    assert.equal((await fetch(url.replace('/metrics', '/other'))).status, 404);
  });
});

describe('summed over workers, counters and histograms never go down (CarriedSums, DESIGN.md §11)', () => {
  /** One worker's registry: a counter by route, a histogram, and a per-process counter labelled with the worker. */
  function workerRegistry(): { registry: Registry; requests: Counter<'route'>; durations: Histogram; cpu: Counter<'worker'> } {
    const registry = new Registry();
    return {
      registry,
      requests: new Counter({ name: 'requests_total', help: 'h', labelNames: ['route'], registers: [registry] }),
      durations: new Histogram({ name: 'duration_seconds', help: 'h', buckets: [0.1, 1], registers: [registry] }),
      cpu: new Counter({ name: 'cpu_seconds_total', help: 'h', labelNames: ['worker'], registers: [registry] }),
    };
  }
  const carried = new CarriedSums();
  /** What the primary would serve for these workers' answers, parsed. */
  async function scrape(...workers: Registry[]): Promise<ReturnType<typeof parse>> {
    const answers = await Promise.all(workers.map((registry) => registry.getMetricsAsJSON()));
    const summed = carried.carry(answers as unknown as Parameters<CarriedSums['carry']>[0]);
    return parse(await AggregatorRegistry.aggregate(summed as unknown as Parameters<typeof AggregatorRegistry.aggregate>[0]).metrics());
  }
  const sample = (samples: ReturnType<typeof parse>, name: string, labels: Record<string, string> = {}): number | undefined =>
    samples.find((entry) => entry.name === name && Object.entries(labels).every(([key, value]) => entry.labels[key] === value))?.value;

  test('a worker that leaves keeps its counts in the sum; the others add to it; per-process series are not carried', async () => {
    const first = workerRegistry();
    const second = workerRegistry();
    first.requests.inc({ route: '/token' }, 3);
    second.requests.inc({ route: '/token' }, 5);
    second.requests.inc({ route: '/jwks' }, 2);
    first.durations.observe(0.05);
    second.durations.observe(0.5);
    second.cpu.inc({ worker: '1' }, 7);
    const both = await scrape(first.registry, second.registry);
    assert.equal(sample(both, 'requests_total', { route: '/token' }), 8);
    assert.equal(sample(both, 'duration_seconds_count'), 2);
    assert.equal(sample(both, 'cpu_seconds_total', { worker: '1' }), 7);

    // The second worker dies: its counts stay, including a series only it had.
    const alone = await scrape(first.registry);
    assert.equal(sample(alone, 'requests_total', { route: '/token' }), 8);
    assert.equal(sample(alone, 'requests_total', { route: '/jwks' }), 2);
    assert.equal(sample(alone, 'duration_seconds_count'), 2);
    assert.equal(sample(alone, 'duration_seconds_bucket', { le: '1' }), 2);
    assert.equal(sample(alone, 'cpu_seconds_total', { worker: '1' }), undefined, "a gone process's own figures are gone");

    // Its replacement starts from zero; every count goes on from where it was.
    const replacement = workerRegistry();
    first.requests.inc({ route: '/token' });
    replacement.requests.inc({ route: '/token' }, 4);
    replacement.durations.observe(2);
    const later = await scrape(first.registry, replacement.registry);
    assert.equal(sample(later, 'requests_total', { route: '/token' }), 13);
    assert.equal(sample(later, 'requests_total', { route: '/jwks' }), 2);
    assert.equal(sample(later, 'duration_seconds_count'), 3);
    assert.equal(sample(later, 'duration_seconds_bucket', { le: '+Inf' }), 3);
  });
});

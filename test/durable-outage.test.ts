/**
 * DESIGN.md §7: while PostgreSQL is unreachable a running `pinpoint serve` answers 503
 * `temporarily_unavailable` (JSON, no stack) and /readyz fails; once it is back the same process
 * serves again, and the refused request wrote nothing. The outage is a TCP relay in this test
 * that is cut and restored, so the machine's PostgreSQL keeps running.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { claimsOf } from './helpers/app.js';
import {
  API,
  createDeployment,
  createTestDatabase,
  killAll,
  refreshAt,
  removeDeployment,
  signInForTokens,
  startPinpoint,
  type Deployment,
  type PinpointProcess,
  type TestDatabase,
} from './helpers/process.js';
import { startRelay, type Relay } from './helpers/relay.js';

const POSTGRES_URL = process.env['PINPOINT_TEST_POSTGRES_URL'];

async function get(url: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const response = await fetch(url, { signal: AbortSignal.timeout(10_000) });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

if (POSTGRES_URL === undefined) {
  test('PostgreSQL outage of a running server', (t) => {
    t.skip('PINPOINT_TEST_POSTGRES_URL not set: set it (e.g. postgres://postgres@127.0.0.1:5432/test) to cut and restore PostgreSQL under a running server');
  });
} else {
  const adminUrl = POSTGRES_URL;
  let database: TestDatabase | undefined;
  let relay: Relay | undefined;
  let deployment: Deployment | undefined;
  let server: PinpointProcess | undefined;

  after(async () => {
    await killAll();
    await relay?.stop();
    await removeDeployment(deployment);
    await database?.drop();
  });

  test('PostgreSQL outage: 503 temporarily_unavailable and /readyz 503 while cut, serving again without a restart', async () => {
    database = await createTestDatabase(adminUrl, 'pinpoint_outage');
    relay = await startRelay(database.url);
    deployment = await createDeployment({ state: { url: relay.urlFor(database.url) } });
    server = await startPinpoint(deployment);
    const base = server.baseUrl;
    const tokens = await signInForTokens(base, { resources: [API] });

    await relay.stop();
    const cutAt = Date.now();
    const notReady = await get(`${base}/readyz`);
    assert.equal(notReady.status, 503);
    assert.equal((await get(`${base}/healthz`)).status, 200, 'the process itself is alive');

    const refused = await refreshAt(base, tokens.refresh_token);
    assert.equal(refused.status, 503, refused.text);
    assert.match(refused.headers.get('content-type') ?? '', /^application\/json/);
    assert.deepEqual(Object.keys(refused.body).sort(), ['error', 'error_description']);
    assert.equal(refused.body['error'], 'temporarily_unavailable');
    assert.doesNotMatch(refused.text, /stack|\bat .+:\d+|\.[jt]s:\d+|ECONN|postgres/i, 'no stack trace nor internals in the body');
    assert.equal(refused.headers.get('cache-control'), 'no-store');
    assert.ok(Date.now() - cutAt < 6000, `the outage was answered quickly (${Date.now() - cutAt} ms), not hung`);

    await relay.start();
    const deadline = Date.now() + 15_000;
    let ready = await get(`${base}/readyz`);
    while (ready.status !== 200 && Date.now() < deadline) {
      await sleep(100);
      ready = await get(`${base}/readyz`);
    }
    assert.equal(ready.status, 200, 'ready again once PostgreSQL is reachable');
    assert.ok(!server.hasExited, 'the same process recovered; nobody restarted it');

    // The refused refresh touched nothing: the same token rotates now, once.
    const recovered = await refreshAt(base, tokens.refresh_token);
    assert.equal(recovered.status, 200, recovered.text);
    assert.equal(claimsOf(recovered.body['access_token'] as string)['aud'], API);
    const next = await refreshAt(base, recovered.body['refresh_token'] as string);
    assert.equal(next.status, 200, next.text);

    const exit = await server.stop('SIGTERM');
    assert.equal(exit.code, 0, server.output);
    assert.ok(
      server.logs.some((record) => record['msg'] === 'state store unavailable' && record['level'] === 50),
      'the outage is logged as an error',
    );
    for (const secret of [tokens.refresh_token, tokens.access_token, recovered.body['refresh_token'] as string]) {
      assert.ok(!server.output.includes(secret), 'no log line holds a token');
    }
  });
}

/** DESIGN.md §2, §10: `pinpoint serve` prints its start line, every warning and each access line at once, not when the log buffer fills. */
import assert from 'node:assert/strict';
import { chmod, readFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createDeployment, removeDeployment, startPinpoint, type Deployment, type PinpointProcess } from './helpers/process.js';

describe('pinpoint serve at start', () => {
  let deployment: Deployment | undefined;
  let server: PinpointProcess | undefined;
  after(async () => {
    await server?.stop();
    await removeDeployment(deployment);
  });

  test('version, issuer, listen address, state store and key ids, and the warnings, while the server runs', async () => {
    deployment = await createDeployment({ state: { path: 'data/pinpoint.db' } });
    // A secret file others can read earns a warning (DESIGN.md §3).
    await chmod(join(deployment.folder, 'secrets', 'webapp'), 0o644);
    server = await startPinpoint(deployment);
    // Ready answers before the last start line is read from the pipe; the lines must come without more traffic.
    for (let i = 0; i < 50 && !server.logs.some((record) => record.msg === 'pinpoint is serving'); i++) await sleep(20);
    const start = server.logs.find((record) => record.msg === 'pinpoint is serving');
    assert.ok(start, `the start line is printed while the server runs:\n${server.output}`);
    const { version } = JSON.parse(await readFile(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };
    assert.equal(start.version, version);
    assert.equal(start.issuer, deployment.baseUrl);
    assert.equal(start.listen, `127.0.0.1:${deployment.port}`);
    assert.match(String(start.state), /^sqlite .*pinpoint\.db$/);
    assert.ok(Array.isArray(start.keys) && start.keys.length >= 2 && (start.keys as unknown[]).every((kid) => typeof kid === 'string'));
    assert.ok(
      server.logs.some((record) => record.level === 40 && /accessible by group or others/.test(String(record.msg))),
      `the warning is printed at once:\n${server.output}`,
    );
    assert.equal(server.hasExited, false);
  });

  test('at log_level "error" the start line and the warnings are printed all the same, and access lines are not', async () => {
    const quiet = await createDeployment({ state: { path: 'data/pinpoint.db' }, logLevel: 'error' });
    await chmod(join(quiet.folder, 'secrets', 'webapp'), 0o644);
    const quietServer = await startPinpoint(quiet);
    try {
      for (let i = 0; i < 50 && !quietServer.logs.some((record) => record.msg === 'pinpoint is serving'); i++) await sleep(20);
      assert.ok(quietServer.logs.some((record) => record.msg === 'pinpoint is serving'), `the start line:\n${quietServer.output}`);
      assert.ok(quietServer.logs.some((record) => record.level === 40 && /accessible by group or others/.test(String(record.msg))), quietServer.output);
      assert.equal((await fetch(`${quiet.baseUrl}/healthz`)).status, 200);
      await sleep(400);
      assert.ok(!quietServer.logs.some((record) => record.msg === 'request'), `no access line below "error":\n${quietServer.output}`);
    } finally {
      await quietServer.stop();
      await removeDeployment(quiet);
    }
  });

  test('a listen address in use: it says so and exits 1, leaving nothing open (no half-started server)', async () => {
    const busy = await createDeployment({ state: { path: 'data/pinpoint.db' } });
    const squatter = createServer();
    await new Promise<void>((resolve) => squatter.listen(busy.port, '127.0.0.1', resolve));
    try {
      await assert.rejects(startPinpoint(busy, { readyTimeoutMs: 15_000 }), (error: Error) => {
        assert.match(error.message, /exited \(1\) before it was ready/);
        assert.match(error.message, /EADDRINUSE/);
        return true;
      });
    } finally {
      squatter.close();
      await removeDeployment(busy);
    }
  });

  test('the access line of a lone request is written within a second, not when the log buffer fills', async () => {
    assert.ok(server, 'the server of the test before');
    const before = server.logs.length;
    const response = await fetch(`${deployment?.baseUrl}/healthz`);
    assert.equal(response.status, 200);
    const isLine = (record: Record<string, unknown>): boolean => record.msg === 'request' && record.path === '/healthz';
    for (let i = 0; i < 50 && !server.logs.slice(before).some(isLine); i++) await sleep(20);
    assert.ok(server.logs.slice(before).some(isLine), `the access line is written while no other request comes:\n${server.output}`);
  });
});

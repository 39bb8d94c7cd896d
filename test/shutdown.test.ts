/** Graceful shutdown: on SIGTERM, a request already in flight is answered, then the process exits 0. */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { freePort } from './helpers/process.js';
import { cliArgs } from './helpers/cli-command.js';


test('SIGTERM finishes the in-flight token request, refuses nothing already accepted, and exits 0', async () => {
  const folder = await mkdtemp(join(tmpdir(), 'pinpoint-shutdown-'));
  const port = await freePort();
  await writeFile(join(folder, 'svc.secret'), 'svc-secret\n', { mode: 0o600 });
  await writeFile(
    join(folder, 'config.hcl'),
    `base_url = "http://127.0.0.1:${port}"\nlisten = "127.0.0.1:${port}"\nclient "svc" {\n  secret_file = "svc.secret"\n  audience = ["https://api.example.org/"]\n}\n`,
  );
  const child = spawn(process.execPath, cliArgs('serve', '--config', join(folder, 'config.hcl')), { stdio: 'ignore' });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  try {
    for (let attempt = 0; attempt < 100; attempt += 1) {
      const ready = await fetch(`http://127.0.0.1:${port}/readyz`).then((r) => r.status === 200, () => false);
      if (ready) break;
      await sleep(100);
    }
    const body = 'grant_type=client_credentials';
    const socket = connect(port, '127.0.0.1');
    await new Promise((resolve) => socket.once('connect', resolve));
    let answer = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (answer += chunk));
    const ended = new Promise((resolve) => socket.once('close', resolve));
    // Headers and half the body: the request is in flight when the signal arrives.
    socket.write(
      `POST /token HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAuthorization: Basic ${Buffer.from('svc:svc-secret').toString('base64')}\r\n` +
        `Content-Type: application/x-www-form-urlencoded\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body.slice(0, 10)}`,
    );
    await sleep(200);
    child.kill('SIGTERM');
    await sleep(300);
    socket.write(body.slice(10));
    await Promise.race([ended, sleep(5000)]);
    assert.match(answer, /^HTTP\/1\.1 200 /, answer);
    assert.match(answer, /"access_token":"eyJ/);
    assert.equal(await Promise.race([exited, sleep(5000).then(() => 'still running')]), 0);
  } finally {
    child.kill('SIGKILL');
    await rm(folder, { recursive: true, force: true });
  }
});

/** tls mode "terminate": `pinpoint serve` answers HTTPS itself with the configured certificate and key. */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { freePort } from './helpers/process.js';
import { cliArgs } from './helpers/cli-command.js';

const folders: string[] = [];
after(async () => {
  for (const folder of folders) await rm(folder, { recursive: true, force: true });
});

function getJson(url: string, ca: Buffer): Promise<{ status: number; body: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { ca, timeout: 2000 }, (response) => {
      let text = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (text += chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body: JSON.parse(text) as Record<string, unknown> }));
    });
    req.on('error', reject);
    req.end();
  });
}

test('serve with tls terminate answers metadata over HTTPS, verified against the certificate', async (t) => {
  const folder = await mkdtemp(join(tmpdir(), 'pinpoint-tls-'));
  folders.push(folder);
  try {
    execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '1',
      '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1',
      '-keyout', join(folder, 'key.pem'), '-out', join(folder, 'cert.pem')], { stdio: 'ignore' });
  } catch {
    t.skip('openssl is not available to make a test certificate');
    return;
  }
  const port = await freePort();
  await writeFile(
    join(folder, 'config.hcl'),
    `base_url = "https://127.0.0.1:${port}"\nlisten = "127.0.0.1:${port}"\ntls {\n  mode = "terminate"\n  cert_file = "cert.pem"\n  key_file = "key.pem"\n}\n`,
  );
  const child = spawn(process.execPath, cliArgs('serve', '--config', join(folder, 'config.hcl')), { stdio: 'ignore' });
  try {
    const ca = await readFile(join(folder, 'cert.pem'));
    let answer: { status: number; body: Record<string, unknown> } | undefined;
    for (let attempt = 0; attempt < 100 && answer === undefined; attempt += 1) {
      answer = await getJson(`https://127.0.0.1:${port}/.well-known/oauth-authorization-server`, ca).catch(() => undefined);
      if (answer === undefined) await sleep(100);
    }
    assert.ok(answer, 'the server never answered over HTTPS');
    assert.equal(answer.status, 200);
    assert.equal(answer.body.issuer, `https://127.0.0.1:${port}`);
    assert.equal(answer.body.token_endpoint, `https://127.0.0.1:${port}/token`);
  } finally {
    child.kill('SIGTERM');
    await new Promise((resolve) => child.once('exit', resolve));
  }
});

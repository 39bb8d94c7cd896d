/** `pinpoint keys ...` and `pinpoint grants ...` (DESIGN.md §2) as subprocesses against a running server's SQLite file. */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { basic, form } from './helpers/app.js';
import { createDeployment, postToken, removeDeployment, SECRET, signInForTokens, startPinpoint, type Deployment, type PinpointProcess } from './helpers/process.js';
import { cliArgs } from './helpers/cli-command.js';


function run(args: readonly string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, cliArgs(...args), { env: { ...process.env, PINPOINT_CONFIG: '' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('pinpoint keys and grants on a SQLite file a server is using', () => {
  let deployment: Deployment;
  let server: PinpointProcess;
  before(async () => {
    deployment = await createDeployment({ state: { path: 'data/pinpoint.db' } });
    server = await startPinpoint(deployment);
  });
  after(async () => {
    await server?.stop();
    await removeDeployment(deployment);
  });
  const config = (): string[] => ['--config', deployment.configFile];

  /** POST /introspect as `webapp`: whether the server answers `token` active. */
  async function isActive(token: string): Promise<boolean> {
    const response = await fetch(new URL('/introspect', deployment.baseUrl), {
      method: 'POST',
      headers: { authorization: basic('webapp', SECRET), 'content-type': 'application/x-www-form-urlencoded' },
      body: form([['token', token]]),
    });
    assert.equal(response.status, 200);
    return ((await response.json()) as { active: boolean }).active;
  }

  test('grants list shows what alice holds; grants revoke --user ends her grants and sessions; her refresh token stops working', async () => {
    const tokens = await signInForTokens(deployment.baseUrl);
    // Asked twice before: the server remembers the grant's holding (store/remembered-holdings.ts) until another process commits.
    assert.equal(await isActive(tokens.access_token), true);
    assert.equal(await isActive(tokens.access_token), true);
    const listed = await run(['grants', 'list', '--user', 'alice', '--json', ...config()]);
    assert.equal(listed.code, 0, listed.stderr);
    const grants = JSON.parse(listed.stdout) as { id: string; user: string; client: string; scope: string; created: string; last_refresh?: string }[];
    assert.equal(grants.length, 1);
    assert.equal(grants[0]?.user, 'alice');
    assert.equal(grants[0]?.client, 'webapp');
    assert.equal(grants[0]?.scope, 'openid profile email');
    assert.ok(!listed.stdout.includes(tokens.refresh_token ?? 'none'), 'no token is printed');
    const human = await run(['grants', 'list', ...config()]);
    assert.match(human.stdout, /user alice {2}client webapp/);
    assert.match(human.stdout, /^1 grant$/m);

    const revoked = await run(['grants', 'revoke', '--user', 'alice', ...config()]);
    assert.equal(revoked.code, 0, revoked.stderr);
    assert.match(revoked.stdout, /^1 grant revoked$/m);
    assert.match(revoked.stdout, /^1 session ended$/m);
    // DESIGN.md §10: a revocation writes an audit line, the CLI's on stderr.
    const audits = revoked.stderr.split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line) as Record<string, unknown>);
    assert.equal(audits.length, 1, revoked.stderr);
    assert.deepEqual(
      [audits[0]?.audit, audits[0]?.event, audits[0]?.by, audits[0]?.user, audits[0]?.grants, audits[0]?.sessions],
      [true, 'revocation', 'cli', 'alice', 1, 1],
    );
    assert.equal(await isActive(tokens.access_token), false, "the CLI's revocation, made by another process, shows at once at /introspect");
    const refreshed = await postToken(deployment.baseUrl, [['grant_type', 'refresh_token'], ['refresh_token', tokens.refresh_token ?? '']]);
    assert.equal(refreshed.status, 400);
    assert.equal(refreshed.body.error, 'invalid_grant');
    const missing = await run(['grants', 'revoke', 'no-such-grant', ...config()]);
    assert.equal(missing.code, 1);
    assert.ok(!missing.stderr.includes('"audit":true'), 'nothing revoked, no audit line');
    const both = await run(['grants', 'revoke', 'some-id', '--client', 'webapp', ...config()]);
    assert.equal(both.code, 2, 'exactly one of ID, --user, --client');
  });

  test('keys list, rotate (new keys published, old ones still signing), retire refused for a signing key or an unknown kid', async () => {
    const first = await run(['keys', 'list', '--json', ...config()]);
    assert.equal(first.code, 0, first.stderr);
    const keys = JSON.parse(first.stdout) as { kid: string; alg: string; state: string }[];
    assert.deepEqual(keys.map((key) => key.state).sort(), ['signing', 'signing']);
    assert.deepEqual(keys.map((key) => key.alg).sort(), ['ES256', 'RS256']);

    const rotated = await run(['keys', 'rotate', ...config()]);
    assert.equal(rotated.code, 0, rotated.stderr);
    assert.match(rotated.stdout, /within 10 s .* within 55 s/);
    const after = JSON.parse((await run(['keys', 'list', '--json', ...config()])).stdout) as { kid: string; state: string }[];
    assert.equal(after.length, 4);
    assert.deepEqual(after.filter((key) => !keys.some((old) => old.kid === key.kid)).map((key) => key.state), ['published', 'published']);

    const signing = keys[0] as { kid: string; alg: string };
    const successor = (after as { kid: string; alg: string; state: string }[]).find((key) => key.alg === signing.alg && key.state === 'published');
    const refused = await run(['keys', 'retire', signing.kid, ...config()]);
    assert.equal(refused.code, 1);
    // Already rotated: the refusal says which key takes over, not "rotate first".
    assert.match(refused.stderr, new RegExp(`key ${signing.kid} signs new tokens until key ${successor?.kid}, published by a rotation, takes over; retire it from `));
    const unknown = await run(['keys', 'retire', 'no-such-kid', ...config()]);
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /there is no key no-such-kid/);
    // A kid is a base64url thumbprint: one in 64 begins with '-', and is still a KID wherever it stands, not an option.
    for (const args of [['-Ab3', ...config()], [...config(), '-Ab3'], ['-c', deployment.configFile, '-Ab3'], [`--config=${deployment.configFile}`, '-Ab3'], [...config(), '--', '-Ab3']]) {
      const dashed = await run(['keys', 'retire', ...args]);
      assert.equal(dashed.code, 1, `${args.join(' ')}: ${dashed.stderr}`);
      assert.match(dashed.stderr, /there is no key -Ab3/);
    }
    // One with a '-' inside as well (about one key in 130): Node's parseArgs reads that '-' as a '--'.
    for (const args of [['-N7X-fXW', ...config()], [...config(), '-N7X-fXW'], ['-c', deployment.configFile, '-N7X-fXW']]) {
      const dashed = await run(['keys', 'retire', ...args]);
      assert.equal(dashed.code, 1, `${args.join(' ')}: ${dashed.stderr}`);
      assert.match(dashed.stderr, /there is no key -N7X-fXW/);
    }
    // Even one that reads like -c with its value attached.
    const likeConfig = await run(['keys', 'retire', '-cAb3', ...config()]);
    assert.equal(likeConfig.code, 1, likeConfig.stderr);
    assert.match(likeConfig.stderr, /there is no key -cAb3/);
    const dashedGrant = await run(['grants', 'revoke', '-xY', ...config()]);
    assert.equal(dashedGrant.code, 1, dashedGrant.stderr);
    assert.match(dashedGrant.stdout, /^0 grants revoked$/m);
    assert.match(dashedGrant.stderr, /there is no live grant -xY/);
    const innerDash = await run(['grants', 'revoke', '-x-Y', ...config()]);
    assert.equal(innerDash.code, 1, innerDash.stderr);
    assert.match(innerDash.stderr, /there is no live grant -x-Y/);
    const human = await run(['keys', 'list', ...config()]);
    assert.match(human.stdout, /ES256 {2}\d{4}-\d\d-\d\dT.* {2}signing/);
  });

  test('a reader that closes the pipe early (keys list | head) ends the command quietly: no stack trace, exit 0', async () => {
    const child = spawn(process.execPath, cliArgs('keys', 'list', ...config()), { env: { ...process.env, PINPOINT_CONFIG: '' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    // Closed before the command writes: its first write meets a closed pipe (EPIPE).
    child.stdout.destroy();
    const code = await new Promise<number | null>((resolve, reject) => {
      child.on('error', reject);
      child.on('close', resolve);
    });
    assert.equal(stderr, '');
    assert.equal(code, 0);
  });

  test('backup --to FILE: a consistent copy while the server runs, which opens as a Pinpoint database; never overwrites', async () => {
    await signInForTokens(deployment.baseUrl);
    const to = join(deployment.folder, 'backup.db');
    const done = await run(['backup', '--to', to, ...config()]);
    assert.equal(done.code, 0, done.stderr);
    const { stat } = await import('node:fs/promises');
    assert.equal((await stat(to)).mode & 0o777, 0o600, 'the copy holds private keys: owner-only');
    const { default: Database } = await import('better-sqlite3');
    const copy = new Database(to, { readonly: true });
    try {
      const versions = (copy.prepare('SELECT version FROM schema_migrations').all() as { version: number }[]).map((row) => row.version);
      assert.ok(versions.length >= 3, String(versions));
      assert.ok((copy.prepare('SELECT count(*) AS n FROM grants').get() as { n: number }).n >= 1);
      assert.ok((copy.prepare('SELECT count(*) AS n FROM keys').get() as { n: number }).n >= 2);
    } finally {
      copy.close();
    }
    const again = await run(['backup', '--to', to, ...config()]);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /exists/);
  });

  test('a configuration with its state in memory has nothing to administer', async () => {
    const memory = join(deployment.folder, 'memory.hcl');
    const { writeFile } = await import('node:fs/promises');
    await writeFile(memory, 'base_url = "http://127.0.0.1:8080"\n');
    const answer = await run(['keys', 'list', '--config', memory]);
    assert.equal(answer.code, 1);
    assert.match(answer.stderr, /state in the server's memory/);
  });
});

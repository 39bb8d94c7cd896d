/**
 * Config rules added after the third outside review (DESIGN.md §7): a client label that could be a person's `sub` is
 * a config error, and every file the config names for a secret is a regular file of at most 64 KiB, so a FIFO or a
 * device is a config error, never a hang. `check` and `serve` run as real processes on real files.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { chmod, mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { describe, test } from 'node:test';

import { ConfigInvalid, formatProblem, loadConfig } from '../src/config/load.js';
import { hashPassword } from '../src/crypto/password.js';
import { cliArgs } from './helpers/cli-command.js';

const HASH = await hashPassword('wonderland', { N: 2 ** 14, r: 8, p: 1 });
/** Only a guard against a hang: a command that has not ended by then is killed and the test fails. */
const HANG_GUARD_MS = 60_000;

/** Writes config.hcl plus side files (mode 0600) into a fresh folder; returns the folder. */
async function folderWith(config: string, files: Record<string, string> = {}): Promise<string> {
  const folder = await mkdtemp(join(tmpdir(), 'pinpoint-config-security-'));
  for (const [name, text] of Object.entries(files)) {
    const path = join(folder, name);
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, text);
    await chmod(path, 0o600);
  }
  await writeFile(join(folder, 'config.hcl'), config);
  return folder;
}

async function problemsOf(file: string): Promise<string[]> {
  try {
    await loadConfig(file);
  } catch (error) {
    if (error instanceof ConfigInvalid) return error.problems.map(formatProblem);
    throw error;
  }
  assert.fail('the configuration should have been refused');
}

function assertProblem(lines: readonly string[], prefix: string, ...fragments: string[]): void {
  const found = lines.find((line) => line.startsWith(prefix) && fragments.every((fragment) => line.includes(fragment)));
  assert.ok(found, `no problem starting with ${JSON.stringify(prefix)} containing ${JSON.stringify(fragments)} in:\n${lines.join('\n')}`);
}

/** Runs the CLI; a run still going after HANG_GUARD_MS is killed and reported as hung. */
function run(args: readonly string[]): Promise<{ code: number | null; hung: boolean; stdout: string; stderr: string }> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, cliArgs(...args), { env: { ...process.env, PINPOINT_CONFIG: '' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let hung = false;
    const guard = setTimeout(() => {
      hung = true;
      child.kill('SIGKILL');
    }, HANG_GUARD_MS);
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(guard);
      resolvePromise({ code, hung, stdout, stderr });
    });
  });
}

const USER = `user "alice" {
  password_hash = "${HASH}"
}`;

/** The user on lines 2-4, a client `label` from line 5, its secret_file on line 6. */
const withClient = (label: string, secretFile = 'secrets/client', extra = ''): string => `base_url = "https://auth.example.org"
${USER}
client "${label}" {
  secret_file   = "${secretFile}"
  redirect_uris = ["https://app.example.org/cb"]
  audience      = ["https://api.example.org/"]
}
${extra}`;

const SECRET_FILES = { 'secrets/client': 'client-secret\n' };

describe('a client labelled like a person', () => {
  test('client "alice" beside user "alice" is a config error naming the file, line and block', async () => {
    const folder = await folderWith(withClient('alice'), SECRET_FILES);
    const file = join(folder, 'config.hcl');
    assertProblem(await problemsOf(file), `${file}:5: client "alice": `, 'user "alice" (line 2)', 'sub');
  });

  test('a client_id of the form "<federation>:..." is a config error too', async () => {
    const federation = `federation "campus" {\n  issuer      = "https://idp.example.org"\n  client_id   = "pinpoint"\n  secret_file = "secrets/client"\n}\n`;
    const folder = await folderWith(withClient('campus:alice', 'secrets/client', federation), SECRET_FILES);
    const file = join(folder, 'config.hcl');
    assertProblem(await problemsOf(file), `${file}:5: client "campus:alice": `, 'federation "campus" (line 10)');
  });

  test('another label loads', async () => {
    const folder = await folderWith(withClient('webapp'), SECRET_FILES);
    const { config } = await loadConfig(join(folder, 'config.hcl'));
    assert.ok(config.clients.has('webapp') && config.users.has('alice'));
  });

  test('check and serve refuse it (exit 1, the problem printed)', async () => {
    const folder = await folderWith(withClient('alice'), SECRET_FILES);
    const file = join(folder, 'config.hcl');
    const checked = await run(['check', '--config', file]);
    assert.equal(checked.code, 1, checked.stdout + checked.stderr);
    assert.match(checked.stdout + checked.stderr, /client "alice": the client_id is also the name of user "alice"/);
    const served = await run(['serve', '--config', file]);
    assert.equal(served.hung, false, 'serve started instead of refusing');
    assert.equal(served.code, 1, served.stdout + served.stderr);
    assert.match(served.stderr, /client "alice": the client_id is also the name of user "alice"/);
  });
});

describe('files named for secrets are regular files of at most 64 KiB', () => {
  test('a secret_file over 64 KiB is a config error; one of exactly 64 KiB loads', async () => {
    const big = await folderWith(withClient('webapp'), { 'secrets/client': 'x'.repeat(64 * 1024 + 1) });
    const file = join(big, 'config.hcl');
    assertProblem(await problemsOf(file), `${file}:6: client "webapp": secret_file "secrets/client" is larger than 64 KiB`);
    const fits = await folderWith(withClient('webapp'), { 'secrets/client': 'x'.repeat(64 * 1024) });
    const { config } = await loadConfig(join(fits, 'config.hcl'));
    assert.equal(config.clients.get('webapp')?.secret?.length, 64 * 1024);
  });

  test('secret_file = "/dev/zero" is a config error, read no further than its type', async () => {
    const folder = await folderWith(withClient('webapp', '/dev/zero'));
    const file = join(folder, 'config.hcl');
    assertProblem(await problemsOf(file), `${file}:6: client "webapp": secret_file "/dev/zero" is not a regular file`);
  });

  test('a FIFO as secret_file, token_file or password_file: check exits 1 naming each, never hangs', { timeout: 3 * HANG_GUARD_MS }, async () => {
    const extra = `dynamic_clients {
  audience     = ["https://mcp.example.org/mcp"]
  registration = "token"
  token_file   = "secrets/pipe"
}
state {
  url           = "postgres://pinpoint@db.internal:5432/pinpoint"
  password_file = "secrets/pipe"
}
`;
    const folder = await folderWith(withClient('webapp', 'secrets/pipe', extra));
    await mkdir(join(folder, 'secrets'));
    execFileSync('mkfifo', ['-m', '600', join(folder, 'secrets', 'pipe')]);
    const file = join(folder, 'config.hcl');
    const checked = await run(['check', '--config', file]);
    assert.equal(checked.hung, false, 'check hung on the FIFO');
    assert.equal(checked.code, 1, checked.stdout + checked.stderr);
    const output = checked.stdout + checked.stderr;
    for (const [line, place] of [[6, 'client "webapp": secret_file'], [13, 'dynamic_clients: token_file'], [17, 'state: password_file']] as const) {
      assert.ok(output.includes(`${file}:${line}: ${place} "secrets/pipe" is not a regular file`), `line ${line} ${place} in:\n${output}`);
    }
    const served = await run(['serve', '--config', file]);
    assert.equal(served.hung, false, 'serve hung on the FIFO');
    assert.equal(served.code, 1, served.stdout + served.stderr);
    assert.match(served.stderr, /secret_file "secrets\/pipe" is not a regular file/);
  });
});

/** The `pinpoint` command as an operator runs it: a real child process on real files. */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmod, mkdir, mkdtemp, readFile, stat, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, describe, test } from 'node:test';

import { hashPassword, isPasswordHash, verifyPassword } from '../src/crypto/password.js';
import { requestableReason } from '../src/policy/requestable.js';
import { cliArgs } from './helpers/cli-command.js';

const EXAMPLE = resolve('config.example.hcl');

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `pinpoint ...args`; with `openFiles`, under that open-files limit (`ulimit -n`). */
function run(args: readonly string[], options: { input?: string; env?: NodeJS.ProcessEnv; openFiles?: number } = {}): Promise<Run> {
  const command = [process.execPath, ...cliArgs(...args)];
  const [file, argv] =
    options.openFiles === undefined ? [process.execPath, command.slice(1)] : ['bash', ['-c', `ulimit -n ${options.openFiles} && exec "$@"`, 'bash', ...command]];
  return new Promise((resolvePromise, reject) => {
    const child = spawn(file, argv, {
      env: { ...process.env, PINPOINT_CONFIG: '', ...options.env },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolvePromise({ code, stdout, stderr }));
    child.stdin.end(options.input ?? '');
  });
}

/** The audience row of a client's table in the human output: entry, spaces, requestable column. */
function audienceRow(stdout: string, entry: string): string | undefined {
  return stdout.split('\n').find((line) => line.trim().startsWith(`${entry} `));
}

async function folderWith(files: Record<string, string>): Promise<string> {
  const folder = await mkdtemp(join(tmpdir(), 'pinpoint-cli-'));
  for (const [name, text] of Object.entries(files)) {
    await mkdir(join(folder, name, '..'), { recursive: true });
    await writeFile(join(folder, name), text);
    await chmod(join(folder, name), 0o600);
  }
  return folder;
}

describe('pinpoint check', () => {
  test('on config.example.hcl lists every client, kind and audience entry with the requestable column; exit 0', async () => {
    const { code, stdout, stderr } = await run(['check', '--config', EXAMPLE]);
    assert.equal(code, 0, stderr);
    assert.match(stdout, /the configuration is valid/);
    assert.match(stdout, /^issuer\s+http:\/\/127\.0\.0\.1:8080$/m);
    assert.match(stdout, /^tls\s+off/m);
    assert.match(stdout, /^sign-in\s+1 local user, no federation$/m);
    assert.match(stdout, new RegExp(`^persistence\\s+SQLite ${resolve('data/pinpoint.db').replaceAll('/', '\\/')}$`, 'm'));
    assert.match(stdout, /^client "webapp" \(confidential\)$/m);
    assert.match(stdout, /^client "tv" \(device\)$/m);
    assert.ok(stdout.indexOf('client "webapp"') < stdout.indexOf('client "tv"'), 'clients in config order');
    assert.match(stdout, /^\s+audience\s+requestable$/m);
    assert.match(audienceRow(stdout, 'https://api.example.org/') ?? '', /\syes$/);
    assert.match(audienceRow(stdout, 'https://files.example.org') ?? '', /\syes$/);
    assert.match(audienceRow(stdout, 'billing') ?? '', /\sno \(logical name\)$/);
    assert.match(audienceRow(stdout, 'https://docs.example.org/#v2') ?? '', /\sno \(contains a fragment\)$/);
    assert.match(stdout, /refresh lifetime\s+720h/);
    assert.match(stdout, /scopes\s+openid profile email ssh/);
    assert.match(stdout, /redirect URIs\s+http:\/\/127\.0\.0\.1:9000\/callback/);
    assert.match(stdout, /^trusted proxies\s+\(none: forwarded headers are ignored\)$/m);
    assert.match(stdout, /^metrics\s+\(off\)$/m);
    assert.match(stdout, /^limits\s+client_failures 300, address_failures 300 per minute; login_failures 10, login_failures_any 100, user_code_failures 20 per 15 minutes; address_connections 1024 open at once$/m);
    assert.doesNotMatch(stdout, /resource servers|dynamic clients|ID token alg|refresh reuse grace|post-logout URIs/, 'sections and rows for what is not set stay out');
  });

  test('--json prints one document with the same facts', async () => {
    const { code, stdout } = await run(['check', '--config', EXAMPLE, '--json']);
    assert.equal(code, 0);
    const report = JSON.parse(stdout);
    assert.equal(report.valid, true);
    assert.deepEqual(report.problems, []);
    assert.ok(Array.isArray(report.warnings));
    assert.equal(report.issuer, 'http://127.0.0.1:8080');
    assert.deepEqual(report.tls, { mode: 'off' });
    assert.deepEqual(report.signIn, { users: 1, federations: [] });
    assert.deepEqual(report.state, { kind: 'sqlite', path: resolve('data/pinpoint.db') });
    assert.deepEqual(
      report.clients.map((client: { clientId: string; kind: string }) => [client.clientId, client.kind]),
      [
        ['webapp', 'confidential'],
        ['tv', 'device'],
      ],
    );
    const [webapp, tv] = report.clients;
    assert.deepEqual(webapp.redirectUris, ['http://127.0.0.1:9000/callback']);
    assert.deepEqual(webapp.audience, [
      { value: 'https://api.example.org/', requestable: true },
      { value: 'https://files.example.org', requestable: true },
      { value: 'billing', requestable: false, reason: 'logical name' },
      { value: 'https://docs.example.org/#v2', requestable: false, reason: 'contains a fragment' },
    ]);
    assert.equal(webapp.refreshLifetime, '720h');
    assert.deepEqual(webapp.scopes, ['openid', 'profile', 'email', 'ssh']);
    assert.deepEqual(tv.audience, [{ value: 'https://api.example.org/', requestable: true }]);
    assert.deepEqual(tv.redirectUris, []);
    assert.deepEqual(report.trustedProxies, []);
    assert.deepEqual(report.limits, { clientFailures: 300, addressFailures: 300, loginFailures: 10, loginFailuresAny: 100, userCodeFailures: 20, passwordHashes: 2, addressConnections: 1024 });
    assert.equal(report.metrics, undefined);
    assert.deepEqual(report.resourceServers, []);
    assert.equal(report.dynamicClients, undefined);
    assert.equal(webapp.idTokenSigningAlg, 'RS256');
    assert.deepEqual(webapp.postLogoutRedirectUris, []);
    assert.equal(webapp.refreshReuseGrace, '0s');
    assert.equal(webapp.refreshReuseGraceMs, 0);
  });

  describe('the blocks of DESIGN.md §3 "more attributes and blocks"', () => {
    const config = `base_url = "https://auth.example.org"
trusted_proxies = ["10.0.0.0/8", "::1"]
tls {
  mode = "proxy"
}
limits {
  login_failures = 3
}
metrics {
  listen = "127.0.0.1:9464"
}
user "alice" {
  password_hash = "PASSWORD_HASH"
}
client "webapp" {
  secret_file               = "secrets/webapp"
  display_name              = "Web app"
  redirect_uris             = ["http://127.0.0.1/callback"]
  post_logout_redirect_uris = ["https://app.example.org/", "https://app.example.org/bye"]
  audience                  = ["https://api.example.org/", "billing"]
  id_token_signing_alg      = "ES256"
  refresh_lifetime          = "720h"
  refresh_reuse_grace       = "10s"
}
resource_server "https://api.example.org/" {
  secret_file = "secrets/api"
}
resource_server "https://mcp.example.org/mcp" {
  secret_file = "secrets/api"
}
dynamic_clients {
  audience            = ["https://mcp.example.org/mcp", "https://mcp.example.org/#tools"]
  metadata_documents  = true
  registration        = "token"
  token_file          = "secrets/registration"
  scopes              = ["openid", "profile", "mcp"]
  default_scope       = "mcp"
  refresh_lifetime    = "24h"
  refresh_reuse_grace = "5s"
}
`;
    const secrets = ['webapp-client-secret', 'resource-server-secret', 'initial-access-token'];
    let file = '';

    async function runs(): Promise<{ human: Run; json: Run }> {
      if (!file) {
        const hash = await hashPassword('wonderland', { N: 2 ** 14, r: 8, p: 1 });
        const folder = await folderWith({
          'secrets/webapp': `${secrets[0]}\n`,
          'secrets/api': `${secrets[1]}\n`,
          'secrets/registration': `${secrets[2]}\n`,
          'config.hcl': config.replace('PASSWORD_HASH', hash),
        });
        file = join(folder, 'config.hcl');
      }
      const [human, json] = await Promise.all([run(['check', '--config', file]), run(['check', '--config', file, '--json'])]);
      return { human, json };
    }

    test('text: trusted proxies, limits, metrics, resource servers, dynamic clients and the new client rows; no secret', async () => {
      const { human } = await runs();
      assert.equal(human.code, 0, human.stdout + human.stderr);
      const out = human.stdout;
      assert.match(out, /^trusted proxies\s+10\.0\.0\.0\/8 ::1$/m);
      assert.match(out, /^metrics\s+127\.0\.0\.1:9464 \(GET \/metrics\)$/m);
      assert.match(out, /^limits\s+client_failures 300, address_failures 300 per minute; login_failures 3, login_failures_any 100, user_code_failures 20 per 15 minutes; address_connections 1024 open at once$/m);
      assert.match(out, /^resource servers \(may call \/introspect\)\n {2}https:\/\/api\.example\.org\/\n {2}https:\/\/mcp\.example\.org\/mcp$/m);
      const dynamic = out.slice(out.indexOf('\ndynamic clients\n'), out.indexOf('\nclient "webapp"'));
      assert.ok(dynamic.length > 0, out);
      assert.match(dynamic, /^ {2}registration\s+token \(POST \/register with the initial access token from token_file\)$/m);
      assert.match(dynamic, /^ {2}metadata documents\s+on/m);
      assert.match(dynamic, /^ {2}scopes\s+openid profile mcp$/m);
      assert.match(dynamic, /^ {2}default scope\s+mcp$/m);
      assert.match(dynamic, /^ {2}refresh lifetime\s+24h$/m);
      assert.match(dynamic, /^ {2}refresh reuse grace\s+5s$/m);
      assert.match(dynamic, /^ {2}audience\s+requestable$/m);
      assert.match(audienceRow(dynamic, 'https://mcp.example.org/mcp') ?? '', /\syes$/);
      assert.match(audienceRow(dynamic, 'https://mcp.example.org/#tools') ?? '', /\sno \(contains a fragment\)$/);
      const webapp = out.slice(out.indexOf('\nclient "webapp"'));
      assert.match(webapp, /^ {2}display name\s+Web app$/m);
      assert.match(webapp, /^ {2}post-logout URIs\s+https:\/\/app\.example\.org\/ https:\/\/app\.example\.org\/bye$/m);
      assert.match(webapp, /^ {2}refresh reuse grace\s+10s$/m);
      assert.match(webapp, /^ {2}ID token alg\s+ES256$/m);
      assert.match(webapp, /^ {2}redirect URIs\s+http:\/\/127\.0\.0\.1\/callback$/m);
      for (const secret of secrets) assert.ok(!(human.stdout + human.stderr).includes(secret), `output shows ${secret}`);
    });

    test('--json: the same facts, labels only for resource servers, no registration token', async () => {
      const { json } = await runs();
      assert.equal(json.code, 0, json.stdout + json.stderr);
      for (const secret of secrets) assert.ok(!(json.stdout + json.stderr).includes(secret), `output shows ${secret}`);
      const report = JSON.parse(json.stdout);
      assert.deepEqual(report.trustedProxies, ['10.0.0.0/8', '::1']);
      assert.deepEqual(report.limits, { clientFailures: 300, addressFailures: 300, loginFailures: 3, loginFailuresAny: 100, userCodeFailures: 20, passwordHashes: 2, addressConnections: 1024 });
      assert.deepEqual(report.metrics, { listen: '127.0.0.1:9464' });
      assert.deepEqual(report.resourceServers, [{ label: 'https://api.example.org/' }, { label: 'https://mcp.example.org/mcp' }]);
      assert.deepEqual(report.dynamicClients, {
        audience: [
          { value: 'https://mcp.example.org/mcp', requestable: true },
          { value: 'https://mcp.example.org/#tools', requestable: false, reason: 'contains a fragment' },
        ],
        registration: 'token',
        metadataDocuments: true,
        scopes: ['openid', 'profile', 'mcp'],
        defaultScope: 'mcp',
        refreshLifetime: '24h',
        refreshLifetimeMs: 24 * 3_600_000,
        refreshReuseGrace: '5s',
        refreshReuseGraceMs: 5000,
        allowPrivateAddresses: false,
      });
      const [webapp] = report.clients;
      assert.equal(webapp.displayName, 'Web app');
      assert.deepEqual(webapp.postLogoutRedirectUris, ['https://app.example.org/', 'https://app.example.org/bye']);
      assert.equal(webapp.idTokenSigningAlg, 'ES256');
      assert.equal(webapp.refreshReuseGrace, '10s');
      assert.equal(webapp.refreshReuseGraceMs, 10_000);
    });

    test('tls mode "proxy" without trusted_proxies is valid, with a warning about forwarded headers', async () => {
      const folder = await folderWith({
        'config.hcl': `base_url = "https://auth.example.org"\ntls {\n  mode = "proxy"\n}\nclient "batch" {\n  secret_file = "secrets/batch"\n  audience = ["x"]\n}\n`,
        'secrets/batch': 'batch-secret',
      });
      const human = await run(['check', '--config', join(folder, 'config.hcl')]);
      assert.equal(human.code, 0, human.stdout + human.stderr);
      assert.match(human.stdout, /tls: mode is "proxy" but trusted_proxies is empty: forwarded headers will be ignored/);
      assert.match(human.stdout, /^trusted proxies\s+\(none: forwarded headers are ignored\)$/m);
      const json = JSON.parse((await run(['check', '--config', join(folder, 'config.hcl'), '--json'])).stdout);
      assert.ok(json.warnings.some((warning: string) => warning.includes('forwarded headers will be ignored')), json.warnings.join('\n'));
    });
  });

  test('never prints a secret, a password hash or a database password', async () => {
    const example = await readFile(EXAMPLE, 'utf8');
    const hash = /password_hash\s*=\s*"([^"]+)"/.exec(example)?.[1];
    assert.ok(hash && isPasswordHash(hash));
    const folder = await folderWith({
      'secrets/webapp.secret': 'webapp-demo-secret\n',
      'secrets/db': 'db-file-password\n',
      'secrets/campus': 'campus-client-secret\n',
      'config.hcl': `${example.replace(/state \{[^}]*\}/, 'state {\n  url = "postgres://pin:url-password@db.internal:5433/auth"\n  schema = "pinpoint"\n  password_file = "secrets/db"\n}')}
federation "campus" {
  issuer = "https://idp.example.org"
  client_id = "pinpoint"
  secret_file = "secrets/campus"
}
`,
    });
    const human = await run(['check', '--config', join(folder, 'config.hcl')]);
    const json = await run(['check', '--config', join(folder, 'config.hcl'), '--json']);
    assert.equal(human.code, 0, human.stdout + human.stderr);
    assert.equal(json.code, 0);
    for (const output of [human.stdout + human.stderr, json.stdout + json.stderr]) {
      for (const secret of ['webapp-demo-secret', 'db-file-password', 'url-password', 'campus-client-secret', hash, 'scrypt$']) {
        assert.ok(!output.includes(secret), `output shows ${secret}`);
      }
    }
    const report = JSON.parse(json.stdout);
    assert.deepEqual(report.state, {
      kind: 'postgres',
      host: 'db.internal',
      port: 5433,
      database: 'auth',
      schema: 'pinpoint',
      user: 'pin',
      passwordFrom: 'password_file',
    });
    assert.deepEqual(report.signIn.federations, [{ name: 'campus', issuer: 'https://idp.example.org', scopes: ['openid', 'email', 'profile'] }]);
    assert.match(human.stdout, /^persistence\s+PostgreSQL db\.internal:5433 database auth schema pinpoint/m);
    assert.match(human.stdout, /^sign-in\s+1 local user, 1 federation upstream$/m);
  });

  test('an invalid file exits 1 listing every problem with file:line', async () => {
    const folder = await folderWith({
      'config.hcl': `base_url = "https://auth.example.org/"
client "webapp" {
  redirect_uris = ["https://app.example.org/cb"]
  audience = ["x"]
  refresh_lifetime = "30 days"
  colour = "blue"
}
`,
    });
    const file = join(folder, 'config.hcl');
    const human = await run(['check', '--config', file]);
    assert.equal(human.code, 1);
    assert.match(human.stdout, /not valid \(4 problems\)/);
    assert.ok(human.stdout.includes(`${file}:1: base_url "https://auth.example.org/" must not end with "/"`), human.stdout);
    assert.ok(human.stdout.includes(`${file}:2: client "webapp": needs a person to sign in`));
    assert.ok(human.stdout.includes(`${file}:5: client "webapp": refresh_lifetime "30 days" is not a duration; use e.g. 720h or 30d`));
    assert.ok(human.stdout.includes(`${file}:6: client "webapp": unknown attribute "colour"`));

    const json = await run(['check', '--config', file, '--json']);
    assert.equal(json.code, 1);
    const report = JSON.parse(json.stdout);
    assert.equal(report.valid, false);
    assert.equal(report.problems.length, 4);
    assert.deepEqual(
      report.problems.map((problem: { line?: number; block?: string }) => [problem.line, problem.block]),
      [
        [1, undefined],
        [2, 'client "webapp"'],
        [5, 'client "webapp"'],
        [6, 'client "webapp"'],
      ],
    );
    assert.ok(report.problems.every((problem: { file: string; text: string }) => problem.file === file && problem.text.startsWith(`${file}:`)));
  });

  test('a syntax error names line and column', async () => {
    const folder = await folderWith({ 'config.hcl': 'base_url = "https://auth.example.org"\nclient "x" {\n  audience = \n}\n' });
    const { code, stdout } = await run(['check', '--config', join(folder, 'config.hcl')]);
    assert.equal(code, 1);
    assert.ok(stdout.includes(`${join(folder, 'config.hcl')}:3:14: Invalid expression`), stdout);
  });

  test('PINPOINT_CONFIG replaces --config', async () => {
    const { code, stdout } = await run(['check', '--json'], { env: { PINPOINT_CONFIG: EXAMPLE } });
    assert.equal(code, 0);
    assert.equal(JSON.parse(stdout).valid, true);
  });

  describe('--probe', () => {
    const servers: Server[] = [];
    after(() => servers.forEach((server) => server.close()));

    async function discoveryServer(issuerOf: (origin: string) => string): Promise<string> {
      const server = createServer((request, response) => {
        const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
        if (request.url !== '/.well-known/openid-configuration') {
          response.writeHead(404).end();
          return;
        }
        response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ issuer: issuerOf(origin) }));
      });
      servers.push(server);
      await new Promise<void>((ready) => server.listen(0, '127.0.0.1', ready));
      return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    }

    test('shows whether each upstream answers with a matching issuer', async () => {
      const good = await discoveryServer((origin) => origin);
      const wrong = await discoveryServer(() => 'https://someone-else.example');
      const folder = await folderWith({
        'secrets/upstream': 'upstream-secret',
        'config.hcl': `base_url = "http://127.0.0.1:8080"
federation "good" {
  issuer = "${good}"
  client_id = "pinpoint"
  secret_file = "secrets/upstream"
}
federation "wrong" {
  issuer = "${wrong}"
  client_id = "pinpoint"
  secret_file = "secrets/upstream"
}
client "spa" {
  redirect_uris = ["http://127.0.0.1:9000/cb"]
  audience = ["https://api.example.org/"]
}
`,
      });
      const { code, stdout } = await run(['check', '--config', join(folder, 'config.hcl'), '--probe', '--json']);
      assert.equal(code, 1, 'a failed probe exits 1 (DESIGN.md §2)');
      const federations = JSON.parse(stdout).signIn.federations as { name: string; probe: { ok: boolean; detail: string } }[];
      assert.equal(federations.find((f) => f.name === 'good')?.probe.ok, true);
      const mismatch = federations.find((f) => f.name === 'wrong')?.probe;
      assert.equal(mismatch?.ok, false);
      assert.match(mismatch?.detail ?? '', /someone-else/);
      const human = await run(['check', '--config', join(folder, 'config.hcl'), '--probe']);
      assert.equal(human.code, 1);
      assert.match(human.stdout, /federation "good" .* probe: ok/);
      assert.match(human.stdout, /federation "wrong" .* probe: FAILED/);
      assert.match(human.stdout, /^client "spa" \(public\)$/m);
      const withoutProbe = await run(['check', '--config', join(folder, 'config.hcl')]);
      assert.equal(withoutProbe.code, 0, 'the same valid file without --probe exits 0');
    });

    test('reaches the state store without changing it: a database that opens, a folder to create one in, a server that answers', async () => {
      const closedPort = await new Promise<number>((ready) => {
        const probe = createServer();
        probe.listen(0, '127.0.0.1', () => {
          const { port } = probe.address() as AddressInfo;
          probe.close(() => ready(port));
        });
      });
      const configWith = (state: string): string => `base_url = "http://127.0.0.1:8080"
state {
  ${state}
}
client "service" {
  secret_file = "secrets/service"
  audience = ["https://api.example.org/"]
}
`;
      const folder = await folderWith({
        'secrets/service': 'service-secret',
        'fresh.hcl': configWith('path = "data/new/pinpoint.db"'),
        'junk.hcl': configWith('path = "junk.db"'),
        'junk.db': 'this is not a database',
        'down.hcl': configWith(`url = "postgres://postgres@127.0.0.1:${closedPort}/pinpoint"`),
      });
      await chmod(join(folder, 'secrets', 'service'), 0o600);
      const fresh = await run(['check', '--config', join(folder, 'fresh.hcl'), '--probe', '--json']);
      assert.equal(fresh.code, 0, fresh.stdout);
      assert.equal(JSON.parse(fresh.stdout).stateProbe.ok, true);
      assert.equal(await stat(join(folder, 'data')).then(() => true, () => false), false, 'probing creates nothing');
      const junk = await run(['check', '--config', join(folder, 'junk.hcl'), '--probe']);
      assert.equal(junk.code, 1);
      assert.match(junk.stdout, /persistence .* probe: FAILED, .*junk\.db cannot be read as a database/);
      const down = await run(['check', '--config', join(folder, 'down.hcl'), '--probe', '--json']);
      assert.equal(down.code, 1, 'an unreachable store fails the probe (DESIGN.md §2)');
      assert.match(JSON.parse(down.stdout).stateProbe.detail, /no connection/);
      assert.equal((await run(['check', '--config', join(folder, 'down.hcl')])).code, 0, 'without --probe nothing is reached');
    });
  });

  test('pinpoint --version prints the package version', async () => {
    const { code, stdout } = await run(['--version']);
    assert.equal(code, 0);
    const { version } = JSON.parse(await readFile(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };
    assert.equal(stdout, `${version}\n`);
  });
});

describe('a config of many clients', () => {
  test('800 clients with a secret_file each are read under a 256 open-files limit: valid, not EMFILE', async () => {
    const clients = Array.from(
      { length: 800 },
      (_, i) => `client "c${i}" {\n  secret_file = "secrets/c${i % 10}"\n  audience = ["https://api.example.org/"]\n}\n`,
    ).join('');
    const folder = await folderWith({
      'config.hcl': `base_url = "http://127.0.0.1:8080"\n${clients}`,
      ...Object.fromEntries(Array.from({ length: 10 }, (_, i) => [`secrets/c${i}`, `secret-number-${i}\n`])),
    });
    const checked = await run(['check', '--config', join(folder, 'config.hcl')], { openFiles: 256 });
    assert.equal(checked.code, 0, checked.stderr.slice(0, 2000));
    assert.match(checked.stdout, /the configuration is valid/);
    assert.doesNotMatch(checked.stderr, /EMFILE/);
  });
});

describe('pinpoint hash-password', () => {
  test('prints one hash line that verifyPassword accepts for the password without its newline', async () => {
    const { code, stdout, stderr } = await run(['hash-password'], { input: 'correct horse battery\n' });
    assert.equal(code, 0, stderr);
    // DESIGN.md §2: new hashes use N = 2^17, r = 8, p = 1.
    assert.match(stdout, /^scrypt\$N=131072,r=8,p=1\$[A-Za-z0-9_-]+\$[A-Za-z0-9_-]+\n$/);
    const hash = stdout.trim();
    assert.ok(isPasswordHash(hash));
    assert.equal(await verifyPassword('correct horse battery', hash), true);
    assert.equal(await verifyPassword('correct horse battery\n', hash), false);
    assert.equal(await verifyPassword('correct horse', hash), false);
  });

  test('refuses an empty password', async () => {
    for (const input of ['', '\n']) {
      const { code, stdout, stderr } = await run(['hash-password'], { input });
      assert.equal(code, 1);
      assert.equal(stdout, '');
      assert.match(stderr, /empty password/);
    }
  });
});

describe('command line mistakes exit 2 with the usage', () => {
  for (const args of [['frobnicate'], [], ['check'], ['serve'], ['check', '--config', EXAMPLE, '--verbose'], ['hash-password', '--json']]) {
    test(`pinpoint ${args.join(' ')}`, async () => {
      const { code, stderr, stdout } = await run(args);
      assert.equal(code, 2);
      assert.match(stderr, /usage:/);
      assert.equal(stdout, '');
    });
  }
});

describe('password hashes', () => {
  test('salted: the same password hashes differently, both verify', async () => {
    const [first, second] = await Promise.all([hashPassword('wonderland'), hashPassword('wonderland')]);
    assert.notEqual(first, second);
    assert.equal(await verifyPassword('wonderland', first), true);
    assert.equal(await verifyPassword('wonderland', second), true);
    assert.equal(await verifyPassword('Wonderland', first), false);
  });

  test('a hash made with the older parameters (N = 2^15) still verifies', async () => {
    const older = await hashPassword('wonderland', { N: 2 ** 15, r: 8, p: 1 });
    assert.match(older, /^scrypt\$N=32768,r=8,p=1\$/);
    assert.equal(await verifyPassword('wonderland', older), true);
    assert.equal(await verifyPassword('wonderland!', older), false);
  });

  test('parameters are read from the hash, so they can be raised later', async () => {
    const hash = await hashPassword('wonderland');
    const [, , salt, key] = hash.split('$');
    assert.equal(await verifyPassword('wonderland', `scrypt$N=16384,r=8,p=1$${salt}$${key}`), false, 'other parameters give another key');
  });

  test('a malformed hash gives false, not an exception', async () => {
    const hash = await hashPassword('wonderland');
    for (const bad of ['', 'wonderland', 'scrypt$', hash.replace('N=131072', 'N=1000'), hash.replace('N=131072', 'N=4194304'), hash.replace(/\$[^$]+$/, '$short'), `${hash}$extra`, hash.replace('scrypt', 'bcrypt')]) {
      assert.equal(isPasswordHash(bad), false, bad);
      assert.equal(await verifyPassword('wonderland', bad), false, bad);
    }
  });
});

describe('requestableReason', () => {
  test('an absolute URI without fragment can be named; a logical name or a fragment cannot', () => {
    assert.equal(requestableReason('https://api.example.org/'), undefined);
    assert.equal(requestableReason('urn:example:billing'), undefined);
    assert.equal(requestableReason('billing'), 'logical name');
    assert.equal(requestableReason(''), 'logical name');
    assert.equal(requestableReason('//api.example.org/'), 'logical name');
    assert.equal(requestableReason('1http://x'), 'logical name');
    assert.equal(requestableReason('https://docs.example.org/#v2'), 'contains a fragment');
    assert.equal(requestableReason('billing#v2'), 'logical name');
  });
});

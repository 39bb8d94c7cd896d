/** loadConfig on real files: every rule of DESIGN.md §3, and every message naming file, line and block. */
import assert from 'node:assert/strict';
import { chmod, mkdir, mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { describe, test } from 'node:test';

import { ConfigInvalid, formatProblem, loadConfig } from '../src/config/load.js';
import type { Config } from '../src/config/types.js';
import { hashPassword } from '../src/crypto/password.js';

const HASH = await hashPassword('wonderland');

interface FileSpec {
  readonly text: string;
  readonly mode?: number;
}

const DEFAULT_FILES: Record<string, FileSpec> = {
  'secrets/webapp': { text: 'webapp-secret\n', mode: 0o600 },
};

/** Writes config.hcl plus side files into a fresh folder; returns the config's absolute path. */
async function fixture(config: string, files: Record<string, FileSpec> = DEFAULT_FILES): Promise<string> {
  const folder = await mkdtemp(join(tmpdir(), 'pinpoint-config-'));
  for (const [name, spec] of Object.entries(files)) {
    const path = join(folder, name);
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, spec.text);
    await chmod(path, spec.mode ?? 0o600);
  }
  const file = join(folder, 'config.hcl');
  await writeFile(file, config);
  return file;
}

async function load(config: string, files?: Record<string, FileSpec>): Promise<{ config: Config; warnings: string[]; file: string }> {
  const file = await fixture(config, files);
  return { ...(await loadConfig(file)), file };
}

/** Loads a config that must be invalid; returns the formatted problems and the error. */
async function problemsOf(config: string, files?: Record<string, FileSpec>): Promise<{ lines: string[]; file: string; error: ConfigInvalid }> {
  const file = await fixture(config, files);
  try {
    await loadConfig(file);
  } catch (error) {
    if (error instanceof ConfigInvalid) return { lines: error.problems.map(formatProblem), file, error };
    throw error;
  }
  assert.fail('the configuration should have been refused');
}

/** Asserts one problem starts with `file:line: block: ` and contains every fragment. */
function assertProblem(lines: readonly string[], prefix: string, ...fragments: string[]): void {
  const found = lines.find((line) => line.startsWith(prefix) && fragments.every((fragment) => line.includes(fragment)));
  assert.ok(found, `no problem starting with ${JSON.stringify(prefix)} containing ${JSON.stringify(fragments)} in:\n${lines.join('\n')}`);
}

const USER = `user "alice" {
  password_hash = "${HASH}"
}`;

/** A valid config: the user on lines 2-4, the client from line 5 on. */
const VALID = `base_url = "https://auth.example.org"
${USER}
client "webapp" {
  secret_file   = "secrets/webapp"
  redirect_uris = ["https://app.example.org/cb"]
  audience      = ["https://api.example.org/"]
}
`;

describe('a valid configuration', () => {
  test('loads with the defaults of DESIGN.md §3', async () => {
    const { config, warnings, file } = await load(VALID);
    assert.equal(config.file, file);
    assert.equal(config.baseUrl, 'https://auth.example.org');
    assert.equal(config.basePath, '');
    assert.deepEqual(config.listen, { host: '127.0.0.1', port: 8080 });
    assert.equal(config.accessTokenLifetimeMs, 3_600_000);
    assert.equal(config.logLevel, 'info');
    assert.deepEqual(config.tls, { mode: 'off' });
    assert.deepEqual(config.state, { kind: 'memory' });
    assert.ok(warnings.some((warning) => warning.includes('in memory')), 'memory state gets a warning');
    const client = config.clients.get('webapp');
    assert.ok(client);
    assert.equal(client.kind, 'confidential');
    assert.equal(client.secret, 'webapp-secret', 'one trailing newline is not part of the secret');
    assert.deepEqual(client.redirectUris, ['https://app.example.org/cb']);
    assert.deepEqual(client.audience, ['https://api.example.org/']);
    assert.deepEqual(client.scopes, ['openid', 'profile', 'email']);
    assert.equal(client.refreshLifetimeMs, undefined);
    assert.equal(client.displayName, undefined);
    assert.deepEqual(client.postLogoutRedirectUris, []);
    assert.equal(client.idTokenSigningAlg, 'RS256');
    assert.equal(client.refreshReuseGraceMs, 0);
    assert.equal(config.users.get('alice')?.passwordHash, HASH);
    assert.deepEqual(config.trustedProxies, []);
    assert.deepEqual(config.limits, { clientFailures: 300, addressFailures: 300, loginFailures: 10, loginFailuresAny: 100, userCodeFailures: 20, passwordHashes: 2, addressConnections: 1024 });
    assert.equal(config.metrics, undefined);
    assert.equal(config.resourceServers.size, 0);
    assert.equal(config.dynamicClients, undefined);
  });

  test('without a state block, a warning says keys, grants and sessions die with the process', async () => {
    const { config, warnings } = await load(VALID);
    assert.equal(config.state.kind, 'memory');
    assert.ok(warnings.some((warning) => warning.includes('kept in memory and lost on restart')), warnings.join('\n'));
  });

  test('config.example.hcl loads: clients in config order, audience in config order', async () => {
    const { config } = await loadConfig(resolve('config.example.hcl'));
    assert.deepEqual([...config.clients.keys()], ['webapp', 'tv']);
    const webapp = config.clients.get('webapp');
    assert.equal(webapp?.kind, 'confidential');
    assert.equal(webapp?.secret, 'webapp-demo-secret');
    assert.deepEqual(webapp?.audience, ['https://api.example.org/', 'https://files.example.org', 'billing', 'https://docs.example.org/#v2']);
    assert.deepEqual(webapp?.scopes, ['openid', 'profile', 'email', 'ssh']);
    assert.equal(webapp?.refreshLifetimeMs, 720 * 3_600_000);
    assert.equal(config.clients.get('tv')?.kind, 'device');
    assert.equal(config.clients.get('tv')?.secret, undefined);
    assert.deepEqual(config.state, { kind: 'sqlite', path: resolve('data/pinpoint.db') });
    assert.ok(config.users.has('alice'));
  });

  test('is frozen: objects, arrays and maps refuse changes', async () => {
    const { config } = await load(VALID);
    assert.ok(Object.isFrozen(config));
    assert.ok(Object.isFrozen(config.listen));
    const client = config.clients.get('webapp');
    assert.ok(client && Object.isFrozen(client));
    assert.throws(() => (client.audience as string[]).push('https://evil.example'));
    assert.throws(() => {
      (client as { kind: string }).kind = 'public';
    });
    assert.throws(() => (config.clients as Map<string, unknown>).set('evil', {}));
    assert.throws(() => (config.clients as Map<string, unknown>).delete('webapp'));
    assert.throws(() => (config.users as Map<string, unknown>).clear());
    assert.equal(config.clients.size, 1);
  });

  test('every top-level attribute and block is read', async () => {
    const { config } = await load(
      `base_url = "https://example.org/auth"
listen = "[::1]:9443"
access_token_lifetime = "15m"
log_level = "debug"
tls {
  mode = "proxy"
}
state {
  url = "postgres://pinpoint@db.internal:5432/pinpoint"
  schema = "auth"
  password_file = "secrets/db"
}
${USER.replace('}', '  email = "alice@example.org"\n  name = "Alice Example"\n}')}
federation "campus" {
  issuer = "https://idp.example.org"
  client_id = "pinpoint"
  secret_file = "secrets/campus"
  subject_claim = "email"
}
client "cli" {
  redirect_uris = ["http://127.0.0.1/callback", "com.example.app:/oauth"]
  audience = ["billing"]
  refresh_lifetime = "30d"
  scopes = ["openid", "offline_access"]
}
`,
      { 'secrets/db': { text: 'db-password\n' }, 'secrets/campus': { text: 'campus-secret' } },
    );
    assert.equal(config.baseUrl, 'https://example.org/auth');
    assert.equal(config.basePath, '/auth');
    assert.deepEqual(config.listen, { host: '::1', port: 9443 });
    assert.equal(config.accessTokenLifetimeMs, 15 * 60_000);
    assert.equal(config.logLevel, 'debug');
    assert.deepEqual(config.tls, { mode: 'proxy' });
    assert.deepEqual(config.state, { kind: 'postgres', url: 'postgres://pinpoint@db.internal:5432/pinpoint', schema: 'auth', password: 'db-password' });
    assert.deepEqual(config.users.get('alice'), { username: 'alice', passwordHash: HASH, email: 'alice@example.org', name: 'Alice Example' });
    assert.deepEqual(config.federations.get('campus'), {
      name: 'campus',
      issuer: 'https://idp.example.org',
      clientId: 'pinpoint',
      clientSecret: 'campus-secret',
      scopes: ['openid', 'email', 'profile'],
      subjectClaim: 'email',
    });
    const client = config.clients.get('cli');
    assert.equal(client?.kind, 'public');
    assert.equal(client?.secret, undefined);
    assert.equal(client?.refreshLifetimeMs, 30 * 86_400_000);
    assert.deepEqual(client?.scopes, ['openid', 'offline_access']);
  });

  test('a confidential client without redirect URIs is a client_credentials client and needs no user', async () => {
    const { config } = await load(`base_url = "https://auth.example.org"
client "batch" {
  secret_file = "secrets/webapp"
  audience    = ["https://api.example.org/"]
}
`);
    assert.equal(config.clients.get('batch')?.kind, 'confidential');
    assert.deepEqual(config.clients.get('batch')?.redirectUris, []);
  });

  test('postgres state defaults to schema public, without a password of its own', async () => {
    const { config } = await load(`${VALID}state {\n  url = "postgresql://db.internal/pinpoint"\n}\n`);
    assert.deepEqual(config.state, { kind: 'postgres', url: 'postgresql://db.internal/pinpoint', schema: 'public' });
  });

  test('comments, heredocs, multi-line lists and one-line blocks keep line numbers right', async () => {
    const { lines, file } = await problemsOf(`# leading comment
base_url = "https://auth.example.org" // trailing comment
/* a block comment
   over lines */
${USER}
tls { mode = "proxy" }
motd = <<EOT
}
client "fake" {
EOT
client "webapp" {
  secret_file = "secrets/webapp"
  audience = [
    "https://api.example.org/",   # braces } and { in comments are ignored
    "https://x.example.org/{id}",
  ]
  redirect_uris = ["https://app.example.org/cb"]
  refresh_lifetime = "forever"
}
`);
    assertProblem(lines, `${file}:9: unknown attribute "motd"`);
    assertProblem(lines, `${file}:20: client "webapp": refresh_lifetime "forever" is not a duration`);
  });
});

describe('top-level attributes', () => {
  test('base_url is required', async () => {
    const { lines, file } = await problemsOf(`${USER}\n`);
    assertProblem(lines, `${file}: base_url is required`);
  });

  test('base_url must not end with a slash', async () => {
    const { lines, file } = await problemsOf(VALID.replace('"https://auth.example.org"', '"https://auth.example.org/"'));
    assertProblem(lines, `${file}:1: base_url "https://auth.example.org/" must not end with "/"`, 'write "https://auth.example.org"');
  });

  test('base_url must be https unless the host is loopback', async () => {
    const { lines, file } = await problemsOf(VALID.replace('"https://auth.example.org"', '"http://auth.example.org"'));
    assertProblem(lines, `${file}:1: base_url "http://auth.example.org" must use https`);
    for (const loopback of ['http://localhost:8080', 'http://127.0.0.2:8080', 'http://[::1]:8080', 'http://127.0.0.1/auth']) {
      const { config } = await load(VALID.replace('"https://auth.example.org"', JSON.stringify(loopback)));
      assert.equal(config.baseUrl, loopback);
    }
  });

  test('base_url must have no query, no fragment, no credentials, and be a URL at all', async () => {
    for (const [value, complaint] of [
      ['https://auth.example.org/?x=1', 'must not have a query'],
      ['https://auth.example.org/a#b', 'must not have a fragment'],
      ['https://user:pw@auth.example.org', 'must not contain a user name or password'],
      ['auth.example.org', 'is not an absolute URL'],
      ['ftp://auth.example.org', 'must be an https URL'],
    ] as const) {
      const { lines, file } = await problemsOf(VALID.replace('"https://auth.example.org"', JSON.stringify(value)));
      assertProblem(lines, `${file}:1: base_url ${JSON.stringify(value)} `, complaint);
    }
  });

  test('base_url is the issuer as written: a form the URL parser would rewrite is refused, naming the form to write', async () => {
    for (const [value, written] of [
      ['https://AUTH.example.org', 'https://auth.example.org'],
      ['https://auth.example.org:443/x', 'https://auth.example.org/x'],
      ['https://auth.example.org/a/../b', 'https://auth.example.org/b'],
      ['https://auth.example.org/%2e%2e', 'https://auth.example.org'],
      ['https://auth.example.org/a b', 'https://auth.example.org/a%20b'],
    ] as const) {
      const { lines, file } = await problemsOf(VALID.replace('"https://auth.example.org"', JSON.stringify(value)));
      assertProblem(lines, `${file}:1: base_url ${JSON.stringify(value)} is written differently from the URL it names; write ${JSON.stringify(written)}`);
    }
  });

  test('a config file that is not UTF-8 is refused, naming the line of the first byte that is not', async () => {
    const file = await fixture(VALID);
    await writeFile(file, Buffer.concat([Buffer.from(VALID.replace('"Web app"', '"x"')), Buffer.from('client "tv" {\n  device = true\n  audience = ["https://api.example.org/'), Buffer.from([0xe9]), Buffer.from('"]\n}\n')]));
    await assert.rejects(loadConfig(file), (error: unknown) => {
      assert.ok(error instanceof ConfigInvalid);
      assert.deepEqual(error.problems.map(formatProblem), [`${file}:12: is not UTF-8 text; save it as UTF-8`]);
      return true;
    });
  });

  test('listen must be host:port', async () => {
    for (const value of ['999.1.1.1:8080', '[:::]:8080', '[127.0.0.1]:8080']) {
      const { lines, file } = await problemsOf(`listen = ${JSON.stringify(value)}\n${VALID}`);
      assertProblem(lines, `${file}:1: listen ${JSON.stringify(value)} is not host:port`);
    }
    const named = await load(`listen = "localhost:8080"\n${VALID}`);
    assert.deepEqual(named.config.listen, { host: 'localhost', port: 8080 });
    const { lines, file } = await problemsOf(`listen = "8080"\n${VALID}`);
    assertProblem(lines, `${file}:1: listen "8080" is not host:port`);
    const port = await problemsOf(`listen = "127.0.0.1:70000"\n${VALID}`);
    assertProblem(port.lines, `${port.file}:1: listen "127.0.0.1:70000" is not host:port`);
  });

  test('access_token_lifetime must be a positive duration', async () => {
    const { lines, file } = await problemsOf(`access_token_lifetime = "0s"\n${VALID}`);
    assertProblem(lines, `${file}:1: access_token_lifetime "0s" is not a duration; use e.g. 1h`);
  });

  test('log_level must be a known level', async () => {
    const { lines, file } = await problemsOf(`${VALID}log_level = "verbose"\n`);
    assertProblem(lines, `${file}:10: log_level is "verbose"; use one of`, '"debug"');
  });

  test('a value of the wrong type names the expected type', async () => {
    const { lines, file } = await problemsOf(`listen = 8080\n${VALID}`);
    assertProblem(lines, `${file}:1: listen must be "host:port" in quotes`);
  });

  test('references and expressions are refused: the config takes literals', async () => {
    const { lines, file } = await problemsOf(VALID.replace('"https://auth.example.org"', 'var.issuer'));
    assertProblem(lines, `${file}:1: base_url is an expression`);
  });
});

describe('syntax errors', () => {
  test('name the line and column', async () => {
    const { lines, file, error } = await problemsOf(`base_url = "https://auth.example.org"\nclient "webapp" {\n  audience = \n}\n`);
    assert.equal(error.problems[0]?.line, 3);
    assert.equal(error.problems[0]?.column, 14);
    assertProblem(lines, `${file}:3:14: Invalid expression`);
  });

  test('an unclosed block points at its opening brace', async () => {
    const { lines, file } = await problemsOf(`base_url = "https://auth.example.org"\n\nclient "webapp" {\n  audience = ["x"]\n`);
    assertProblem(lines, `${file}:3:17: Unclosed configuration block`);
  });

  test('an attribute set twice is named, with both lines', async () => {
    const { lines, file } = await problemsOf(`base_url = "https://a.example.org"\nbase_url = "https://b.example.org"\n`);
    assertProblem(lines, `${file}:2:1: Attribute redefined`, '"base_url" was already set at line 1');
  });

  test('an unreadable config file is a problem, not a crash', async () => {
    const missing = join(tmpdir(), 'pinpoint-no-such-dir', 'config.hcl');
    await assert.rejects(loadConfig(missing), (error: unknown) => {
      assert.ok(error instanceof ConfigInvalid);
      assert.match(formatProblem(error.problems[0]!), /pinpoint-no-such-dir\/config\.hcl: cannot read the configuration file: no such file/);
      return true;
    });
  });
});

describe('unknown names', () => {
  test('an unknown top-level attribute is named, with a suggestion', async () => {
    const { lines, file } = await problemsOf(`${VALID}acces_token_lifetime = "1h"\n`);
    assertProblem(lines, `${file}:10: unknown attribute "acces_token_lifetime"; did you mean "access_token_lifetime"?`);
  });

  test('an unknown top-level block is named', async () => {
    const { lines, file } = await problemsOf(`${VALID}clients "tv" {\n  audience = ["x"]\n}\n`);
    assertProblem(lines, `${file}:10: unknown block "clients"; did you mean "client"?`);
    const other = await problemsOf(`${VALID}logging {\n  port = 9100\n}\n`);
    assertProblem(other.lines, `${other.file}:10: unknown block "logging"; known: base_url`, 'dynamic_clients', 'resource_server');
  });

  test('an unknown attribute inside a block names the block and its line', async () => {
    const { lines, file } = await problemsOf(VALID.replace('  audience      =', '  redirect_uri  = ["https://x.example/cb"]\n  audience      ='));
    assertProblem(lines, `${file}:8: client "webapp": unknown attribute "redirect_uri"; did you mean "redirect_uris"?`);
  });

  test('an unknown block inside a block names the block and its line', async () => {
    const { lines, file } = await problemsOf(VALID.replace('  audience      =', '  pkce {\n    required = true\n  }\n  audience      ='));
    assertProblem(lines, `${file}:8: client "webapp": unknown block "pkce"; client takes only the nested block token_exchange`);
  });

  test('tls written as an attribute, a client without label or with two labels', async () => {
    const { lines, file } = await problemsOf(`${VALID}tls = { mode = "off" }\n`);
    assertProblem(lines, `${file}:10: tls must be a block`);
    const lone = await problemsOf(`base_url = "https://auth.example.org"\nclient {\n  audience = ["x"]\n}\n`);
    assertProblem(lone.lines, `${lone.file}:2: a client block needs one label`);
    const mixed = await problemsOf(`${VALID}client {\n  audience = ["x"]\n}\n`);
    assertProblem(mixed.lines, `${mixed.file}:10: client: every client block must be written as client "name" { ... }`);
    const labelledTls = await problemsOf(`${VALID}tls "main" {\n}\n`);
    assertProblem(labelledTls.lines, `${labelledTls.file}:10: the tls block takes no label`);
    const two = await problemsOf(`${VALID}client "a" "b" {\n  audience = ["x"]\n}\n`);
    assertProblem(two.lines, `${two.file}:10: a client block takes exactly one label`);
  });
});

describe('blocks given twice', () => {
  test('a duplicate client label points at the second block and names the first line', async () => {
    const { lines, file } = await problemsOf(`${VALID}client "webapp" {\n  audience = ["billing"]\n}\n`);
    assertProblem(lines, `${file}:10: client "webapp": is defined more than once (first at line 5)`);
  });

  test('a duplicate user label and a second tls block', async () => {
    const { lines, file } = await problemsOf(`${VALID}${USER}\ntls {\n  mode = "off"\n}\ntls {\n  mode = "proxy"\n}\n`);
    assertProblem(lines, `${file}:10: user "alice": is defined more than once (first at line 2)`);
    assertProblem(lines, `${file}:16: tls: appears more than once (first at line 13)`);
  });
});

describe('clients', () => {
  test('refresh_lifetime must be a duration (the message of the brief)', async () => {
    const { lines, file } = await problemsOf(VALID.replace('  audience', '  refresh_lifetime = "30 days"\n  audience'));
    assert.ok(
      lines.includes(`${file}:8: client "webapp": refresh_lifetime "30 days" is not a duration; use e.g. 720h or 30d`),
      lines.join('\n'),
    );
  });

  test('a device client with secret_file or redirect_uris is an error', async () => {
    const { lines, file } = await problemsOf(`${USER}
base_url = "https://auth.example.org"
client "tv" {
  device = true
  secret_file = "secrets/webapp"
  redirect_uris = ["https://tv.example/cb"]
  audience = ["https://api.example.org/"]
}
`);
    assertProblem(lines, `${file}:7: client "tv": secret_file is not allowed with device = true`);
    assertProblem(lines, `${file}:8: client "tv": redirect_uris is not allowed with device = true`);
  });

  test('device must be a boolean', async () => {
    const { lines, file } = await problemsOf(`${VALID}client "tv" {\n  device = "true"\n  audience = ["x"]\n}\n`);
    assertProblem(lines, `${file}:11: client "tv": device must be true or false`);
  });

  test('audience is required, non-empty, of non-empty strings, without repeats', async () => {
    const noAudience = await problemsOf(VALID.replace('  audience      = ["https://api.example.org/"]\n', ''));
    assertProblem(noAudience.lines, `${noAudience.file}:5: client "webapp": audience is required`);
    const empty = await problemsOf(VALID.replace('["https://api.example.org/"]', '[]'));
    assertProblem(empty.lines, `${empty.file}:8: client "webapp": audience must list at least one entry`);
    const blank = await problemsOf(VALID.replace('["https://api.example.org/"]', '["a", ""]'));
    assertProblem(blank.lines, `${blank.file}:8: client "webapp": audience entry 2 must not be empty`);
    const repeated = await problemsOf(VALID.replace('["https://api.example.org/"]', '["billing", "https://api.example.org/", "billing"]'));
    assertProblem(repeated.lines, `${repeated.file}:8: client "webapp": audience lists "billing" more than once`);
    const numbers = await problemsOf(VALID.replace('["https://api.example.org/"]', '[1]'));
    assertProblem(numbers.lines, `${numbers.file}:8: client "webapp": audience entry 1 must be a string`);
  });

  test('redirect URIs must be absolute and without fragment', async () => {
    const { lines, file } = await problemsOf(VALID.replace('["https://app.example.org/cb"]', '["/callback", "https://app.example.org/cb#x"]'));
    assertProblem(lines, `${file}:7: client "webapp": redirect_uris "/callback" is not an absolute URI`);
    assertProblem(lines, `${file}:7: client "webapp": redirect_uris "https://app.example.org/cb#x" must not contain a fragment`);
  });

  test('a public client needs redirect URIs', async () => {
    const { lines, file } = await problemsOf(`${VALID}client "spa" {\n  audience = ["x"]\n}\n`);
    assertProblem(lines, `${file}:10: client "spa": a public client needs redirect_uris`);
  });

  test('scopes must be scope tokens', async () => {
    const { lines, file } = await problemsOf(VALID.replace('  audience', '  scopes = ["openid", "read write"]\n  audience'));
    assertProblem(lines, `${file}:8: client "webapp": scopes "read write" is not a scope token`);
  });

  test('a client that needs a person, with no user and no federation, is an error', async () => {
    const { lines, file } = await problemsOf(`base_url = "https://auth.example.org"
client "tv" {
  device = true
  audience = ["https://api.example.org/"]
}
`);
    assertProblem(lines, `${file}:2: client "tv": needs a person to sign in, but there is no user or federation block`);
  });

  test('a client label that cannot be a client_id', async () => {
    const { lines, file } = await problemsOf(`${VALID}client "my app" {\n  redirect_uris = ["https://x.example/cb"]\n  audience = ["x"]\n}\n`);
    assertProblem(lines, `${file}:10: client "my app": the client_id (the label) must be non-empty printable ASCII without spaces`);
  });
});

describe('secret files', () => {
  test('a missing secret file is an error naming attribute, path and block', async () => {
    const { lines, file } = await problemsOf(VALID, {});
    const folder = dirname(file);
    assertProblem(lines, `${file}:6: client "webapp": secret_file "secrets/webapp" does not exist (${join(folder, 'secrets/webapp')})`);
  });

  test('an empty secret file, or one holding only a newline, is an error', async () => {
    for (const text of ['', '\n']) {
      const { lines, file } = await problemsOf(VALID, { 'secrets/webapp': { text } });
      assertProblem(lines, `${file}:6: client "webapp": secret_file "secrets/webapp" is empty`);
    }
  });

  test('a secret file that is a directory is an error', async () => {
    const { lines, file } = await problemsOf(VALID.replace('"secrets/webapp"', '"secrets"'));
    assertProblem(lines, `${file}:6: client "webapp": secret_file "secrets" is a directory`);
  });

  test('a secret file others can read gives a warning, not an error', async () => {
    const { config, warnings, file } = await load(VALID, { 'secrets/webapp': { text: 'webapp-secret', mode: 0o644 } });
    assert.equal(config.clients.get('webapp')?.secret, 'webapp-secret');
    assert.ok(
      warnings.some((warning) => warning.startsWith(`${file}:6: client "webapp": secret_file "secrets/webapp" is accessible by group or others (mode 0644)`)),
      warnings.join('\n'),
    );
    const { warnings: quiet } = await load(VALID);
    assert.ok(!quiet.some((warning) => warning.includes('secret_file')), 'a 0600 file gives no warning');
  });

  test('only one trailing newline is stripped', async () => {
    const { config } = await load(VALID, { 'secrets/webapp': { text: 'webapp-secret\n\n' } });
    assert.equal(config.clients.get('webapp')?.secret, 'webapp-secret\n');
    const { config: crlf } = await load(VALID, { 'secrets/webapp': { text: 'webapp-secret\r\n' } });
    assert.equal(crlf.clients.get('webapp')?.secret, 'webapp-secret');
  });

  test('relative paths resolve against the config file folder, not the working directory', async () => {
    const folder = await mkdtemp(join(tmpdir(), 'pinpoint-config-'));
    await mkdir(join(folder, 'etc'));
    await mkdir(join(folder, 'secrets'));
    await writeFile(join(folder, 'secrets', 'webapp'), 'from-the-parent');
    await chmod(join(folder, 'secrets', 'webapp'), 0o600);
    const file = join(folder, 'etc', 'config.hcl');
    await writeFile(file, `${VALID.replace('"secrets/webapp"', '"../secrets/webapp"')}state {\n  path = "data/pinpoint.db"\n}\n`);
    const { config } = await loadConfig(file);
    assert.equal(config.clients.get('webapp')?.secret, 'from-the-parent');
    assert.deepEqual(config.state, { kind: 'sqlite', path: join(folder, 'etc', 'data', 'pinpoint.db') });
  });

  test('federation secrets and postgres password files follow the same rules', async () => {
    const { lines, file } = await problemsOf(
      `${VALID}federation "campus" {
  issuer = "https://idp.example.org"
  client_id = "pinpoint"
  secret_file = "secrets/campus"
}
state {
  url = "postgres://pinpoint@db.internal/pinpoint"
  password_file = "secrets/db"
}
`,
      { ...DEFAULT_FILES, 'secrets/db': { text: '\n' } },
    );
    assertProblem(lines, `${file}:13: federation "campus": secret_file "secrets/campus" does not exist`);
    assertProblem(lines, `${file}:17: state: password_file "secrets/db" is empty`);
  });
});

describe('users and federations', () => {
  test('a password_hash that is not from hash-password is refused without echoing it', async () => {
    const { lines, file } = await problemsOf(VALID.replace(HASH, 'plain-text-password'));
    assertProblem(lines, `${file}:3: user "alice": password_hash is not a hash made by \`pinpoint hash-password\``);
    assert.ok(!lines.join('\n').includes('plain-text-password'));
  });

  test('a password_hash cheaper than new hashes (0.2.0 wrote N = 2^15) gets a warning naming the user; one of today is quiet', async () => {
    const older = await hashPassword('wonderland', { N: 2 ** 15, r: 8, p: 1 });
    const { warnings, file } = await load(VALID.replace(HASH, older));
    assert.ok(
      warnings.includes(`${file}:3: user "alice": password_hash uses scrypt N = 2^15, r = 8, p = 1, cheaper than N = 2^17, r = 8, p = 1 of new hashes; make a new one with \`pinpoint hash-password\``),
      warnings.join('\n'),
    );
    const { warnings: quiet } = await load(VALID);
    assert.ok(!quiet.some((warning) => warning.includes('password_hash')), quiet.join('\n'));
    const { warnings: example } = await loadConfig(resolve('config.example.hcl'));
    assert.ok(!example.some((warning) => warning.includes('password_hash')), example.join('\n'));
  });

  test('a user needs a password_hash; email must look like one', async () => {
    const { lines, file } = await problemsOf(`${VALID}user "bob" {\n  email = "bob"\n}\n`);
    assertProblem(lines, `${file}:10: user "bob": password_hash is required; generate it with \`pinpoint hash-password\``);
    assertProblem(lines, `${file}:11: user "bob": email "bob" is not an e-mail address`);
  });

  test('a user name may not hold a colon, so it can never equal a federated subject (upstream:sub)', async () => {
    const { lines, file } = await problemsOf(`${VALID}user "campus:bob" {\n  password_hash = "${HASH}"\n}\n`);
    assertProblem(lines, `${file}:10: user "campus:bob": the user name must be non-empty, without spaces, colons or control characters`);
  });

  test('a federation issuer must be https unless loopback, and its scopes must hold openid', async () => {
    const { lines, file } = await problemsOf(
      `${VALID}federation "campus" {
  issuer = "http://idp.example.org"
  client_id = "pinpoint"
  secret_file = "secrets/webapp"
  scopes = ["email", "profile"]
}
`,
    );
    assertProblem(lines, `${file}:11: federation "campus": issuer "http://idp.example.org" must use https`);
    assertProblem(lines, `${file}:14: federation "campus": scopes must contain "openid"`);
  });

  test('a federation needs issuer, client_id and secret_file; a loopback http issuer is fine', async () => {
    const { lines, file } = await problemsOf(`${VALID}federation "campus" {\n}\n`);
    for (const attribute of ['issuer', 'client_id', 'secret_file']) assertProblem(lines, `${file}:10: federation "campus": ${attribute} is required`);
    const { config } = await load(
      `${VALID}federation "local" {\n  issuer = "http://127.0.0.1:4000"\n  client_id = "p"\n  secret_file = "secrets/webapp"\n}\n`,
    );
    assert.equal(config.federations.get('local')?.issuer, 'http://127.0.0.1:4000');
  });
});

describe('tls and state', () => {
  test('tls terminate needs readable cert_file and key_file', async () => {
    const { lines, file } = await problemsOf(`${VALID}tls {\n  mode = "terminate"\n  cert_file = "tls/cert.pem"\n}\n`);
    assertProblem(lines, `${file}:10: tls: key_file is required when mode = "terminate"`);
    assertProblem(lines, `${file}:12: tls: cert_file does not exist`);
  });

  test('tls terminate resolves its files; a key others can read gives a warning', async () => {
    const { config, warnings, file } = await load(`${VALID}tls {\n  mode = "terminate"\n  cert_file = "tls/cert.pem"\n  key_file = "tls/key.pem"\n}\n`, {
      ...DEFAULT_FILES,
      'tls/cert.pem': { text: 'CERT', mode: 0o644 },
      'tls/key.pem': { text: 'KEY', mode: 0o640 },
    });
    const folder = dirname(file);
    assert.deepEqual(config.tls, { mode: 'terminate', certFile: join(folder, 'tls/cert.pem'), keyFile: join(folder, 'tls/key.pem') });
    assert.ok(warnings.some((warning) => warning.startsWith(`${file}:13: tls: key_file is accessible by group or others`)), warnings.join('\n'));
  });

  test('tls mode must be known; cert files without terminate are a mistake', async () => {
    const { lines, file } = await problemsOf(`${VALID}tls {\n  mode = "on"\n}\n`);
    assertProblem(lines, `${file}:11: tls: mode is "on"; use one of "off", "proxy", "terminate"`);
    const stray = await problemsOf(`${VALID}tls {\n  cert_file = "x"\n}\n`);
    assertProblem(stray.lines, `${stray.file}:11: tls: cert_file is only used when mode = "terminate"`);
  });

  test('state takes exactly one of path and url', async () => {
    const both = await problemsOf(`${VALID}state {\n  path = "x.db"\n  url = "postgres://db/x"\n}\n`);
    assertProblem(both.lines, `${both.file}:12: state: url cannot be combined with path`);
    const neither = await problemsOf(`${VALID}state {\n}\n`);
    assertProblem(neither.lines, `${neither.file}:10: state: needs path = "data/pinpoint.db" (SQLite) or url`);
  });

  test('state url must be PostgreSQL; schema must be an identifier; sqlite takes no schema', async () => {
    const { lines, file } = await problemsOf(`${VALID}state {\n  url = "mysql://db/x"\n  schema = "Auth; drop"\n}\n`);
    assertProblem(lines, `${file}:11: state: url must be a PostgreSQL URL starting with postgres:// or postgresql://`);
    assertProblem(lines, `${file}:12: state: schema "Auth; drop" is not a schema name`);
    const sqlite = await problemsOf(`${VALID}state {\n  path = "x.db"\n  schema = "auth"\n}\n`);
    assertProblem(sqlite.lines, `${sqlite.file}:12: state: schema is only used with url (PostgreSQL)`);
  });

  test('a password inside the state url gives a warning that does not repeat it', async () => {
    const { warnings } = await load(`${VALID}state {\n  url = "postgres://pinpoint:hunter2@db/x"\n}\n`);
    assert.ok(warnings.some((warning) => warning.includes('state: url holds a password')), warnings.join('\n'));
    assert.ok(!warnings.join('\n').includes('hunter2'));
  });
});

describe('every problem at once', () => {
  test('problems across blocks are all reported, in file order, each with its place', async () => {
    const { lines, file, error } = await problemsOf(
      `base_url = "http://auth.example.org/"
log_levl = "info"
${USER}
client "webapp" {
  secret_file      = "secrets/missing"
  redirect_uris    = ["https://app.example.org/cb"]
  audience         = ["a", "a"]
  refresh_lifetime = "30 days"
}
client "tv" {
  device      = true
  secret_file = "secrets/webapp"
  audience    = ["https://api.example.org/"]
}
tls {
  mode = "terminate"
}
`,
    );
    assertProblem(lines, `${file}:1: base_url "http://auth.example.org/" must use https`);
    assertProblem(lines, `${file}:2: unknown attribute "log_levl"`);
    assertProblem(lines, `${file}:7: client "webapp": secret_file "secrets/missing" does not exist`);
    assertProblem(lines, `${file}:9: client "webapp": audience lists "a" more than once`);
    assertProblem(lines, `${file}:10: client "webapp": refresh_lifetime "30 days" is not a duration`);
    assertProblem(lines, `${file}:14: client "tv": secret_file is not allowed with device = true`);
    assertProblem(lines, `${file}:17: tls: cert_file is required when mode = "terminate"`);
    assertProblem(lines, `${file}:17: tls: key_file is required when mode = "terminate"`);
    assert.equal(lines.length, 8, lines.join('\n'));
    const numbers = error.problems.map((problem) => problem.line ?? 0);
    assert.deepEqual(numbers, [...numbers].sort((a, b) => a - b), 'in file order');
    assert.match(error.message, /refresh_lifetime "30 days"/);
  });
});

describe('config.example.hcl, with its commented examples turned on', () => {
  test('loads, and every example means what its comment says', async () => {
    const example = await readFile(resolve('config.example.hcl'), 'utf8');
    // Uncomment the new blocks, trusted_proxies and the client's optional attributes, one level deep.
    let inBlock = false;
    const uncommented = example
      .split('\n')
      .map((line) => {
        if (/^# (limits|metrics|dynamic_clients) \{|^# resource_server "/.test(line)) inBlock = true;
        const turnOn = inBlock || /^# trusted_proxies =|^ {2}# (display_name|post_logout_redirect_uris|id_token_signing_alg|refresh_reuse_grace) /.test(line);
        if (line === '# }') inBlock = false;
        return turnOn ? line.replace('# ', '') : line;
      })
      .join('\n')
      .replace('path = "data/pinpoint.db"', 'path = "pinpoint.db"');
    const { config } = await load(uncommented, {
      'secrets/webapp.secret': { text: 'webapp-demo-secret\n' },
      'secrets/api.secret': { text: 'api-secret\n' },
    });
    assert.deepEqual(config.trustedProxies, ['127.0.0.1', '10.0.0.0/8']);
    assert.deepEqual(config.limits, { clientFailures: 300, addressFailures: 300, loginFailures: 10, loginFailuresAny: 100, userCodeFailures: 20, passwordHashes: 2, addressConnections: 1024 });
    assert.deepEqual(config.metrics, { listen: { host: '127.0.0.1', port: 9464 } });
    const webapp = config.clients.get('webapp');
    assert.equal(webapp?.displayName, 'Demo web app');
    assert.deepEqual(webapp?.postLogoutRedirectUris, ['http://127.0.0.1:9000/']);
    assert.equal(webapp?.idTokenSigningAlg, 'ES256');
    assert.equal(webapp?.refreshReuseGraceMs, 10_000);
    assert.equal(config.resourceServers.get('https://api.example.org/')?.secret, 'api-secret');
    assert.deepEqual(config.dynamicClients, {
      audience: ['https://mcp.example.org/mcp'],
      metadataDocuments: true,
      registration: 'open',
      scopes: ['openid', 'profile', 'mcp'],
      defaultScope: ['mcp'],
      refreshLifetimeMs: 720 * 3_600_000,
      refreshReuseGraceMs: 10_000,
      allowPrivateAddresses: false,
    });
  });
});

describe('trusted_proxies', () => {
  test('takes IPv4 and IPv6 addresses and CIDRs, kept as written', async () => {
    const entries = ['10.0.0.0/8', '192.0.2.7', '::1', '2001:db8::/32', '172.16.0.1/32', '::ffff:10.1.2.3'];
    const { config } = await load(`trusted_proxies = ${JSON.stringify(entries)}\n${VALID}`);
    assert.deepEqual(config.trustedProxies, entries);
    assert.ok(Object.isFrozen(config.trustedProxies));
  });

  test('an entry that is not an address or CIDR is refused, naming it', async () => {
    const { lines, file } = await problemsOf(
      `${VALID}trusted_proxies = ["localhost", "10.0.0.0/33", "::1/129", "10.0.0.0/x", "10.0.0.0/8/8", "fe80::1%eth0", "256.1.1.1"]\n`,
    );
    assertProblem(lines, `${file}:10: trusted_proxies "localhost" is not an IP address or CIDR`, 'host names are not resolved');
    assertProblem(lines, `${file}:10: trusted_proxies "10.0.0.0/33" has a prefix length that is not a number from 0 to 32`);
    assertProblem(lines, `${file}:10: trusted_proxies "::1/129" has a prefix length that is not a number from 0 to 128`);
    assertProblem(lines, `${file}:10: trusted_proxies "10.0.0.0/x" has a prefix length`);
    assertProblem(lines, `${file}:10: trusted_proxies "10.0.0.0/8/8" is not an IP address or CIDR`);
    assertProblem(lines, `${file}:10: trusted_proxies "fe80::1%eth0" has a zone index`);
    assertProblem(lines, `${file}:10: trusted_proxies "256.1.1.1" is not an IP address or CIDR`);
  });

  test('must be a list of strings, without repeats', async () => {
    const single = await problemsOf(`${VALID}trusted_proxies = "10.0.0.1"\n`);
    assertProblem(single.lines, `${single.file}:10: trusted_proxies must be a list of addresses or CIDRs`);
    const repeated = await problemsOf(`${VALID}trusted_proxies = ["::1", "::1"]\n`);
    assertProblem(repeated.lines, `${repeated.file}:10: trusted_proxies lists "::1" more than once`);
  });

  test('tls mode "proxy" without trusted proxies gets a warning; with them, none', async () => {
    const proxied = `${VALID}tls {\n  mode = "proxy"\n}\n`;
    const { warnings, file } = await load(proxied);
    assert.ok(
      warnings.some((warning) => warning.startsWith(`${file}:11: tls: mode is "proxy" but trusted_proxies is empty: forwarded headers will be ignored`)),
      warnings.join('\n'),
    );
    const { warnings: quiet } = await load(`trusted_proxies = ["127.0.0.1"]\n${proxied}`);
    assert.ok(!quiet.some((warning) => warning.includes('trusted_proxies')), quiet.join('\n'));
  });

  test('an entry that trusts every address gets a warning', async () => {
    const { warnings, file } = await load(`${VALID}trusted_proxies = ["0.0.0.0/0"]\n`);
    assert.ok(warnings.some((warning) => warning.startsWith(`${file}:10: trusted_proxies entry "0.0.0.0/0" trusts every address`)), warnings.join('\n'));
  });
});

describe('limits', () => {
  test('sets every limit; the ones left out keep their defaults', async () => {
    const all = await load(`${VALID}limits {
  client_failures    = 1000
  address_failures   = 2000
  login_failures     = 3
  login_failures_any = 50
  user_code_failures = 5
}
`);
    assert.deepEqual(all.config.limits, { clientFailures: 1000, addressFailures: 2000, loginFailures: 3, loginFailuresAny: 50, userCodeFailures: 5, passwordHashes: 2, addressConnections: 1024 });
    assert.ok(Object.isFrozen(all.config.limits));
    const connections = await load(`${VALID}limits {\n  address_connections = 64\n}\n`);
    assert.equal(connections.config.limits.addressConnections, 64);
    const some = await load(`${VALID}limits {\n  login_failures = 1000000\n}\n`);
    assert.deepEqual(some.config.limits, { clientFailures: 300, addressFailures: 300, loginFailures: 1_000_000, loginFailuresAny: 100, userCodeFailures: 20, passwordHashes: 2, addressConnections: 1024 });
  });

  test('each limit is a whole number from 1 to 1000000, without quotes', async () => {
    const { lines, file } = await problemsOf(`${VALID}limits {
  client_failures    = 0
  address_failures   = 1000001
  login_failures     = 2.5
  login_failures_any = "100"
  user_code_failures = true
  address_connections = 0
}
`);
    assertProblem(lines, `${file}:11: limits: client_failures is 0; use a whole number from 1 to 1000000`);
    assertProblem(lines, `${file}:12: limits: address_failures is 1000001; use a whole number from 1 to 1000000`);
    assertProblem(lines, `${file}:13: limits: login_failures is 2.5; use a whole number`);
    assertProblem(lines, `${file}:14: limits: login_failures_any must be a number without quotes`);
    assertProblem(lines, `${file}:15: limits: user_code_failures must be a whole number`);
    assertProblem(lines, `${file}:16: limits: address_connections is 0; use a whole number from 1 to 1000000`);
    assert.equal(lines.length, 6, lines.join('\n'));
  });

  test('an unknown attribute is named with a suggestion; the block is written once', async () => {
    const { lines, file } = await problemsOf(`${VALID}limits {\n  login_failure = 5\n}\nlimits {\n}\n`);
    assertProblem(lines, `${file}:11: limits: unknown attribute "login_failure"; did you mean "login_failures"?`);
    assertProblem(lines, `${file}:13: limits: appears more than once (first at line 10)`);
    const far = await problemsOf(`${VALID}limits {\n  burst = 5\n}\n`);
    assertProblem(far.lines, `${far.file}:11: limits: unknown attribute "burst"; known in limits: client_failures, address_failures`);
  });
});

describe('metrics', () => {
  test('listen is host:port on its own listener', async () => {
    const { config } = await load(`${VALID}metrics {\n  listen = "[::1]:9464"\n}\n`);
    assert.deepEqual(config.metrics, { listen: { host: '::1', port: 9464 } });
    assert.ok(Object.isFrozen(config.metrics?.listen));
  });

  test('listen is required inside the block and must be host:port', async () => {
    const missing = await problemsOf(`${VALID}metrics {\n}\n`);
    assertProblem(missing.lines, `${missing.file}:10: metrics: listen is required; write e.g. listen = "127.0.0.1:9464"`);
    const bad = await problemsOf(`${VALID}metrics {\n  listen = "9464"\n}\n`);
    assertProblem(bad.lines, `${bad.file}:11: metrics: listen "9464" is not host:port; write e.g. "127.0.0.1:9464"`);
    const unknown = await problemsOf(`${VALID}metrics {\n  listen = "127.0.0.1:9464"\n  path = "/metrics"\n}\n`);
    assertProblem(unknown.lines, `${unknown.file}:12: metrics: unknown attribute "path"; known in metrics: listen`);
  });

  test('listen may not be the main listen address, the default one included', async () => {
    const same = await problemsOf(`listen = "127.0.0.1:9000"\n${VALID}metrics {\n  listen = "127.0.0.1:9000"\n}\n`);
    assertProblem(same.lines, `${same.file}:12: metrics: listen "127.0.0.1:9000" is the main listen address (127.0.0.1:9000)`);
    const byDefault = await problemsOf(`${VALID}metrics {\n  listen = "127.0.0.1:8080"\n}\n`);
    assertProblem(byDefault.lines, `${byDefault.file}:11: metrics: listen "127.0.0.1:8080" is the main listen address`);
    const wildcard = await problemsOf(`listen = "0.0.0.0:8080"\n${VALID}metrics {\n  listen = "127.0.0.1:8080"\n}\n`);
    assertProblem(wildcard.lines, `${wildcard.file}:12: metrics: listen "127.0.0.1:8080" is the main listen address (0.0.0.0:8080)`);
    const { config } = await load(`${VALID}metrics {\n  listen = "127.0.0.1:8081"\n}\n`);
    assert.equal(config.metrics?.listen.port, 8081);
  });
});

describe('client attributes for logout, ID tokens and refresh reuse', () => {
  const withAttributes = (attributes: string): string => VALID.replace('  audience', `${attributes}\n  audience`);

  test('are read', async () => {
    const { config } = await load(
      withAttributes(`  display_name = "Web app"
  post_logout_redirect_uris = ["https://app.example.org/", "https://app.example.org/bye"]
  id_token_signing_alg = "ES256"
  refresh_reuse_grace = "10s"
  refresh_lifetime = "720h"`),
    );
    const client = config.clients.get('webapp');
    assert.equal(client?.displayName, 'Web app');
    assert.deepEqual(client?.postLogoutRedirectUris, ['https://app.example.org/', 'https://app.example.org/bye']);
    assert.ok(Object.isFrozen(client?.postLogoutRedirectUris));
    assert.equal(client?.idTokenSigningAlg, 'ES256');
    assert.equal(client?.refreshReuseGraceMs, 10_000);
  });

  test('refresh_reuse_grace takes "0s" (none) up to "60s"', async () => {
    for (const [written, milliseconds] of [['0s', 0], ['0', 0], ['500ms', 500], ['60s', 60_000], ['1m', 60_000]] as const) {
      const { config } = await load(withAttributes(`  refresh_reuse_grace = "${written}"\n  refresh_lifetime = "1h"`));
      assert.equal(config.clients.get('webapp')?.refreshReuseGraceMs, milliseconds, written);
    }
  });

  test('refresh_reuse_grace over 60s, or not a duration, is refused', async () => {
    const over = await problemsOf(withAttributes('  refresh_reuse_grace = "61s"'));
    assertProblem(over.lines, `${over.file}:8: client "webapp": refresh_reuse_grace "61s" is longer than the most allowed, "60s"`);
    const hour = await problemsOf(withAttributes('  refresh_reuse_grace = "1h"'));
    assertProblem(hour.lines, `${hour.file}:8: client "webapp": refresh_reuse_grace "1h" is longer than the most allowed`);
    const words = await problemsOf(withAttributes('  refresh_reuse_grace = "ten seconds"'));
    assertProblem(words.lines, `${words.file}:8: client "webapp": refresh_reuse_grace "ten seconds" is not a duration; use e.g. 10s, or 0s for none`);
    const number = await problemsOf(withAttributes('  refresh_reuse_grace = 10'));
    assertProblem(number.lines, `${number.file}:8: client "webapp": refresh_reuse_grace must be a duration in quotes`);
  });

  test('a refresh_reuse_grace without refresh_lifetime gets a warning: there is nothing to reuse', async () => {
    const { warnings, file } = await load(withAttributes('  refresh_reuse_grace = "5s"'));
    assert.ok(warnings.some((warning) => warning.startsWith(`${file}:8: client "webapp": refresh_reuse_grace has no effect`)), warnings.join('\n'));
  });

  test('id_token_signing_alg is RS256 or ES256', async () => {
    const { lines, file } = await problemsOf(withAttributes('  id_token_signing_alg = "RS265"'));
    assertProblem(lines, `${file}:8: client "webapp": id_token_signing_alg is "RS265"; use one of "RS256", "ES256"`);
    const lower = await problemsOf(withAttributes('  id_token_signing_alg = "es256"'));
    assertProblem(lower.lines, `${lower.file}:8: client "webapp": id_token_signing_alg is "es256"; use one of "RS256", "ES256"`);
  });

  test('display_name is a non-empty string on one line', async () => {
    const empty = await problemsOf(withAttributes('  display_name = ""'));
    assertProblem(empty.lines, `${empty.file}:8: client "webapp": display_name must not be empty`);
    const number = await problemsOf(withAttributes('  display_name = 42'));
    assertProblem(number.lines, `${number.file}:8: client "webapp": display_name must be a string in quotes`);
    const broken = await problemsOf(withAttributes('  display_name = "Web\\napp"'));
    assertProblem(broken.lines, `${broken.file}:8: client "webapp": display_name must not contain control characters`);
  });

  test('post_logout_redirect_uris are absolute, without fragment, without repeats', async () => {
    const { lines, file } = await problemsOf(withAttributes('  post_logout_redirect_uris = ["/bye", "https://app.example.org/#x", "https://a.example/", "https://a.example/"]'));
    assertProblem(lines, `${file}:8: client "webapp": post_logout_redirect_uris "/bye" is not an absolute URI`);
    assertProblem(lines, `${file}:8: client "webapp": post_logout_redirect_uris "https://app.example.org/#x" must not contain a fragment`);
    assertProblem(lines, `${file}:8: client "webapp": post_logout_redirect_uris lists "https://a.example/" more than once`);
    const single = await problemsOf(withAttributes('  post_logout_redirect_uris = "https://app.example.org/"'));
    assertProblem(single.lines, `${single.file}:8: client "webapp": post_logout_redirect_uris must be a list of URIs`);
  });

  test('a device client may not have post_logout_redirect_uris (it has no browser)', async () => {
    const { lines, file } = await problemsOf(`${VALID}client "tv" {
  device = true
  audience = ["https://api.example.org/"]
  post_logout_redirect_uris = ["https://tv.example/"]
}
`);
    assertProblem(lines, `${file}:13: client "tv": post_logout_redirect_uris is not allowed with device = true`);
  });

  test('loopback redirect URIs may leave out the port', async () => {
    const uris = ['http://127.0.0.1/callback', 'http://[::1]/callback', 'http://localhost/callback', 'http://127.0.0.1:9000/callback'];
    const { config } = await load(VALID.replace('["https://app.example.org/cb"]', JSON.stringify(uris)));
    assert.deepEqual(config.clients.get('webapp')?.redirectUris, uris);
  });

  test('a misspelt new attribute gets a suggestion', async () => {
    const { lines, file } = await problemsOf(withAttributes('  post_logout_redirect_uri = ["https://app.example.org/"]'));
    assertProblem(lines, `${file}:8: client "webapp": unknown attribute "post_logout_redirect_uri"; did you mean "post_logout_redirect_uris"?`);
  });
});

const API_SECRET: Record<string, FileSpec> = { ...DEFAULT_FILES, 'secrets/api': { text: 'api-secret\n' } };

describe('resource_server', () => {
  test('reads its secret like a client secret; the label is an audience entry of a client', async () => {
    const { config } = await load(`${VALID}resource_server "https://api.example.org/" {\n  secret_file = "secrets/api"\n}\n`, API_SECRET);
    assert.deepEqual(config.resourceServers.get('https://api.example.org/'), { label: 'https://api.example.org/', secret: 'api-secret' });
    assert.ok(Object.isFrozen(config.resourceServers.get('https://api.example.org/')));
    assert.throws(() => (config.resourceServers as Map<string, unknown>).set('x', {}));
  });

  test('a label from dynamic_clients.audience is accepted too', async () => {
    const { config } = await load(
      `${VALID}dynamic_clients {\n  audience = ["https://mcp.example.org/mcp"]\n  registration = "open"\n}\nresource_server "https://mcp.example.org/mcp" {\n  secret_file = "secrets/api"\n}\n`,
      API_SECRET,
    );
    assert.equal(config.resourceServers.get('https://mcp.example.org/mcp')?.secret, 'api-secret');
  });

  test('a label that is no requestable audience entry is refused, saying why', async () => {
    const { lines, file } = await problemsOf(
      VALID.replace('["https://api.example.org/"]', '["https://api.example.org/", "billing", "https://docs.example.org/#v2"]') +
        `resource_server "billing" {
  secret_file = "secrets/api"
}
resource_server "https://docs.example.org/#v2" {
  secret_file = "secrets/api"
}
resource_server "https://api.example.org" {
  secret_file = "secrets/api"
}
resource_server "https://elsewhere.example.net/" {
  secret_file = "secrets/api"
}
`,
      API_SECRET,
    );
    assertProblem(lines, `${file}:10: resource_server "billing": the label must be an audience entry that can be named as resource`, 'it is a logical name');
    assertProblem(lines, `${file}:13: resource_server "https://docs.example.org/#v2": the label must be an audience entry`, 'a URI with a fragment');
    assertProblem(
      lines,
      `${file}:16: resource_server "https://api.example.org": the label is not in the audience of any client or of dynamic_clients`,
      'did you mean "https://api.example.org/"?',
    );
    assertProblem(lines, `${file}:19: resource_server "https://elsewhere.example.net/": the label is not in the audience of any client`);
    assert.equal(lines.length, 4, lines.join('\n'));
  });

  test('secret_file is required and follows the secret-file rules; unknown attributes are named', async () => {
    const { lines, file } = await problemsOf(`${VALID}resource_server "https://api.example.org/" {\n  secret = "inline"\n}\n`);
    assertProblem(lines, `${file}:10: resource_server "https://api.example.org/": secret_file is required`);
    assertProblem(lines, `${file}:11: resource_server "https://api.example.org/": unknown attribute "secret"; known in resource_server: secret_file`);
    const empty = await problemsOf(`${VALID}resource_server "https://api.example.org/" {\n  secret_file = "secrets/api"\n}\n`, {
      ...DEFAULT_FILES,
      'secrets/api': { text: '\n' },
    });
    assertProblem(empty.lines, `${empty.file}:11: resource_server "https://api.example.org/": secret_file "secrets/api" is empty`);
    const { warnings, file: exposed } = await load(`${VALID}resource_server "https://api.example.org/" {\n  secret_file = "secrets/api"\n}\n`, {
      ...DEFAULT_FILES,
      'secrets/api': { text: 'api-secret', mode: 0o644 },
    });
    assert.ok(
      warnings.some((warning) => warning.startsWith(`${exposed}:11: resource_server "https://api.example.org/": secret_file "secrets/api" is accessible by group or others`)),
      warnings.join('\n'),
    );
  });

  test('needs one label, given once, that is not also a client_id', async () => {
    const lone = await problemsOf(`${VALID}resource_server {\n  secret_file = "secrets/api"\n}\n`, API_SECRET);
    assertProblem(lone.lines, `${lone.file}:10: a resource_server block needs one label; write resource_server "https://api.example.org/" { ... }`);
    const twice = await problemsOf(
      `${VALID}resource_server "https://api.example.org/" {\n  secret_file = "secrets/api"\n}\nresource_server "https://api.example.org/" {\n  secret_file = "secrets/api"\n}\n`,
      API_SECRET,
    );
    assertProblem(twice.lines, `${twice.file}:13: resource_server "https://api.example.org/": is defined more than once (first at line 10)`);
    const clash = await problemsOf(
      `${VALID}client "https://api.example.org/" {\n  secret_file = "secrets/webapp"\n  audience = ["https://api.example.org/"]\n}\nresource_server "https://api.example.org/" {\n  secret_file = "secrets/api"\n}\n`,
      API_SECRET,
    );
    assertProblem(clash.lines, `${clash.file}:14: resource_server "https://api.example.org/": the label is also a client_id`);
  });
});

describe('dynamic_clients', () => {
  test('every attribute is read', async () => {
    const { config } = await load(
      `${VALID}dynamic_clients {
  audience                = ["https://mcp.example.org/mcp", "billing"]
  metadata_documents      = true
  registration            = "token"
  token_file              = "secrets/registration"
  scopes                  = ["openid", "profile", "mcp"]
  default_scope           = "openid mcp"
  refresh_lifetime        = "720h"
  refresh_reuse_grace     = "10s"
  allow_private_addresses = true
}
`,
      { ...DEFAULT_FILES, 'secrets/registration': { text: 'initial-access-token\n' } },
    );
    assert.deepEqual(config.dynamicClients, {
      audience: ['https://mcp.example.org/mcp', 'billing'],
      metadataDocuments: true,
      registration: 'token',
      registrationToken: 'initial-access-token',
      scopes: ['openid', 'profile', 'mcp'],
      defaultScope: ['openid', 'mcp'],
      refreshLifetimeMs: 720 * 3_600_000,
      refreshReuseGraceMs: 10_000,
      allowPrivateAddresses: true,
    });
    assert.ok(Object.isFrozen(config.dynamicClients));
    assert.ok(Object.isFrozen(config.dynamicClients?.defaultScope));
  });

  test('defaults: no registration, no metadata documents, openid profile email, no default scope, no refresh tokens', async () => {
    const { config, warnings, file } = await load(`${VALID}dynamic_clients {\n  audience = ["https://mcp.example.org/mcp"]\n}\n`);
    assert.deepEqual(config.dynamicClients, {
      audience: ['https://mcp.example.org/mcp'],
      metadataDocuments: false,
      registration: 'off',
      scopes: ['openid', 'profile', 'email'],
      refreshReuseGraceMs: 0,
      allowPrivateAddresses: false,
    });
    assert.ok(
      warnings.some((warning) => warning.startsWith(`${file}:10: dynamic_clients: registration is "off" and metadata_documents is false, so no dynamic client can appear`)),
      warnings.join('\n'),
    );
  });

  test('metadata documents or registration on: no "cannot appear" warning; allow_private_addresses on: a warning', async () => {
    const { warnings, file } = await load(`${VALID}dynamic_clients {\n  audience = ["x"]\n  metadata_documents = true\n  allow_private_addresses = true\n}\n`);
    assert.ok(!warnings.some((warning) => warning.includes('no dynamic client can appear')), warnings.join('\n'));
    assert.ok(warnings.some((warning) => warning.startsWith(`${file}:13: dynamic_clients: allow_private_addresses is true`) && warning.includes('tests only')), warnings.join('\n'));
  });

  test('audience is required and not empty', async () => {
    const missing = await problemsOf(`${VALID}dynamic_clients {\n  registration = "open"\n}\n`);
    assertProblem(missing.lines, `${missing.file}:10: dynamic_clients: audience is required; list the resource servers dynamic clients get tokens for`);
    const empty = await problemsOf(`${VALID}dynamic_clients {\n  audience = []\n}\n`);
    assertProblem(empty.lines, `${empty.file}:11: dynamic_clients: audience must list at least one entry`);
  });

  test('registration is off, open or token; token needs token_file, and only token takes it', async () => {
    const typo = await problemsOf(`${VALID}dynamic_clients {\n  audience = ["x"]\n  registration = "opne"\n}\n`);
    assertProblem(typo.lines, `${typo.file}:12: dynamic_clients: registration is "opne"; use one of "off", "open", "token"`);
    const noFile = await problemsOf(`${VALID}dynamic_clients {\n  audience = ["x"]\n  registration = "token"\n}\n`);
    assertProblem(noFile.lines, `${noFile.file}:10: dynamic_clients: token_file is required when registration = "token"`);
    const stray = await problemsOf(`${VALID}dynamic_clients {\n  audience = ["x"]\n  registration = "open"\n  token_file = "secrets/webapp"\n}\n`);
    assertProblem(stray.lines, `${stray.file}:13: dynamic_clients: token_file is only used when registration = "token" (registration is "open")`);
  });

  test('token_file follows the secret-file rules', async () => {
    const block = `${VALID}dynamic_clients {\n  audience = ["x"]\n  registration = "token"\n  token_file = "secrets/registration"\n}\n`;
    const missing = await problemsOf(block);
    assertProblem(missing.lines, `${missing.file}:13: dynamic_clients: token_file "secrets/registration" does not exist`);
    const { warnings, file } = await load(block, { ...DEFAULT_FILES, 'secrets/registration': { text: 'token', mode: 0o640 } });
    assert.ok(warnings.some((warning) => warning.startsWith(`${file}:13: dynamic_clients: token_file "secrets/registration" is accessible by group or others`)), warnings.join('\n'));
  });

  test('default_scope is a scope string whose values are all in scopes', async () => {
    const outside = await problemsOf(`${VALID}dynamic_clients {\n  audience = ["x"]\n  default_scope = "openid mcp"\n}\n`);
    assertProblem(outside.lines, `${outside.file}:12: dynamic_clients: default_scope holds "mcp", which is not in scopes`);
    assert.equal(outside.lines.length, 1, outside.lines.join('\n'));
    const malformed = await problemsOf(`${VALID}dynamic_clients {\n  audience = ["x"]\n  default_scope = "openid  profile"\n}\n`);
    assertProblem(malformed.lines, `${malformed.file}:12: dynamic_clients: default_scope "openid  profile" is not a scope string`);
    const empty = await problemsOf(`${VALID}dynamic_clients {\n  audience = ["x"]\n  default_scope = ""\n}\n`);
    assertProblem(empty.lines, `${empty.file}:12: dynamic_clients: default_scope "" is not a scope string`);
    const list = await problemsOf(`${VALID}dynamic_clients {\n  audience = ["x"]\n  default_scope = ["openid"]\n}\n`);
    assertProblem(list.lines, `${list.file}:12: dynamic_clients: default_scope must be a string in quotes, e.g. "openid mcp"`);
    const twice = await problemsOf(`${VALID}dynamic_clients {\n  audience = ["x"]\n  default_scope = "openid openid"\n}\n`);
    assertProblem(twice.lines, `${twice.file}:12: dynamic_clients: default_scope lists "openid" more than once`);
  });

  test('refresh_lifetime is a duration; refresh_reuse_grace at most 60s', async () => {
    const { lines, file } = await problemsOf(`${VALID}dynamic_clients {
  audience = ["x"]
  refresh_lifetime = "a month"
  refresh_reuse_grace = "2m"
  metadata_documents = "yes"
}
`);
    assertProblem(lines, `${file}:12: dynamic_clients: refresh_lifetime "a month" is not a duration`);
    assertProblem(lines, `${file}:13: dynamic_clients: refresh_reuse_grace "2m" is longer than the most allowed, "60s"`);
    assertProblem(lines, `${file}:14: dynamic_clients: metadata_documents must be true or false`);
  });

  test('an unknown attribute gets a suggestion; the block is written once', async () => {
    const { lines, file } = await problemsOf(`${VALID}dynamic_clients {\n  audience = ["x"]\n  allow_private_adresses = true\n}\ndynamic_clients {\n  audience = ["y"]\n}\n`);
    assertProblem(lines, `${file}:12: dynamic_clients: unknown attribute "allow_private_adresses"; did you mean "allow_private_addresses"?`);
    assertProblem(lines, `${file}:14: dynamic_clients: appears more than once (first at line 10)`);
    const labelled = await problemsOf(`${VALID}dynamic_clients "mcp" {\n  audience = ["x"]\n}\n`);
    assertProblem(labelled.lines, `${labelled.file}:10: the dynamic_clients block takes no label`);
  });

  test('dynamic clients need a person: without a user or federation block the config is refused', async () => {
    const { lines, file } = await problemsOf(`base_url = "https://auth.example.org"
client "batch" {
  secret_file = "secrets/webapp"
  audience    = ["https://api.example.org/"]
}
dynamic_clients {
  audience     = ["https://mcp.example.org/mcp"]
  registration = "open"
}
`);
    assertProblem(lines, `${file}:6: dynamic_clients: dynamic clients need a person to sign in, but there is no user or federation block`);
    assert.equal(lines.length, 1, lines.join('\n'));
  });
});

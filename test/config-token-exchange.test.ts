/** The `token_exchange` block of a client (DESIGN.md §3, §12) on real files: what loads, what is refused, what `check` says. */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { describe, test } from 'node:test';
import { ConfigInvalid, formatProblem, loadConfig } from '../src/config/load.js';
import { describeConfig, renderReport } from '../src/config/report.js';
import type { Config } from '../src/config/types.js';
import { hashPassword } from '../src/crypto/password.js';

const HASH = await hashPassword('wonderland', { N: 2 ** 14, r: 8, p: 1 });

/** Lines 1-4: issuer and user; the webapp client from line 5 (its audience holds the orders server). */
const HEAD = `base_url = "https://auth.example.org"
user "alice" {
  password_hash = "${HASH}"
}
client "webapp" {
  secret_file   = "secrets/webapp"
  redirect_uris = ["https://app.example.org/cb"]
  audience      = ["https://orders.example.org/", "orders-logical", "https://api.example.org/#v2"]
}
`;

/** A client "orders-api" from line 10 with `block` as its last lines (the token_exchange block from line 13). */
function withOrders(block: string, attributes = 'secret_file = "secrets/orders"'): string {
  return `${HEAD}client "orders-api" {
  ${attributes}
  audience = ["https://inventory.example.org/", "https://billing.example.org/"]
${block}
}
`;
}

const EXCHANGE = `  token_exchange {
    subject_audience = ["https://orders.example.org/"]
  }`;

async function fixture(config: string): Promise<string> {
  const folder = await mkdtemp(join(tmpdir(), 'pinpoint-config-tx-'));
  for (const name of ['secrets/webapp', 'secrets/orders']) {
    await mkdir(dirname(join(folder, name)), { recursive: true });
    await writeFile(join(folder, name), `${name}-secret\n`, { mode: 0o600 });
  }
  const file = join(folder, 'config.hcl');
  await writeFile(file, config);
  return file;
}

async function load(text: string): Promise<Config> {
  return (await loadConfig(await fixture(text))).config;
}

async function problemsOf(text: string): Promise<{ lines: string[]; file: string }> {
  const file = await fixture(text);
  try {
    await loadConfig(file);
  } catch (error) {
    if (error instanceof ConfigInvalid) return { lines: error.problems.map(formatProblem), file };
    throw error;
  }
  assert.fail('the configuration should have been refused');
}

function assertProblem(lines: readonly string[], prefix: string, ...fragments: string[]): void {
  const found = lines.find((line) => line.startsWith(prefix) && fragments.every((fragment) => line.includes(fragment)));
  assert.ok(found, `no problem starting with ${JSON.stringify(prefix)} containing ${JSON.stringify(fragments)} in:\n${lines.join('\n')}`);
}

describe('client token_exchange block', () => {
  test('a confidential client with the block loads it; others have none; check names it', async () => {
    const config = await load(withOrders(EXCHANGE));
    assert.deepEqual(config.clients.get('orders-api')?.tokenExchange, { subjectAudience: ['https://orders.example.org/'] });
    assert.equal(config.clients.get('webapp')?.tokenExchange, undefined);
    const report = describeConfig(config, []);
    const orders = report.clients?.find((client) => client.clientId === 'orders-api');
    assert.deepEqual(orders?.tokenExchange, { subjectAudience: ['https://orders.example.org/'] });
    assert.equal(report.clients?.find((client) => client.clientId === 'webapp')?.tokenExchange, undefined);
    assert.match(renderReport(report), /token exchange\s+exchanges tokens addressed to https:\/\/orders\.example\.org\//);
  });

  test('on a public or a device client it is an error', async () => {
    const publicClient = await problemsOf(withOrders(EXCHANGE, 'redirect_uris = ["https://orders.example.org/cb"]'));
    assertProblem(publicClient.lines, `${publicClient.file}:13: client "orders-api" token_exchange: `, 'needs a confidential client (one with secret_file or jwks_file), but this is a public client');
    const device = await problemsOf(withOrders(EXCHANGE, 'device = true'));
    assertProblem(device.lines, `${device.file}:13: client "orders-api" token_exchange: `, 'but this is a device client');
  });

  test('subject_audience is required, not empty, absolute URIs without fragment, each in some audience, never the issuer', async () => {
    const missing = await problemsOf(withOrders('  token_exchange {\n  }'));
    assertProblem(missing.lines, `${missing.file}:13: client "orders-api" token_exchange: subject_audience is required`);
    const empty = await problemsOf(withOrders('  token_exchange {\n    subject_audience = []\n  }'));
    assertProblem(empty.lines, `${empty.file}:14: client "orders-api" token_exchange: subject_audience must list at least one entry`);
    const logical = await problemsOf(withOrders('  token_exchange {\n    subject_audience = ["orders-logical"]\n  }'));
    assertProblem(logical.lines, `${logical.file}:14: client "orders-api" token_exchange: subject_audience "orders-logical" is not an absolute URI`);
    const fragment = await problemsOf(withOrders('  token_exchange {\n    subject_audience = ["https://api.example.org/#v2"]\n  }'));
    assertProblem(fragment.lines, `${fragment.file}:14: client "orders-api" token_exchange: subject_audience "https://api.example.org/#v2" must not contain a fragment`);
    const nowhere = await problemsOf(withOrders('  token_exchange {\n    subject_audience = ["https://orders.example.org"]\n  }'));
    assertProblem(nowhere.lines, `${nowhere.file}:14: client "orders-api" token_exchange: subject_audience lists "https://orders.example.org", which is in the audience of no client`, 'did you mean "https://orders.example.org/"?');
    const issuer = await problemsOf(withOrders('  token_exchange {\n    subject_audience = ["https://auth.example.org"]\n  }'));
    assertProblem(issuer.lines, `${issuer.file}:14: client "orders-api" token_exchange: subject_audience lists the issuer`);
    const repeated = await problemsOf(withOrders('  token_exchange {\n    subject_audience = ["https://orders.example.org/", "https://orders.example.org/"]\n  }'));
    assertProblem(repeated.lines, `${repeated.file}:14: client "orders-api" token_exchange: subject_audience lists "https://orders.example.org/" more than once`);
  });

  test('unknown attributes and blocks inside it are errors; it is a block, written once, without label', async () => {
    const typo = await problemsOf(withOrders('  token_exchange {\n    subject_audiences = ["https://orders.example.org/"]\n  }'));
    assertProblem(typo.lines, `${typo.file}:14: client "orders-api" token_exchange: unknown attribute "subject_audiences"; did you mean "subject_audience"?`);
    const nested = await problemsOf(withOrders('  token_exchange {\n    subject_audience = ["https://orders.example.org/"]\n    actor {\n      x = 1\n    }\n  }'));
    assertProblem(nested.lines, `${nested.file}:15: client "orders-api" token_exchange: unknown block "actor"; token_exchange takes no nested blocks`);
    const misspelt = await problemsOf(withOrders('  token_exchang {\n    subject_audience = ["https://orders.example.org/"]\n  }'));
    assertProblem(misspelt.lines, `${misspelt.file}:13: client "orders-api": unknown block "token_exchang"; did you mean "token_exchange"?`);
    const attribute = await problemsOf(withOrders('  token_exchange = { subject_audience = ["https://orders.example.org/"] }'));
    assertProblem(attribute.lines, `${attribute.file}:13: client "orders-api": token_exchange must be a block`);
    const labelled = await problemsOf(withOrders('  token_exchange "x" {\n    subject_audience = ["https://orders.example.org/"]\n  }'));
    assertProblem(labelled.lines, `${labelled.file}:13: client "orders-api": the token_exchange block takes no label`);
    const twice = await problemsOf(withOrders(`${EXCHANGE}\n${EXCHANGE}`));
    assertProblem(twice.lines, `${twice.file}:13: client "orders-api": token_exchange appears more than once`);
  });
});

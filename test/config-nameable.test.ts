/**
 * One check of "an address a token can be addressed to as resource" (DESIGN.md §3, §12) for a resource_server label
 * and a token_exchange subject_audience entry, on real files: each block keeps its wording, every entry is judged.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { ConfigInvalid, formatProblem, loadConfig } from '../src/config/load.js';

/** Lines 1-4: issuer and a client whose audience holds the orders server; `more` from line 5. */
function config(more: string): string {
  return `base_url = "https://auth.example.org"
client "orders-api" {
  secret_file = "orders.secret"
  audience    = ["https://orders.example.org/", "orders-logical"]
${more}
}
`;
}

async function problemsOf(text: string): Promise<{ lines: string[]; file: string }> {
  const folder = await mkdtemp(join(tmpdir(), 'pinpoint-config-nameable-'));
  await mkdir(folder, { recursive: true });
  await writeFile(join(folder, 'orders.secret'), 'orders-secret\n', { mode: 0o600 });
  const file = join(folder, 'config.hcl');
  await writeFile(file, text);
  try {
    await loadConfig(file);
  } catch (error) {
    if (error instanceof ConfigInvalid) return { lines: error.problems.map(formatProblem), file };
    throw error;
  }
  assert.fail('the configuration should have been refused');
}

describe('nameable addresses: token_exchange subject_audience and resource_server labels', () => {
  test('a subject_audience with a logical name and an address of no audience names both at once, each in its entry wording', async () => {
    const { lines, file } = await problemsOf(config('  token_exchange {\n    subject_audience = ["orders-logical", "https://orders.example.org"]\n  }'));
    const mine = lines.filter((line) => line.startsWith(`${file}:6: client "orders-api" token_exchange: subject_audience `));
    assert.deepEqual(mine, [
      `${file}:6: client "orders-api" token_exchange: subject_audience "orders-logical" is not an absolute URI; list this client's own address as a resource server, e.g. "https://orders.example.org/"`,
      `${file}:6: client "orders-api" token_exchange: subject_audience lists "https://orders.example.org", which is in the audience of no client and not of dynamic_clients, so no token is ever addressed to it; did you mean "https://orders.example.org/"?`,
    ]);
  });

  test('a resource_server label keeps its own wording for the same three faults', async () => {
    const labels = ['orders-logical', 'https://orders.example.org/#v2', 'https://orders.example.org'];
    const servers = labels.map((label) => `resource_server "${label}" {\n  secret_file = "orders.secret"\n}`).join('\n');
    const { lines } = await problemsOf(`${config('')}${servers}\n`);
    const texts = lines.map((line) => line.replace(/^[^:]*:\d+: /, ''));
    const must = 'the label must be an audience entry that can be named as resource (an absolute URI without "#"), but it is';
    assert.ok(texts.includes(`resource_server "orders-logical": ${must} a logical name`), texts.join('\n'));
    assert.ok(texts.includes(`resource_server "https://orders.example.org/#v2": ${must} a URI with a fragment`), texts.join('\n'));
    assert.ok(
      texts.includes(
        'resource_server "https://orders.example.org": the label is not in the audience of any client or of dynamic_clients; a resource_server label must be an audience entry that can be named as resource; did you mean "https://orders.example.org/"?',
      ),
      texts.join('\n'),
    );
  });
});

/**
 * One freezing of a config (config/frozen.ts deepFreeze): as loaded, and again after a structured clone to another
 * process (a worker, a config read apart), where Maps arrive plain and nothing is frozen.
 */
import assert from 'node:assert/strict';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { deepFreeze, frozenMap } from '../src/config/frozen.js';
import { loadConfig } from '../src/config/load.js';
import type { Config } from '../src/config/types.js';
import { hashPassword } from '../src/crypto/password.js';

async function loaded(): Promise<Config> {
  const folder = await mkdtemp(join(tmpdir(), 'pinpoint-config-frozen-'));
  const hash = await hashPassword('wonderland', { N: 2 ** 14, r: 8, p: 1 });
  const file = join(folder, 'config.hcl');
  await writeFile(
    file,
    `base_url = "https://auth.example.org"\nuser "alice" {\n  password_hash = "${hash}"\n}\nclient "webapp" {\n  redirect_uris = ["https://app.example.org/cb"]\n  audience = ["https://api.example.org/"]\n}\n`,
  );
  return (await loadConfig(file)).config;
}

describe('deepFreeze', () => {
  test('a config cloned to another process is frozen again as loaded: its maps refuse changes, their records are frozen', async () => {
    const original = await loaded();
    const config = deepFreeze(structuredClone(original));
    assert.deepEqual(config, original);
    assert.throws(() => (config.clients as Map<string, unknown>).set('intruder', {}), /read-only/);
    assert.throws(() => (config.users as Map<string, unknown>).delete('alice'), /read-only/);
    const webapp = config.clients.get('webapp');
    assert.ok(webapp !== undefined && Object.isFrozen(webapp) && Object.isFrozen(webapp.redirectUris));
    assert.ok(Object.isFrozen(config) && Object.isFrozen(config.limits));
  });

  test('a frozen map is kept as it is, not rebuilt', () => {
    const map = frozenMap([['a', Object.freeze({ n: 1 })]]);
    assert.equal(deepFreeze(map), map);
    const holder = deepFreeze({ map });
    assert.equal(holder.map, map);
  });
});

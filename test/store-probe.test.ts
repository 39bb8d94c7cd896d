/** `check --probe` for a SQLite state path (DESIGN.md §2): what it says before the first start, read without writing. */
import assert from 'node:assert/strict';
import { mkdtemp, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { probeStore } from '../src/store/probe.js';

let folder: string;
before(async () => {
  folder = await mkdtemp(join(tmpdir(), 'pinpoint-probe-'));
});
after(async () => rm(folder, { recursive: true, force: true }));

test('a database not made yet: ok when its folder can be made, refused under a symbolic link to nothing', async () => {
  const fresh = await probeStore({ kind: 'sqlite', path: join(folder, 'data', 'pinpoint.db') });
  assert.deepEqual(fresh, { ok: true, detail: `no database yet; it will be created in ${folder} at the first start` });
  await symlink(join(folder, 'nowhere'), join(folder, 'state'));
  const broken = await probeStore({ kind: 'sqlite', path: join(folder, 'state', 'pinpoint.db') });
  assert.deepEqual(broken, { ok: false, detail: `no database yet, and ${join(folder, 'state')} is a symbolic link to nothing, so none can be created` });
});

/**
 * DESIGN.md §11 "Every core": a real `pinpoint serve` with 2 workers (node:cluster) over real sockets, on SQLite here
 * (on PostgreSQL: workers-postgres.test.ts; drains: workers-drain.test.ts; reloads: workers-reload.test.ts). Which
 * worker answered is read from the access lines' `pid` (the answer's X-Request-Id names the line); each request opens
 * its own connection, so the primary hands them to the workers in turn.
 */
import assert from 'node:assert/strict';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  createDeployment,
  killAll,
  removeDeployment,
  startPinpoint,
  type Deployment,
  type PinpointProcess,
} from './helpers/process.js';
import { fresh, twoWorkers, cli } from './helpers/cluster.js';
import { workersSuite } from './helpers/workers-suite.js';

describe('serve with 2 workers on SQLite (workers = 2 in the config)', () => {
  workersSuite(async () => ({ path: 'data/pinpoint.db' }), 'config');
});


// Every registration counts against its address (DESIGN.md §9), admitted like the password check at sign-in: the
// address budget's shares hold over real workers, not only the client budget's at /token.
describe('registrations over 2 workers with address_failures = 5', () => {
  let deployment: Deployment | undefined;
  let server: PinpointProcess;
  before(async () => {
    deployment = await createDeployment({ state: { path: 'data/pinpoint.db' } });
    const extra = 'workers = 2\ntrusted_proxies = ["127.0.0.1"]\nlimits {\n  address_failures = 5\n}\ndynamic_clients {\n  audience     = ["https://mcp.example.org/mcp"]\n  registration = "open"\n}\n';
    await writeFile(deployment.configFile, `${await readFile(deployment.configFile, 'utf8')}${extra}`);
    server = await startPinpoint(deployment);
    await twoWorkers(server);
  });
  after(async () => {
    await killAll();
    await removeDeployment(deployment);
  });

  for (const round of [1, 2]) {
    test(`40 registrations at once from one address: at most 5 + 2 registered in all, the rest 429 (round ${round})`, async () => {
      const json = { redirect_uris: ['http://127.0.0.1:33418/callback'], client_name: 'burst', token_endpoint_auth_method: 'none' };
      const answers = await Promise.all(Array.from({ length: 40 }, () => fresh(server.baseUrl, '/register', { json, address: `192.0.2.${90 + round}` })));
      const statuses = answers.map((answer) => answer.status);
      const registered = statuses.filter((status) => status === 201).length;
      assert.ok(registered >= 1 && registered <= 7, `registered: ${registered} (${statuses.join(' ')})`);
      assert.equal(registered + statuses.filter((status) => status === 429).length, 40, statuses.join(' '));
    });
  }
});

describe('workers and the state they need', () => {
  let deployment: Deployment | undefined;
  after(async () => removeDeployment(deployment));

  test('workers = 2 without a state block is a config error; so is serve --workers 2 on memory state; --workers 0 is a usage error', async () => {
    deployment = await createDeployment({ state: { path: 'data/pinpoint.db' } });
    const text = await readFile(deployment.configFile, 'utf8');
    const memory = text.replace(/state \{[^}]*\}/, '');
    await writeFile(deployment.configFile, `${memory}workers = 2\n`);
    const checked = await cli(['check', '--config', deployment.configFile]);
    assert.equal(checked.code, 1, checked.stdout);
    assert.match(checked.stdout, /workers = 2 needs a state block/);

    await writeFile(deployment.configFile, memory);
    const served = await cli(['serve', '--config', deployment.configFile, '--workers', '2']);
    assert.equal(served.code, 1, served.stdout);
    assert.match(served.stderr, /--workers 2 needs a state block/);

    const usage = await cli(['serve', '--config', deployment.configFile, '--workers', '0']);
    assert.equal(usage.code, 2);
    assert.match(usage.stderr, /--workers is "0"/);
  });

  test('check prints the workers setting', async () => {
    const folder = deployment?.folder as string;
    const configFile = join(folder, 'auto.hcl');
    await writeFile(configFile, (await readFile(join(folder, 'config.hcl'), 'utf8')).replace(/^/, `workers = "auto"\nstate {\n  path = "data/auto.db"\n}\n`));
    const checked = await cli(['check', '--config', configFile, '--json']);
    assert.equal(checked.code, 0, checked.stdout);
    assert.equal(JSON.parse(checked.stdout).workers, 'auto');
    const text = await cli(['check', '--config', configFile]);
    assert.match(text.stdout, /^workers +auto: \d+ workers? beside the supervising primary here/m);
    await writeFile(configFile, `${(await readFile(configFile, 'utf8')).replace('workers = "auto"', 'workers = 0')}`);
    const zero = await cli(['check', '--config', configFile]);
    assert.equal(zero.code, 1);
    assert.match(zero.stdout, /workers is 0; use a whole number from 1 to 64, or "auto"/);
  });
});

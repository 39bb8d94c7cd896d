/**
 * `serve --pid-file` and `reload` (DESIGN.md §2) when the pid file is not what it seems: a folder that does not exist
 * (refused before the server says it serves), a file a running server holds (left to it), and a file left by a
 * killed server whose pid now belongs to another process (which gets no SIGHUP). Real processes.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { isServeCommand } from '../src/pid-file.js';
import { cliArgs } from './helpers/cli-command.js';
import { createDeployment, killAll, removeDeployment, startPinpoint, type Deployment } from './helpers/process.js';

function cli(args: readonly string[]): Promise<{ code: number | null; output: string }> {
  const child = spawn(process.execPath, cliArgs(...args), { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, PINPOINT_CONFIG: '' } });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
  return new Promise((resolve) => child.once('close', (code) => resolve({ code, output })));
}

describe('the pid file of serve and reload', () => {
  let deployment: Deployment;
  before(async () => {
    deployment = await createDeployment({ state: { path: 'data/pinpoint.db' } });
  });
  after(async () => {
    await killAll();
    await removeDeployment(deployment);
  });

  test('a pid file in a folder that does not exist: exit 1 naming the pid file, before the server says it serves', async () => {
    const pidFile = join(deployment.folder, 'no-such-folder', 'pinpoint.pid');
    const { code, output } = await cli(['serve', '--config', deployment.configFile, '--pid-file', pidFile]);
    assert.equal(code, 1, output);
    assert.match(output, new RegExp(`cannot write the pid file ${pidFile.replaceAll('/', '\\/')}: ENOENT`));
    assert.doesNotMatch(output, /is serving/);
  });

  test('a pid file a running server holds is left to it: a second serve exits 1, and the first still reloads', async () => {
    const pidFile = join(deployment.folder, 'pinpoint.pid');
    const first = await startPinpoint(deployment, { args: ['--pid-file', pidFile] });
    try {
      const held = await readFile(pidFile, 'utf8');
      assert.equal(held.trim(), String(first.child.pid));
      const second = await cli(['serve', '--config', deployment.configFile, '--pid-file', pidFile]);
      assert.equal(second.code, 1, second.output);
      assert.match(second.output, new RegExp(`names a running server \\(pid ${first.child.pid}\\)`));
      assert.equal(await readFile(pidFile, 'utf8'), held, 'the file is untouched');
      const reloaded = await cli(['reload', '--config', deployment.configFile, '--pid-file', pidFile]);
      assert.equal(reloaded.code, 0, reloaded.output);
    } finally {
      await first.stop('SIGTERM');
    }
  });

  test('a pid file naming a process that is not pinpoint serve: reload sends it nothing and says no server runs', async () => {
    const stranger = spawn('sleep', ['30'], { stdio: 'ignore' });
    try {
      const pidFile = join(deployment.folder, 'stale.pid');
      await writeFile(pidFile, `${stranger.pid}\n`);
      const reloaded = await cli(['reload', '--config', deployment.configFile, '--pid-file', pidFile]);
      assert.equal(reloaded.code, 1, reloaded.output);
      assert.match(reloaded.output, /no server is running with the pid in/);
      assert.equal(stranger.exitCode, null);
      assert.equal(stranger.signalCode, null, 'the stranger got no SIGHUP');
    } finally {
      stranger.kill('SIGKILL');
    }
  });
});

describe('isServeCommand', () => {
  test('pinpoint serve as the bin, dist or src runs it; anything else is not', () => {
    assert.ok(isServeCommand(['node', '--max-semi-space-size=32', '/app/dist/cli.js', 'serve', '--config', 'c.hcl']));
    assert.ok(isServeCommand(['node', '/usr/local/bin/pinpoint', 'serve']));
    assert.ok(isServeCommand(['node', '--import', 'tsx', 'src/cli.ts', 'serve', '--pid-file', 'p']));
    assert.ok(!isServeCommand(['sleep', '30']));
    assert.ok(!isServeCommand(['nginx', 'serve']));
  });
});

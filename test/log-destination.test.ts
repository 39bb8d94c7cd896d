/**
 * DESIGN.md §10: log lines are written as they happen. To a regular file they are written on the event loop (no
 * thread-pool hop per batch), to a pipe asynchronously (a stalled reader must not stall requests); either way a line
 * logged right before the process exits, or dies of an uncaught error, reaches its destination.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { closeSync, constants, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, describe, test } from 'node:test';
import { writesSynchronously } from '../src/log.js';

const folder = mkdtempSync(join(tmpdir(), 'pinpoint-log-'));
after(() => rmSync(folder, { recursive: true, force: true }));

const LOG_MODULE = pathToFileURL(join(import.meta.dirname, '../src/log.ts')).href;

/** A process that logs three lines at info, then ends as `ending` says, with stdout on `stdout`. */
function runLogger(ending: 'exit' | 'throw', stdout: number | 'pipe'): Promise<{ code: number | null; output: string }> {
  const script = join(folder, `log-${ending}.mjs`);
  writeFileSync(
    script,
    `const { createLogger } = await import(${JSON.stringify(LOG_MODULE)});
const logger = createLogger('info');
for (let n = 0; n < 3; n++) logger.info({ n }, 'line');
${ending === 'exit' ? 'process.exit(0);' : "throw new Error('died');"}
`,
  );
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', script], { stdio: ['ignore', stdout, 'ignore'] });
    let output = '';
    child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, output }));
  });
}

const linesOf = (text: string): number[] =>
  text
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => (JSON.parse(line) as { n: number }).n);

describe('where log lines are written', () => {
  test('a regular file is written on the event loop; a pipe, a FIFO or a closed descriptor is not', () => {
    const file = openSync(join(folder, 'plain.log'), 'w');
    const fifoPath = join(folder, 'fifo');
    execFileSync('mkfifo', [fifoPath]);
    // O_RDWR: opening a FIFO this way does not wait for a reader (Linux).
    const fifo = openSync(fifoPath, constants.O_RDWR);
    try {
      assert.equal(writesSynchronously(file), true);
      assert.equal(writesSynchronously(fifo), false);
    } finally {
      closeSync(file);
      closeSync(fifo);
    }
    assert.equal(writesSynchronously(file), false, 'a closed descriptor');
  });

  for (const ending of ['exit', 'throw'] as const) {
    test(`stdout to a file: the lines before process ${ending === 'exit' ? 'exit' : 'death by an uncaught error'} are in the file`, async () => {
      const path = join(folder, `stdout-${ending}.log`);
      const fd = openSync(path, 'w');
      const { code } = await runLogger(ending, fd).finally(() => closeSync(fd));
      assert.equal(code, ending === 'exit' ? 0 : 1);
      assert.deepEqual(linesOf(readFileSync(path, 'utf8')), [0, 1, 2]);
    });

    test(`stdout to a pipe: the lines before process ${ending === 'exit' ? 'exit' : 'death by an uncaught error'} reach the reader`, async () => {
      const { code, output } = await runLogger(ending, 'pipe');
      assert.equal(code, ending === 'exit' ? 0 : 1);
      assert.deepEqual(linesOf(output), [0, 1, 2]);
    });
  }
});

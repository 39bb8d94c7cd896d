/**
 * DESIGN.md §11 "Password hashing never stalls tokens": password checks run in hashing threads of their own, at most
 * `limits.password_hashes` at once; a sign-in that cannot get a slot in time gets 503 with Retry-After.
 * Threads are observed through Node's own `worker_threads` diagnostics channel, not through a hook in src/.
 */
import { DEFAULT_LIMITS } from '../src/context.js';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { once } from 'node:events';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { Worker } from 'node:worker_threads';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { Registry } from 'prom-client';
import ts from 'typescript';
import { ConfigInvalid, formatProblem, loadConfig } from '../src/config/load.js';
import type { UserRecord } from '../src/config/types.js';
import type { AppLimits } from '../src/context.js';
import { decoyCheck, DEFAULT_COST, hashingJob, hashPassword, typicalCost } from '../src/crypto/password.js';
import { PasswordCheckUnavailableError, PasswordPool } from '../src/crypto/password-pool.js';
import { cookieJar, form, hiddenInput, PASSWORD, testApp, testConfig, webappAuthorizeUrl, type TestApp } from './helpers/app.js';

const REPO = fileURLToPath(new URL('..', import.meta.url));
/** The party of checks whose turns a test does not look at. */
const ONE_ADDRESS = '203.0.113.1';
const FAST = { N: 2 ** 14, r: 8, p: 1 };
// About four times the work of a default-cost check (N·r·p) in 32 MiB: it holds a slot long after a 50 ms wait ends.
const SLOW = { N: 2 ** 14, r: 16, p: 16 };

let fastHash: string;
let slowHash: string;
before(async () => {
  [fastHash, slowHash] = await Promise.all([hashPassword('wonderland', FAST), hashPassword('slow-secret', SLOW)]);
});

/** Every Worker this process starts from now until `stop()` (Node publishes each on the `worker_threads` channel). */
function watchThreads(): { readonly started: Worker[]; stop(): void } {
  const started: Worker[] = [];
  const listener = (message: unknown): void => {
    started.push((message as { worker: Worker }).worker);
  };
  subscribe('worker_threads', listener);
  return { started, stop: () => unsubscribe('worker_threads', listener) };
}

/** The reason of a PasswordCheckUnavailableError the promise rejects with; anything else fails the test. */
async function refusalOf(check: Promise<boolean>): Promise<string> {
  try {
    await check;
  } catch (error) {
    assert.ok(error instanceof PasswordCheckUnavailableError, String(error));
    return error.reason;
  }
  assert.fail('the check should have been refused');
}

/** Blocks this thread: a deadline set before it has passed when the event loop next runs timers, whatever the machine's speed. */
function blockThisThread(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

describe('the password pool', () => {
  test('answers like verifyPassword: right password true, wrong false, malformed hash false, no user false', async () => {
    const pool = new PasswordPool({ size: 2 });
    try {
      assert.equal(await pool.verify('wonderland', fastHash, ONE_ADDRESS), true);
      assert.equal(await pool.verify('Wonderland', fastHash, ONE_ADDRESS), false);
      assert.equal(await pool.verify('wonderland', fastHash.replace('N=16384', 'N=1000'), ONE_ADDRESS), false);
      assert.equal(await pool.verify('wonderland', `${fastHash}$extra`, ONE_ADDRESS), false);
      assert.equal(await pool.verify('wonderland', 'wonderland', ONE_ADDRESS), false);
      assert.equal(await pool.verify('wonderland', undefined, ONE_ADDRESS), false, 'an unknown user never matches');
      // NFC, as hashPassword and verifyPassword normalize: "é" composed and decomposed are one password.
      const accented = await hashPassword('caf\u00e9', FAST);
      assert.equal(await pool.verify('cafe\u0301', accented, ONE_ADDRESS), true);
    } finally {
      await pool.close();
    }
  });

  test('runs at most `size` checks at once in at most `size` threads; the others wait and all get their answer', async () => {
    const threads = watchThreads();
    const registry = new Registry();
    const pool = new PasswordPool({ size: 2, maxWaitMs: 60_000, registry });
    try {
      const running: number[] = [];
      const checks = Array.from({ length: 6 }, (_, i) => {
        const check = pool.verify(i % 2 === 0 ? 'wonderland' : `wrong-${i}`, fastHash, ONE_ADDRESS);
        return check.finally(() => running.push(pool.stats().running));
      });
      assert.deepEqual(pool.stats(), { running: 2, waiting: 4, threads: 2 });
      assert.match(await registry.metrics(), /^pinpoint_password_hash_queue 4$/m);
      assert.match(await registry.metrics(), /^pinpoint_password_hashes_running 2$/m);
      assert.deepEqual(await Promise.all(checks), [true, false, true, false, true, false]);
      assert.ok(running.every((count) => count <= 2), running.join(' '));
      assert.equal(threads.started.length, 2, 'two threads, kept for all six checks');
      assert.deepEqual(pool.stats(), { running: 0, waiting: 0, threads: 2 });
    } finally {
      threads.stop();
      await pool.close();
    }
  });

  test('a check that cannot get a slot within maxWaitMs is refused (wait_exceeded) and never run', async () => {
    const registry = new Registry();
    const pool = new PasswordPool({ size: 1, maxWaitMs: 50, registry });
    try {
      const holding = pool.verify('slow-secret', slowHash, ONE_ADDRESS);
      const waiting = pool.verify('wonderland', fastHash, ONE_ADDRESS);
      assert.deepEqual(pool.stats(), { running: 1, waiting: 1, threads: 1 });
      blockThisThread(150);
      const refused = waiting.catch((error: unknown) => error);
      const error = await refused;
      assert.ok(error instanceof PasswordCheckUnavailableError);
      assert.equal(error.reason, 'wait_exceeded');
      assert.equal(error.retryAfterSeconds, 1);
      assert.equal(await holding, true);
      assert.deepEqual(pool.stats(), { running: 0, waiting: 0, threads: 1 });
      assert.match(await registry.metrics(), /^pinpoint_password_checks_refused_total\{reason="wait_exceeded"\} 1$/m);
    } finally {
      await pool.close();
    }
  });

  test('beyond maxWaiting a check is refused at once (queue_full); the waiting ones still run', async () => {
    const pool = new PasswordPool({ size: 1, maxWaitMs: 60_000, maxWaiting: 1 });
    try {
      const first = pool.verify('wonderland', fastHash, ONE_ADDRESS);
      const second = pool.verify('wonderland', fastHash, ONE_ADDRESS);
      assert.equal(await refusalOf(pool.verify('wonderland', fastHash, ONE_ADDRESS)), 'queue_full');
      assert.deepEqual(await Promise.all([first, second]), [true, true]);
    } finally {
      await pool.close();
    }
  });

  test('waiting checks are served one party (address group) at a time, in turn: a burst from one address does not hold the slot from another', async () => {
    const pool = new PasswordPool({ size: 1, maxWaitMs: 60_000 });
    try {
      const finished: string[] = [];
      const check = (label: string, party: string): Promise<boolean> =>
        pool.verify('wonderland', fastHash, party).then((matches) => {
          finished.push(label);
          return matches;
        });
      const holding = pool.verify('slow-secret', slowHash, '198.51.100.7');
      const checks = [check('a1', '198.51.100.7'), check('a2', '198.51.100.7'), check('a3', '198.51.100.7'), check('b1', '203.0.113.9')];
      assert.deepEqual(pool.stats(), { running: 1, waiting: 4, threads: 1 });
      assert.deepEqual(await Promise.all([holding, ...checks]), [true, true, true, true, true]);
      assert.deepEqual(finished, ['a1', 'b1', 'a2', 'a3'], 'b1 waited for one check of the other address, not for its whole burst');
    } finally {
      await pool.close();
    }
  });

  test('a full waiting room makes a place for another address by refusing the newest check of the address holding the most (queue_full)', async () => {
    const pool = new PasswordPool({ size: 1, maxWaitMs: 60_000, maxWaiting: 4 });
    try {
      const attacker = '198.51.100.7';
      const holding = pool.verify('slow-secret', slowHash, attacker);
      const burst = Array.from({ length: 4 }, () => pool.verify('wonderland', fastHash, attacker));
      const evicted = [refusalOf(burst[3] as Promise<boolean>), refusalOf(burst[2] as Promise<boolean>)];
      const alice = pool.verify('wonderland', fastHash, '203.0.113.9');
      const bob = pool.verify('wonderland', fastHash, '192.0.2.44');
      assert.deepEqual(await Promise.all(evicted), ['queue_full', 'queue_full']);
      assert.deepEqual(pool.stats(), { running: 1, waiting: 4, threads: 1 });
      // Two places each for the attacker: one more of its own is no reason to refuse another of its checks.
      assert.equal(await refusalOf(pool.verify('wonderland', fastHash, attacker)), 'queue_full');
      assert.deepEqual(await Promise.all([holding, burst[0], burst[1], alice, bob]), [true, true, true, true, true]);
    } finally {
      await pool.close();
    }
  });

  test('a killed thread is replaced: its check is refused, the waiting one runs on the replacement, and later checks reuse it', async () => {
    const threads = watchThreads();
    const exits: number[] = [];
    const pool = new PasswordPool({ size: 1, maxWaitMs: 60_000, onThreadExit: (code) => exits.push(code) });
    try {
      const inFlight = pool.verify('slow-secret', slowHash, ONE_ADDRESS);
      const waiting = pool.verify('wonderland', fastHash, ONE_ADDRESS);
      assert.equal(threads.started.length, 1);
      await (threads.started[0] as Worker).terminate();
      assert.equal(await refusalOf(inFlight), 'thread_exited');
      assert.equal(await waiting, true);
      assert.equal(threads.started.length, 2, 'one replacement');
      assert.equal(exits.length, 1, 'the unasked exit is reported');
      assert.equal(await pool.verify('wonderland', fastHash, ONE_ADDRESS), true);
      assert.equal(threads.started.length, 2, 'kept: not a thread per check');

      // An idle thread that dies is replaced when the next check comes.
      await (threads.started[1] as Worker).terminate();
      assert.equal(pool.stats().threads, 0);
      assert.equal(await pool.verify('wonderland', fastHash, ONE_ADDRESS), true);
      assert.equal(threads.started.length, 3);
    } finally {
      threads.stop();
      await pool.close();
    }
  });

  test('close() refuses the running and waiting checks, ends every thread and refuses later checks', async () => {
    const threads = watchThreads();
    const pool = new PasswordPool({ size: 1, maxWaitMs: 60_000 });
    try {
      const running = refusalOf(pool.verify('slow-secret', slowHash, ONE_ADDRESS));
      const waiting = refusalOf(pool.verify('wonderland', fastHash, ONE_ADDRESS));
      const exited = threads.started.map((worker) => once(worker, 'exit'));
      await pool.close();
      await Promise.all(exited);
      assert.equal(await running, 'closed');
      assert.equal(await waiting, 'closed');
      assert.equal(await refusalOf(pool.verify('wonderland', fastHash, ONE_ADDRESS)), 'closed');
      assert.deepEqual(pool.stats(), { running: 0, waiting: 0, threads: 0 });
    } finally {
      threads.stop();
    }
  });

  test('an idle hashing thread does not keep a process alive', async () => {
    const script = `
      import { hashPassword } from ${JSON.stringify(new URL('../src/crypto/password.ts', import.meta.url).href)};
      import { PasswordPool } from ${JSON.stringify(new URL('../src/crypto/password-pool.ts', import.meta.url).href)};
      const pool = new PasswordPool({ size: 1 });
      console.log(await pool.verify('x', await hashPassword('x', { N: 1024, r: 8, p: 1 }), '203.0.113.1'), pool.stats().threads);`;
    const { code, stdout } = await runNode(['--import', 'tsx', '--input-type=module', '-e', script]);
    assert.equal(stdout, 'true 1\n');
    assert.equal(code, 0, 'exited by itself, the thread still started');
  });

  test('runs from compiled JavaScript with plain node, never loading tsx (as from dist/)', async () => {
    // Compiled as tsc compiles them for dist/, into a folder inside the repository so prom-client resolves; no .ts file is there.
    await mkdir(join(REPO, '.scratch'), { recursive: true });
    const folder = await mkdtemp(join(REPO, '.scratch', 'password-pool-'));
    try {
      for (const name of ['password', 'password-pool']) {
        const source = await readFile(join(REPO, 'src', 'crypto', `${name}.ts`), 'utf8');
        const { outputText } = ts.transpileModule(source, { compilerOptions: { module: ts.ModuleKind.ES2022, target: ts.ScriptTarget.ES2022 } });
        await writeFile(join(folder, `${name}.js`), outputText);
      }
      await writeFile(join(folder, 'package.json'), '{ "type": "module" }\n');
      const script = `
        import { hashPassword } from './password.js';
        import { PasswordPool } from './password-pool.js';
        const pool = new PasswordPool({ size: 1 });
        const hash = await hashPassword('x', { N: 1024, r: 8, p: 1 });
        console.log(await pool.verify('x', hash, '203.0.113.1'), await pool.verify('y', hash, '203.0.113.1'));
        await pool.close();`;
      await writeFile(join(folder, 'main.js'), script);
      const { code, stdout, stderr } = await runNode([join(folder, 'main.js')]);
      assert.equal(stdout, 'true false\n', stderr);
      assert.equal(code, 0);
    } finally {
      await rm(folder, { recursive: true, force: true });
    }
  });
});

/** Runs node with `args`; a child still running after 60 s is killed, so a process that cannot exit fails the test. */
async function runNode(args: readonly string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, args, { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const guard = setTimeout(() => child.kill('SIGKILL'), 60_000);
  const [code] = (await once(child, 'exit')) as [number | null];
  clearTimeout(guard);
  return { code, stdout, stderr };
}

const FORM = { 'content-type': 'application/x-www-form-urlencoded' };

/** A sign-in form ready to post: the login id, the CSRF token and its cookie. */
async function signInForm(app: FastifyInstance): Promise<{ login: string; csrf: string; cookies: string }> {
  const start = await app.inject({ url: webappAuthorizeUrl() });
  const page = await app.inject({ url: String(start.headers.location), headers: { cookie: cookieJar('', start) } });
  return { login: hiddenInput(page.body, 'login'), csrf: hiddenInput(page.body, 'csrf'), cookies: cookieJar(cookieJar('', start), page) };
}

function signIn(app: FastifyInstance, signInState: { login: string; csrf: string; cookies: string }, username: string, password: string): Promise<LightMyRequestResponse> {
  return app.inject({
    method: 'POST',
    url: '/login',
    headers: { ...FORM, cookie: signInState.cookies },
    payload: form([['csrf', signInState.csrf], ['login', signInState.login], ['username', username], ['password', password]]),
  });
}

describe('sign-in checks passwords through the pool', () => {
  async function appWithSlowUser(limits: Partial<AppLimits>): Promise<TestApp> {
    const config = await testConfig();
    const slow: UserRecord = { username: 'slow', passwordHash: slowHash };
    return testApp({ config: { ...config, users: new Map([...config.users, ['slow', slow]]) }, limits });
  }

  let t: TestApp | undefined;
  after(async () => {
    await t?.app.close();
  });

  test('password_hashes = 2: six parallel sign-ins start at most two hashing threads and each is answered', async () => {
    const threads = watchThreads();
    t = await appWithSlowUser({ passwordHashes: 2, passwordWaitMs: 60_000 });
    try {
      const state = await signInForm(t.app);
      const answers = await Promise.all(Array.from({ length: 6 }, (_, i) => signIn(t!.app, state, i === 0 ? 'nobody' : 'slow', `wrong-${i}`)));
      assert.deepEqual(answers.map((answer) => answer.statusCode), [401, 401, 401, 401, 401, 401]);
      assert.ok(threads.started.length >= 1 && threads.started.length <= 2, `${threads.started.length} threads`);
    } finally {
      threads.stop();
      await t.app.close();
      t = undefined;
    }
  });

  test('a sign-in that waits over the limit for a slot gets the sign-in page with 503 and Retry-After, and is not counted', async () => {
    t = await appWithSlowUser({ passwordHashes: 1, passwordWaitMs: 50, loginFailures: 3 });
    const state = await signInForm(t.app);
    const answers = await Promise.all(Array.from({ length: 3 }, (_, i) => signIn(t!.app, state, 'slow', `wrong-${i}`)));
    const statuses = answers.map((answer) => answer.statusCode);
    assert.ok(statuses.every((status) => status === 401 || status === 503), statuses.join(' '));
    assert.ok(statuses.includes(401), statuses.join(' '));
    const busy = answers.filter((answer) => answer.statusCode === 503);
    assert.ok(busy.length >= 1, statuses.join(' '));
    for (const answer of busy) {
      assert.equal(answer.headers['retry-after'], '1');
      assert.match(String(answer.headers['content-type']), /^text\/html/);
      assert.ok(answer.headers['content-security-policy'] !== undefined);
      assert.match(answer.body, /<h1>Sign in<\/h1>/);
      assert.match(answer.body, /role="alert">Too many sign-ins at once\. Try again in a few seconds\.</);
      assert.match(answer.body, /name="username"[^>]*value="slow"/);
    }
    assert.match(await t.ctx.metrics.registry.metrics(), /^pinpoint_password_checks_refused_total\{reason="wait_exceeded"\} [1-9]/m);
    // Three attempts were counted before the checks; the refused ones were given back, so this fourth one is still checked.
    assert.equal((await signIn(t.app, state, 'slow', 'wrong-again')).statusCode, 401);
    assert.equal((await signIn(t.app, state, 'alice', PASSWORD)).statusCode, 303, 'the slot is free again');
  });

  test('one address filling the hashing queue with sign-ins does not keep another address from signing in (an audit: 150 from one address gave everyone 503)', async () => {
    t = await appWithSlowUser({ passwordHashes: 1, passwordWaitMs: 60_000, passwordChecksWaiting: 4, loginFailures: 100 });
    const state = await signInForm(t.app);
    const fromAttacker = (i: number): Promise<LightMyRequestResponse> =>
      t!.app.inject({
        method: 'POST',
        url: '/login',
        remoteAddress: '198.51.100.7',
        headers: { ...FORM, cookie: state.cookies },
        payload: form([['csrf', state.csrf], ['login', state.login], ['username', 'slow'], ['password', `wrong-${i}`]]),
      });
    const flood = Array.from({ length: 12 }, (_, i) => fromAttacker(i));
    await new Promise((resolve) => setImmediate(resolve));
    const alice = await signIn(t.app, state, 'alice', PASSWORD);
    assert.equal(alice.statusCode, 303, alice.body);
    const statuses = (await Promise.all(flood)).map((answer) => answer.statusCode);
    assert.ok(statuses.every((status) => status === 401 || status === 503), statuses.join(' '));
    assert.ok(statuses.filter((status) => status === 503).length >= 7, `the flood beyond 1 running and 4 waiting was refused: ${statuses.join(' ')}`);
  });

  test('closing the app ends its hashing threads', async () => {
    const threads = watchThreads();
    const app = (await appWithSlowUser({ passwordHashes: 2 })).app;
    try {
      const state = await signInForm(app);
      assert.equal((await signIn(app, state, 'alice', 'wrong')).statusCode, 401);
      assert.equal(threads.started.length, 1);
      const exited = threads.started.map((worker) => once(worker, 'exit'));
      await app.close();
      await Promise.all(exited);
    } finally {
      threads.stop();
    }
  });
});

describe('limits.password_hashes', () => {
  /** A config file of a base URL, one user (lines 1 to 4) and `more`. */
  async function configFile(more = ''): Promise<string> {
    const folder = await mkdtemp(join(tmpdir(), 'pinpoint-pool-config-'));
    const file = join(folder, 'config.hcl');
    await writeFile(file, `base_url = "https://auth.example.org"\nuser "alice" {\n  password_hash = "${fastHash}"\n}\n${more}`);
    return file;
  }

  test('sets the checks at once per process; 2 when left out', async () => {
    assert.equal((await loadConfig(await configFile())).config.limits.passwordHashes, 2);
    assert.equal((await loadConfig(await configFile('limits {\n  password_hashes = 4\n}\n'))).config.limits.passwordHashes, 4);
    const t = await testApp({ config: { ...(await testConfig()), limits: { ...(await testConfig()).limits, passwordHashes: 3 } } });
    try {
      assert.equal(t.ctx.limits.passwordHashes, 3);
      assert.equal(DEFAULT_LIMITS.passwordWaitMs, 5000, 'DESIGN.md §11: at most 5 s');
      assert.equal(t.ctx.limits.passwordChecksWaiting, 96, 'the waiting room grows with the slots');
    } finally {
      await t.app.close();
    }
  });

  test('is a whole number from 1 to 64, each problem named with its line', async () => {
    for (const [value, message] of [
      ['0', 'is 0; use a whole number from 1 to 64 (each check in flight holds about 128 MiB)'],
      ['65', 'is 65; use a whole number from 1 to 64'],
      ['1.5', 'is 1.5; use a whole number'],
      ['"2"', 'must be a number without quotes, e.g. 2'],
    ] as const) {
      const file = await configFile(`limits {\n  password_hashes = ${value}\n}\n`);
      const error = await loadConfig(file).then(
        () => assert.fail(`password_hashes = ${value} should be refused`),
        (thrown: unknown) => thrown,
      );
      assert.ok(error instanceof ConfigInvalid, String(error));
      const lines = error.problems.map(formatProblem);
      assert.ok(lines.some((line) => line.startsWith(`${file}:6: limits: password_hashes ${message}`)), lines.join('\n'));
    }
  });
});

describe("an unknown user's decoy check costs what the users' own checks cost (an audit: 2^15 hashes answered 4x sooner than the 2^17 decoy)", () => {
  test('typicalCost: the cost most hashes have, the dearer on a tie, the default with none', async () => {
    const old = { N: 2 ** 15, r: 8, p: 1 };
    const small = { N: 2 ** 10, r: 8, p: 1 };
    const [a, b, c] = await Promise.all([hashPassword('one', old), hashPassword('two', old), hashPassword('three', small)]);
    assert.deepEqual(typicalCost([a as string, b as string, c as string]), old);
    assert.deepEqual(typicalCost([c as string, a as string]), old, 'a tie goes to the dearer cost');
    assert.deepEqual(typicalCost(['not a hash']), DEFAULT_COST);
    assert.deepEqual(typicalCost([]), DEFAULT_COST);
  });

  test('the decoy check runs scrypt at the cost it is given', () => {
    const old = { N: 2 ** 15, r: 8, p: 1 };
    assert.equal(hashingJob(decoyCheck('guess', old)).options.N, 2 ** 15);
    assert.equal(hashingJob(decoyCheck('guess')).options.N, DEFAULT_COST.N);
  });
});

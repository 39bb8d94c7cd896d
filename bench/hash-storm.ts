/**
 * DESIGN.md §11 "Password hashing never stalls tokens", measured: client_credentials latency (autocannon) while
 * browsers sign in with passwords as fast as the server takes them, and the server's peak resident memory.
 * Not run by CI. It runs `pinpoint serve` from a built dist/ (npm run build first), as `npm start` does:
 *
 *   node --import tsx bench/hash-storm.ts [--dist DIR] [--password-hashes N] [--seconds 30] [--browsers 8] [--connections 4]
 *
 * A/B: --dist points at another build's dist/ (e.g. the release before the hashing pool, built in a scratch folder);
 * --password-hashes writes `limits { password_hashes = N }` (left out: the build's default, and a build that does
 * not know the attribute still starts).
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { hashPassword } from '../src/crypto/password.js';
import { freePort } from './common.js';

const REPO = fileURLToPath(new URL('..', import.meta.url));
const PASSWORD = 'storm-password';
const SECRET = 'service-secret';
const REDIRECT = 'http://127.0.0.1:9/callback';

function option(name: string, fallback?: string): string | undefined {
  const index = process.argv.indexOf(`--${name}`);
  return index === -1 ? fallback : process.argv[index + 1];
}
function wholeNumber(name: string, fallback: number): number {
  const value = Number(option(name, String(fallback)));
  if (!Number.isInteger(value) || value < 1) throw new Error(`--${name} must be a whole number >= 1`);
  return value;
}

const dist = resolve(option('dist', join(REPO, 'dist')) as string);
const passwordHashes = option('password-hashes');
const seconds = wholeNumber('seconds', 30);
const browsers = wholeNumber('browsers', 8);
const connections = wholeNumber('connections', 4);

/** A config of one user (a default-cost hash, as `pinpoint hash-password` writes), a web client and a service client. */
async function writeConfig(folder: string, port: number): Promise<string> {
  await writeFile(join(folder, 'webapp'), 'webapp-secret\n', { mode: 0o600 });
  await writeFile(join(folder, 'service'), `${SECRET}\n`, { mode: 0o600 });
  const file = join(folder, 'config.hcl');
  await writeFile(
    file,
    `base_url = "http://127.0.0.1:${port}"
listen   = "127.0.0.1:${port}"
log_level = "warn"
user "alice" {
  password_hash = "${await hashPassword(PASSWORD)}"
}
client "webapp" {
  secret_file   = "webapp"
  redirect_uris = ["${REDIRECT}"]
  audience      = ["https://api.example.org/"]
}
client "service" {
  secret_file = "service"
  audience    = ["https://api.example.org/"]
}
${passwordHashes === undefined ? '' : `limits {\n  password_hashes = ${passwordHashes}\n}\n`}`,
  );
  return file;
}

/** Resident memory of a process and its descendants, in bytes (Linux /proc). */
async function residentBytes(pid: number): Promise<number> {
  try {
    const status = await readFile(`/proc/${pid}/status`, 'utf8');
    const own = Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? 0) * 1024;
    const children = (await readFile(`/proc/${pid}/task/${pid}/children`, 'utf8')).split(' ').filter(Boolean).map(Number);
    const theirs = await Promise.all(children.map(residentBytes));
    return own + theirs.reduce((sum, bytes) => sum + bytes, 0);
  } catch {
    return 0;
  }
}

function cookiesOf(previous: string, response: Response): string {
  const jar = new Map(previous.split('; ').filter(Boolean).map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)] as const));
  for (const line of response.headers.getSetCookie()) {
    const pair = line.split(';')[0] ?? '';
    jar.set(pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1));
  }
  return [...jar].map(([name, value]) => `${name}=${value}`).join('; ');
}

/** One browser's sign-in: /authorize, the sign-in page, the password POST; the status and time of the POST. */
async function signIn(base: string): Promise<{ status: number; ms: number }> {
  const authorize = new URL(`${base}/authorize`);
  for (const [name, value] of [['response_type', 'code'], ['client_id', 'webapp'], ['redirect_uri', REDIRECT], ['scope', 'openid'], ['code_challenge', 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM'], ['code_challenge_method', 'S256']]) {
    authorize.searchParams.set(name as string, value as string);
  }
  const started = await fetch(authorize, { redirect: 'manual' });
  await started.arrayBuffer();
  let cookies = cookiesOf('', started);
  const page = await fetch(new URL(started.headers.get('location') ?? '/', base), { headers: { cookie: cookies } });
  const body = await page.text();
  cookies = cookiesOf(cookies, page);
  const hidden = (name: string): string => new RegExp(`name="${name}" value="([^"]*)"`).exec(body)?.[1] ?? '';
  const form = new URLSearchParams({ csrf: hidden('csrf'), login: hidden('login'), username: 'alice', password: PASSWORD });
  const posted = performance.now();
  const answer = await fetch(`${base}/login`, { method: 'POST', redirect: 'manual', headers: { cookie: cookies, 'content-type': 'application/x-www-form-urlencoded' }, body: form.toString() });
  await answer.arrayBuffer();
  return { status: answer.status, ms: performance.now() - posted };
}

const percentile = (sorted: Float64Array, p: number): number => sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? Number.NaN;
const summary = (values: number[]): string => {
  const sorted = Float64Array.from(values).sort();
  return `n=${sorted.length} p50=${percentile(sorted, 50).toFixed(1)} p99=${percentile(sorted, 99).toFixed(1)} max=${(sorted.at(-1) ?? Number.NaN).toFixed(1)} ms`;
};

/** client_credentials for `seconds` with `connections` connections: the latency of every response, and the non-2xx count. */
async function tokenLoad(port: number, duration: number): Promise<{ latencies: number[]; non2xx: number; errors: number }> {
  const latencies: number[] = [];
  const instance = autocannon({
    url: `http://127.0.0.1:${port}`,
    connections,
    duration,
    timeout: 10,
    requests: [{ method: 'POST', path: '/token', headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: `Basic ${Buffer.from(`service:${SECRET}`).toString('base64')}` }, body: 'grant_type=client_credentials' }],
  });
  instance.on('response', (_client: unknown, _status: number, _bytes: number, ms: number) => latencies.push(ms));
  const result = await instance;
  return { latencies, non2xx: result.non2xx, errors: result.errors + result.timeouts };
}

const folder = await mkdtemp(join(tmpdir(), 'pinpoint-hash-storm-'));
const port = await freePort();
const server = spawn(process.execPath, ['--max-semi-space-size=32', join(dist, 'cli.js'), 'serve', '--config', await writeConfig(folder, port)], { stdio: ['ignore', 'ignore', 'inherit'] });
const base = `http://127.0.0.1:${port}`;
try {
  for (let ready = false; !ready; ) {
    if (server.exitCode !== null) throw new Error(`pinpoint exited with ${server.exitCode}`);
    ready = await fetch(`${base}/readyz`).then((response) => response.ok, () => false);
    if (!ready) await sleep(100);
  }
  const warm = await signIn(base);
  if (warm.status !== 303) throw new Error(`the warm-up sign-in answered ${warm.status}`);
  const quiet = await tokenLoad(port, Math.min(5, seconds));

  const calm = await residentBytes(server.pid as number);
  let peak = calm;
  const sampler = setInterval(() => void residentBytes(server.pid as number).then((bytes) => (peak = Math.max(peak, bytes))), 50);
  let storming = true;
  const signIns: { status: number; ms: number }[] = [];
  const loops = Array.from({ length: browsers }, async () => {
    while (storming) signIns.push(await signIn(base).catch(() => ({ status: 0, ms: Number.NaN })));
  });
  const stormed = await tokenLoad(port, seconds);
  storming = false;
  await Promise.all(loops);
  clearInterval(sampler);

  const statuses = new Map<number, number>();
  for (const { status } of signIns) statuses.set(status, (statuses.get(status) ?? 0) + 1);
  console.log(`dist ${dist}; password_hashes ${passwordHashes ?? 'default'}; ${seconds} s; ${browsers} browsers; ${connections} token connections`);
  console.log(`client_credentials alone:      ${summary(quiet.latencies)} (non-2xx ${quiet.non2xx}, errors ${quiet.errors})`);
  console.log(`client_credentials with storm: ${summary(stormed.latencies)} (non-2xx ${stormed.non2xx}, errors ${stormed.errors})`);
  console.log(`sign-in POSTs: ${summary(signIns.filter((s) => s.status === 303).map((s) => s.ms))} for 303; by status ${JSON.stringify(Object.fromEntries(statuses))}`);
  console.log(`server RSS: ${(calm / 2 ** 20).toFixed(0)} MiB before the storm, ${(peak / 2 ** 20).toFixed(0)} MiB at its peak`);
} finally {
  server.kill('SIGTERM');
  await new Promise((done) => (server.exitCode === null ? server.once('exit', done) : done(undefined)));
  await rm(folder, { recursive: true, force: true });
}

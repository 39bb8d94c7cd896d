#!/usr/bin/env -S node --max-semi-space-size=32
import { readFile, rename, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { loadConfigApart } from './config/load-apart.js';
import { ConfigInvalid, formatProblem } from './config/problems.js';
import { describeConfig, describeInvalid, renderReport, type CheckReport, type ProbeResult } from './config/report.js';
import type { Config, StateConfig } from './config/types.js';
import { MAX_WORKERS, parseWorkersOption } from './config/workers.js';
import type { Store } from './store/types.js';
import type { SuperviseOptions } from './supervisor.js';
import { VERSION } from './version.js';

// The admin commands' modules (store drivers, jose, scrypt) are imported when such a command runs: `serve`'s primary
// supervises only, and never loading them keeps it about 4 MiB smaller.

const USAGE = `usage:
  pinpoint serve --config FILE [--workers N|auto] [--pid-file FILE]
                                          run the server (PINPOINT_CONFIG may replace --config); --workers
                                          overrides the config's workers; --pid-file holds the primary's pid
  pinpoint reload --config FILE --pid-file FILE
                                          check FILE, then have the server started with that pid file
                                          take it without downtime (exit 0 when taken, 1 when not)
  pinpoint check --config FILE [--json] [--probe]
                                          validate the configuration and show what it sets up;
                                          --probe also reaches the state store and asks each federation issuer for its metadata
  pinpoint hash-password                  read a password on stdin, print its password_hash
  pinpoint keys list --config FILE [--json]
  pinpoint keys rotate --config FILE      a new signing key per algorithm (old ones stay published)
  pinpoint keys retire KID --config FILE  stop publishing a key that no longer signs
  pinpoint grants list [--user U] [--client C] [--json] --config FILE
  pinpoint grants revoke (ID | --user U | --client C) --config FILE
                                          revoke grants (--user also ends the person's sessions)
  pinpoint backup --to FILE --config FILE an online copy of the SQLite state (PostgreSQL: use pg_dump)
  pinpoint --version                      print the version
`;

const PROBE_TIMEOUT_MS = 5000;

/** A command-line mistake: usage on stderr and exit 2 (a wrong config or input exits 1). */
class UsageError extends Error {}

/** Every option of every command, as parseArgs takes them. */
const OPTIONS = {
  config: { type: 'string', short: 'c' },
  json: { type: 'boolean', default: false },
  probe: { type: 'boolean', default: false },
  user: { type: 'string' },
  client: { type: 'string' },
  to: { type: 'string' },
  workers: { type: 'string' },
  'pid-file': { type: 'string' },
  help: { type: 'boolean', short: 'h', default: false },
} as const satisfies ParseArgsConfig['options'];

/**
 * `keys retire KID` and `grants revoke ID`: an identifier may begin with `-`, as one key in 64 does (a JWK thumbprint
 * is base64url). Every word up to a `--` that is not one of our options (nor an option's value) goes after a `--`,
 * where parseArgs takes it as it is. The words are read here, not by parseArgs' tokens: it splits `-N7X-f` into one
 * option per letter and reads its inner `-` as a `--`, so such a key would be a usage error.
 */
function identifierAsPositional(command: string | undefined, rest: readonly string[]): readonly string[] {
  const subcommand = rest[0];
  const takesIdentifier = (command === 'keys' && subcommand === 'retire') || (command === 'grants' && subcommand === 'revoke');
  if (!takesIdentifier) return rest;
  const moved = new Set<number>();
  let ended = false;
  for (let index = 1; index < rest.length; index += 1) {
    const word = rest[index] as string;
    if (word === '--') {
      ended = true;
      break;
    }
    if (!word.startsWith('-') || word === '-') continue;
    const option = optionNamed(word);
    if (option === undefined) moved.add(index);
    // `--config FILE`, `-c FILE`: the next word is the value, whatever it looks like.
    else if (option.type === 'string' && !word.includes('=')) index += 1;
  }
  if (moved.size === 0) return rest;
  return [...rest.filter((_, index) => !moved.has(index)), ...(ended ? [] : ['--']), ...[...moved].map((index) => rest[index] as string)];
}

/** The option `word` names exactly (`--name`, `--name=value`, or a short `-c`), or undefined: `-cAb3` is no option here. */
function optionNamed(word: string): (typeof OPTIONS)[keyof typeof OPTIONS] | undefined {
  if (word.startsWith('--')) {
    const name = word.slice(2).split('=')[0] as string;
    return Object.hasOwn(OPTIONS, name) ? OPTIONS[name as keyof typeof OPTIONS] : undefined;
  }
  if (word.length !== 2) return undefined;
  return Object.values(OPTIONS).find((option) => 'short' in option && option.short === word[1]);
}

async function main(argv: readonly string[]): Promise<number> {
  const [command, ...given] = argv;
  const rest = identifierAsPositional(command, given);
  if (command === '--version' || command === 'version') {
    if (rest.length > 0) throw new UsageError(`${command} takes no arguments`);
    process.stdout.write(`${VERSION}\n`);
    return 0;
  }
  const { values, positionals: words } = parseArgs({
    args: [...rest],
    options: OPTIONS,
    strict: true,
    allowPositionals: true,
  });
  // keys and grants take a subcommand (and retire/revoke one argument); the other commands take none.
  const [subcommand, ...positionals] = words;
  if (values.help || command === 'help' || command === '--help' || command === '-h') {
    process.stdout.write(USAGE);
    return 0;
  }
  const configFile = (): string => {
    const file = values.config ?? process.env.PINPOINT_CONFIG;
    if (!file) throw new UsageError('missing --config FILE');
    return file;
  };
  const only = (allowed: readonly string[], positionalCount = 0): void => {
    const extra = (['json', 'probe', 'config', 'user', 'client', 'to', 'workers', 'pid-file'] as const).find((name) => !allowed.includes(name) && values[name]);
    if (extra) throw new UsageError(`${command} does not take --${extra}`);
    const extraWords = command === 'keys' || command === 'grants' ? positionals.slice(positionalCount) : words;
    if (extraWords.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(extraWords[0])}`);
  };

  switch (command) {
    case 'serve': {
      only(['config', 'workers', 'pid-file']);
      const workers = values.workers === undefined ? undefined : parseWorkersOption(values.workers);
      if (values.workers !== undefined && workers === undefined) throw new UsageError(`--workers is ${JSON.stringify(values.workers)}; give a whole number from 1 to ${MAX_WORKERS}, or auto`);
      return serve(configFile(), { ...(workers !== undefined && { workers }), ...(values['pid-file'] !== undefined && { pidFile: resolve(values['pid-file']) }) });
    }
    case 'reload':
      only(['config', 'pid-file']);
      if (values['pid-file'] === undefined) throw new UsageError('reload needs --pid-file FILE (the one given to serve)');
      return reload(configFile(), resolve(values['pid-file']));
    case 'check':
      only(['config', 'json', 'probe']);
      return check(configFile(), values.json === true, values.probe === true);
    case 'hash-password':
      only([]);
      return hashPasswordFromStdin();
    case 'keys':
      return keysCommand(subcommand, positionals, values, configFile, only);
    case 'grants':
      return grantsCommand(subcommand, positionals, values, configFile, only);
    case 'backup':
      only(['config', 'to']);
      if (values.to === undefined) throw new UsageError('backup needs --to FILE');
      return backup(configFile(), values.to);
    case undefined:
      throw new UsageError('missing command');
    default:
      throw new UsageError(`unknown command ${JSON.stringify(command)}`);
  }
}

type Values = { json?: boolean; user?: string; client?: string };

/** Opens the configured store for an admin command; memory state has nothing to administer from outside. */
async function withStore<T>(file: string, work: (store: Store) => Promise<T>): Promise<T | number> {
  let config: Config;
  try {
    ({ config } = await loadConfig(file));
  } catch (error) {
    if (!(error instanceof ConfigInvalid)) throw error;
    process.stderr.write(`pinpoint: ${file} is not a valid configuration:\n${error.problems.map((p) => `  ${formatProblem(p)}\n`).join('')}`);
    return 1;
  }
  if (config.state.kind === 'memory') {
    process.stderr.write('pinpoint: this configuration keeps its state in the server\'s memory (no state block): there is nothing to administer from outside\n');
    return 1;
  }
  const store = await (await import('./store/open.js')).openStore(config.state);
  try {
    return await work(store);
  } finally {
    await store.close();
  }
}

async function keysCommand(sub: string | undefined, args: readonly string[], values: Values, configFile: () => string, only: (allowed: readonly string[], n?: number) => void): Promise<number> {
  const out = process.stdout;
  const { listKeys, retire, rotate } = await import('./admin/keys.js');
  switch (sub) {
    case 'list':
      only(['config', 'json']);
      return (await withStore(configFile(), (store) => listKeys(store, out, values.json === true))) as number;
    case 'rotate':
      only(['config']);
      return (await withStore(configFile(), (store) => rotate(store, out))) as number;
    case 'retire': {
      only(['config'], 1);
      const kid = args[0];
      if (kid === undefined) throw new UsageError('keys retire needs the KID of the key');
      return (await withStore(configFile(), (store) => retire(store, kid, out, process.stderr))) as number;
    }
    default:
      throw new UsageError(sub === undefined ? 'keys needs list, rotate or retire' : `unknown keys command ${JSON.stringify(sub)}`);
  }
}

async function grantsCommand(sub: string | undefined, args: readonly string[], values: Values, configFile: () => string, only: (allowed: readonly string[], n?: number) => void): Promise<number> {
  const { listGrants, revokeGrants } = await import('./admin/grants.js');
  const filter = { ...(values.user !== undefined && { subject: values.user }), ...(values.client !== undefined && { clientId: values.client }) };
  switch (sub) {
    case 'list':
      only(['config', 'json', 'user', 'client']);
      return (await withStore(configFile(), (store) => listGrants(store, filter, process.stdout, values.json === true))) as number;
    case 'revoke': {
      only(['config', 'user', 'client'], 1);
      const id = args[0];
      const chosen = [id, values.user, values.client].filter((value) => value !== undefined).length;
      if (chosen !== 1) throw new UsageError('grants revoke needs exactly one of ID, --user U or --client C');
      // The audit line goes to stderr as a pino JSON line, as the server writes its own (stdout has the counts).
      const auditLog = (await import('./log.js')).createLogger('info', process.stderr);
      const audit = (fields: Record<string, unknown>, message: string): void => auditLog.info(fields, message);
      return (await withStore(configFile(), (store) => revokeGrants(store, id !== undefined ? { grantId: id } : filter, process.stdout, process.stderr, audit))) as number;
    }
    default:
      throw new UsageError(sub === undefined ? 'grants needs list or revoke' : `unknown grants command ${JSON.stringify(sub)}`);
  }
}

async function backup(file: string, to: string): Promise<number> {
  let config: Config;
  try {
    ({ config } = await loadConfig(file));
  } catch (error) {
    if (!(error instanceof ConfigInvalid)) throw error;
    process.stderr.write(`pinpoint: ${file} is not a valid configuration\n`);
    return 1;
  }
  if (config.state.kind !== 'sqlite') {
    process.stderr.write(`pinpoint: backup copies SQLite state; this configuration keeps it ${config.state.kind === 'memory' ? 'in memory' : 'in PostgreSQL (use pg_dump, README "Operations")'}\n`);
    return 1;
  }
  return (await import('./admin/backup.js')).backupSqlite(config.state.path, to, process.stdout, process.stderr);
}

async function serve(file: string, options: SuperviseOptions): Promise<number> {
  let loaded: { config: Config; warnings: string[] };
  try {
    // The primary runs for months: the HCL parser's memory goes away with the child that reads the file.
    loaded = await loadConfigApart(file);
  } catch (error) {
    if (!(error instanceof ConfigInvalid)) throw error;
    printWarnings(error.warnings);
    process.stderr.write(`pinpoint: ${file} is not a valid configuration:\n${error.problems.map((p) => `  ${formatProblem(p)}\n`).join('')}`);
    return 1;
  }
  // The server logs the warnings itself, as JSON lines like everything else it says; the primary only supervises.
  return (await import('./supervisor.js')).supervise(loaded.config, loaded.warnings, options);
}

/** How long `reload` waits for the server's answer: every worker started and the old ones drained. */
const RELOAD_TIMEOUT_MS = 120_000;

/** The config loader, imported when a command needs it (it brings the HCL parser). */
async function loadConfig(file: string): Promise<{ config: Config; warnings: string[] }> {
  return (await import('./config/load.js')).loadConfig(file);
}

/** DESIGN.md §2, §11: checks FILE, leaves a request next to the pid file, sends SIGHUP, and waits for the answer. */
async function reload(file: string, pidFile: string): Promise<number> {
  try {
    const { warnings } = await loadConfig(file);
    printWarnings(warnings);
  } catch (error) {
    if (!(error instanceof ConfigInvalid)) throw error;
    printWarnings(error.warnings);
    process.stderr.write(`pinpoint: ${file} is not a valid configuration; the server was not asked to reload:\n${error.problems.map((p) => `  ${formatProblem(p)}\n`).join('')}`);
    return 1;
  }
  const { isPinpointServer, isRunning, pidIn } = await import('./pid-file.js');
  const pid = await pidIn(pidFile);
  // A pid file left by a killed server may hold the pid of another process by now: that one gets no SIGHUP.
  if (pid === undefined || !(await isPinpointServer(pid))) {
    process.stderr.write(`pinpoint: no server is running with the pid in ${pidFile}${pid === undefined ? ' (no pid there)' : ` (${pid})`}; start one with serve --pid-file\n`);
    return 1;
  }
  const { newNonce, reloadFiles } = await import('./supervisor.js');
  const files = reloadFiles(pidFile);
  const request = { nonce: newNonce(), config: resolve(file) };
  await writeFile(`${files.request}.tmp`, JSON.stringify(request));
  await rename(`${files.request}.tmp`, files.request);
  process.kill(pid, 'SIGHUP');
  const deadline = Date.now() + RELOAD_TIMEOUT_MS;
  while (Date.now() < deadline) {
    await sleep(100);
    const result = await readFile(files.result, 'utf8').then(
      (text) => JSON.parse(text) as { nonce?: unknown; ok?: unknown; problems?: unknown; workers?: unknown },
      () => undefined,
    );
    if (result?.nonce === request.nonce) {
      if (result.ok === true) {
        process.stdout.write(`reloaded ${resolve(file)}: ${String(result.workers)} worker(s) serve it\n`);
        return 0;
      }
      const problems = Array.isArray(result.problems) ? result.problems.map(String) : [];
      process.stderr.write(`pinpoint: the server did not take ${file}; it keeps serving its configuration:\n${problems.map((p) => `  ${p}\n`).join('')}`);
      return 1;
    }
    if (!isRunning(pid)) {
      process.stderr.write(`pinpoint: the server (pid ${pid}) stopped before it answered; ${file} was not taken\n`);
      return 1;
    }
  }
  process.stderr.write(`pinpoint: no answer from the server (pid ${pid}) within ${RELOAD_TIMEOUT_MS / 1000} s\n`);
  return 1;
}

async function check(file: string, json: boolean, probe: boolean): Promise<number> {
  let report: CheckReport;
  try {
    const { config, warnings } = await loadConfig(file);
    report = describeConfig(config, warnings);
    if (probe) report = await withProbes(report, config.state);
  } catch (error) {
    if (!(error instanceof ConfigInvalid)) throw error;
    report = describeInvalid(file, error.problems, error.warnings);
  }
  process.stdout.write(json ? `${JSON.stringify(report, null, 2)}\n` : renderReport(report));
  // DESIGN.md §2: a failed probe exits 1 like an invalid configuration.
  const probeFailed = report.stateProbe?.ok === false || (report.signIn?.federations.some((federation) => federation.probe?.ok === false) ?? false);
  return report.valid && !probeFailed ? 0 : 1;
}

/** DESIGN.md §2: --probe reaches the store and each federation issuer. */
async function withProbes(report: CheckReport, state: StateConfig): Promise<CheckReport> {
  const stateProbe = await (await import('./store/probe.js')).probeStore(state);
  const probed = stateProbe === undefined ? report : { ...report, stateProbe };
  const signIn = probed.signIn;
  if (!signIn) return probed;
  const federations = await Promise.all(signIn.federations.map(async (federation) => ({ ...federation, probe: await probeIssuer(federation.issuer) })));
  return { ...probed, signIn: { ...signIn, federations } };
}

/** OpenID Connect Discovery §4: the document must exist and name exactly this issuer. */
async function probeIssuer(issuer: string): Promise<ProbeResult> {
  const url = `${issuer.replace(/\/$/, '')}/.well-known/openid-configuration`;
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(PROBE_TIMEOUT_MS), headers: { accept: 'application/json' } });
    if (!response.ok) return { ok: false, detail: `${url} answered HTTP ${response.status}` };
    const document = (await response.json()) as { issuer?: unknown };
    if (document.issuer !== issuer) return { ok: false, detail: `the document names issuer ${JSON.stringify(document.issuer)}, not ${JSON.stringify(issuer)}` };
    return { ok: true, detail: 'the discovery document answers and its issuer matches' };
  } catch (error) {
    if (error instanceof Error && error.name === 'TimeoutError') return { ok: false, detail: `no answer from ${url} within ${PROBE_TIMEOUT_MS / 1000} s` };
    const cause = error instanceof Error && error.cause instanceof Error ? `: ${error.cause.message}` : '';
    return { ok: false, detail: `${url} could not be read (${error instanceof Error ? error.message : String(error)}${cause})` };
  }
}

async function hashPasswordFromStdin(): Promise<number> {
  if (process.stdin.isTTY) process.stderr.write('Type the password, press Enter, then Ctrl-D (the text is shown as you type; pipe it in to avoid that).\n');
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  const password = Buffer.concat(chunks).toString('utf8').replace(/\r?\n$/, '');
  if (password.length === 0) {
    process.stderr.write('pinpoint: refusing to hash an empty password\n');
    return 1;
  }
  const { hashPassword } = await import('./crypto/password.js');
  process.stdout.write(`${await hashPassword(password)}\n`);
  return 0;
}

function printWarnings(warnings: readonly string[]): void {
  for (const warning of warnings) process.stderr.write(`warning: ${warning}\n`);
}

// A reader that stops early (`pinpoint keys list | head -1`) closes the pipe: end quietly, as Unix tools do, not with a stack trace.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code !== 'EPIPE') throw error;
  process.exit(process.exitCode ?? 0);
});

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (error) {
  const usage = error instanceof UsageError || String((error as NodeJS.ErrnoException | null)?.code).startsWith('ERR_PARSE_ARGS');
  if (usage) {
    process.stderr.write(`pinpoint: ${(error as Error).message}\n${USAGE}`);
    process.exitCode = 2;
  } else {
    process.stderr.write(`pinpoint: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  }
}

/**
 * The primary of `pinpoint serve` (DESIGN.md §11): it only supervises. It starts N workers (worker.ts) sharing the
 * one listener (node:cluster), restarts one that dies (backing off when they die young), passes SIGTERM/SIGINT on
 * (each worker answers what it has in flight, then the primary exits 0), replaces the workers one at a time on
 * SIGHUP when the re-read config is valid (all of them, or none when a new one cannot start), relays limiter counts
 * between workers (and from a serving worker to one that starts) and serves their summed metrics.
 */
import cluster, { type Worker } from 'node:cluster';
import { randomBytes } from 'node:crypto';
import { readFile, rename, rm, writeFile } from 'node:fs/promises';
import type { Server } from 'node:http';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Logger } from 'pino';
import { loadConfigApart } from './config/load-apart.js';
import { ConfigInvalid, formatProblem } from './config/problems.js';
import type { Config } from './config/types.js';
import { formatListen } from './config/urls.js';
import { workerCount, workersWithoutState, type WorkersSetting } from './config/workers.js';
import { ClusterMetrics, COLLECT_EVERY_MS, processRegistry, serveMetrics } from './http/metrics.js';
import { BudgetPool, isBudgetAsk, isBudgetReleased } from './http/budget-shares.js';
import { DRAIN_DEADLINE_MS } from './http/connection-drain.js';
import { fanOutLimiterMessage, isHandoverMessage, isLimiterMessage, relayHandover } from './http/shared-limiter.js';
import { createLogger } from './log.js';
import { isPinpointServer, pidIn } from './pid-file.js';
import { VERSION } from './version.js';
import { isWorkerMessage, type PrimaryMessage } from './worker-protocol.js';

/** A worker that lived this long had started fine: its death starts the backoff afresh. */
const STABLE_MS = 30_000;
const FIRST_RESTART_DELAY_MS = 100;
const MAX_RESTART_DELAY_MS = 10_000;
/** Young deaths in a row after which, with no worker serving, the primary gives up (exit 1). */
const MAX_YOUNG_DEATHS = 10;
/** A worker not serving this long after it was forked is stuck (a store that never answers): it is killed, as if it had died. */
const START_TIMEOUT_MS = 60_000;
/** The slot whose worker sweeps the store and writes the key_rotation audit line (every N has a slot 0). */
const HOUSEKEEPING_SLOT = 0;
/**
 * A worker asked to stop that has not exited this long after it was asked is killed: it closes what it still has at
 * its own drain deadline, so only a stuck process (a store that does not close) is.
 */
const DRAIN_TIMEOUT_MS = DRAIN_DEADLINE_MS + 5_000;

/** When to start a worker in place of one that died: at once after a long life, then doubling while they die young. */
export class RestartBackoff {
  #youngDeaths = 0;

  /** The delay before the next start, after a worker that lived `livedMs`; undefined once they keep dying young. */
  next(livedMs: number): number | undefined {
    if (livedMs >= STABLE_MS) this.#youngDeaths = 0;
    this.#youngDeaths += 1;
    if (this.#youngDeaths > MAX_YOUNG_DEATHS) return undefined;
    return Math.min(FIRST_RESTART_DELAY_MS * 2 ** (this.#youngDeaths - 1), MAX_RESTART_DELAY_MS);
  }
}

/** Where `pinpoint reload` leaves its request and finds the answer: next to the pid file. */
export const reloadFiles = (pidFile: string): { readonly request: string; readonly result: string } => ({
  request: `${pidFile}.reload-request`,
  result: `${pidFile}.reload-result`,
});

/** What `pinpoint reload` asks: which file to read, and a nonce the answer repeats. */
export interface ReloadRequest {
  readonly nonce: string;
  readonly config: string;
}

/** The primary's answer to a reload: taken or not, with every problem. */
export interface ReloadResult {
  readonly nonce: string;
  readonly ok: boolean;
  readonly problems: readonly string[];
  readonly workers?: number;
}

export interface SuperviseOptions {
  /** `serve --workers`: wins over the config's `workers`, also after a reload. */
  readonly workers?: WorkersSetting;
  readonly pidFile?: string;
}

/** A config ready to hand to workers: validated, with the files it names that workers would otherwise read. */
interface Prepared {
  readonly config: Config;
  readonly warnings: readonly string[];
  readonly https?: { readonly cert: string; readonly key: string };
  readonly count: number;
}

/** One worker process. */
interface Member {
  readonly worker: Worker;
  readonly slot: number;
  /** The config it was started with. */
  readonly prepared: Prepared;
  readonly startedAt: number;
  ready: boolean;
  /** Asked to stop: its exit is expected. */
  retiring: boolean;
  exitedAt?: number;
  /** What it said when it could not start. */
  failure?: string;
  /** Resolves once it serves (with what the start line shows); rejects when it exits first. */
  readonly readiness: Promise<{ readonly state: string; readonly keyIds: readonly string[] }>;
  readonly exited: Promise<void>;
}

/** Runs the server until a signal stops it or workers keep dying; resolves with the exit code. */
export async function supervise(config: Config, warnings: readonly string[], options: SuperviseOptions = {}): Promise<number> {
  const prepared = await prepare(config, warnings, options.workers);
  if ('problems' in prepared) {
    for (const problem of prepared.problems) process.stderr.write(`pinpoint: ${problem}\n`);
    return 1;
  }
  return new Supervisor(prepared, options).run();
}

/** Reads the files workers need (TLS), and checks what `check` cannot see: `--workers` against the state. */
async function prepare(config: Config, warnings: readonly string[], override: WorkersSetting | undefined): Promise<Prepared | { problems: string[] }> {
  const problems: string[] = [];
  const setting = override ?? config.workers ?? 1;
  const needsState = config.state.kind === 'memory' && override !== undefined ? workersWithoutState(setting) : undefined;
  if (needsState !== undefined) problems.push(`--workers ${setting} ${needsState}`);
  let https: Prepared['https'];
  if (config.tls.mode === 'terminate' && config.tls.certFile !== undefined && config.tls.keyFile !== undefined) {
    try {
      https = { cert: await readFile(config.tls.certFile, 'utf8'), key: await readFile(config.tls.keyFile, 'utf8') };
    } catch (error) {
      problems.push(`cannot read the TLS certificate or key: ${(error as Error).message}`);
    }
  }
  if (problems.length > 0) return { problems };
  return { config, warnings, count: workerCount(setting), ...(https !== undefined && { https }) };
}

class Supervisor {
  #current: Prepared;
  readonly #options: SuperviseOptions;
  readonly #logger: Logger;
  /** Start line, warnings and reload outcomes: printed whatever log_level says, short of "silent" (DESIGN.md §2). */
  #announcer: Logger;
  /** The one member of each slot (0..N-1), filled only by #assign; undefined while its restart waits for its backoff. */
  #slots: (Member | undefined)[] = [];
  readonly #members = new Set<Member>();
  #phase: 'starting' | 'serving' | 'stopping' = 'starting';
  readonly #backoff = new RestartBackoff();
  readonly #restarts = new Map<number, NodeJS.Timeout>();
  /** The reloads in progress (one after another while SIGHUPs come); a stop waits for them before it removes their files. */
  #reloadRun: Promise<void> | undefined;
  #reloadAgain = false;
  #pidWritten = false;
  /** Made when a metrics listener first opens: the process figures sample the event loop about 100 times a second. */
  #metricsSource: ClusterMetrics | undefined;
  #metricsServer: MetricsListener | undefined;
  /** Takes the workers' figures between scrapes while a metrics listener is open, so a crash loses little of them. */
  #collecting: NodeJS.Timeout | undefined;
  #finish: (code: number) => void = () => undefined;
  /** Rejects when a worker that was already serving dies before the first start completes. */
  #startFailed: (error: Error) => void = () => undefined;
  readonly #signals: [NodeJS.Signals, () => void][] = [];
  /** What no worker holds of the failure budgets (DESIGN.md §11: limits across workers). */
  readonly #budgets = new BudgetPool({
    workers: () => this.#current.count,
    // Only a serving worker holds any of a budget; one still starting would only make a recall wait.
    connected: () => [...this.#members].filter((member) => member.ready && member.worker.isConnected()).map((member) => member.worker.id),
    send: (id, message) => {
      const worker = this.#workers().find((candidate) => candidate.id === id);
      if (worker?.isConnected() === true) worker.send(message, undefined, () => undefined);
    },
  });

  constructor(prepared: Prepared, options: SuperviseOptions) {
    this.#current = prepared;
    this.#options = options;
    this.#logger = createLogger(prepared.config.logLevel);
    this.#announcer = announcerOf(this.#logger, prepared.config);
  }

  async run(): Promise<number> {
    const done = new Promise<number>((resolve) => (this.#finish = resolve));
    const config = this.#current.config;
    for (const warning of this.#current.warnings) this.#announcer.warn(warning);
    // DESIGN.md §2: warnings are printed at once, not when the 4 KiB log buffer fills.
    this.#logger.flush();
    this.#listen('SIGTERM', () => void this.#stop('SIGTERM', 0));
    this.#listen('SIGINT', () => void this.#stop('SIGINT', 0));
    this.#listen('SIGHUP', () => this.#reload());
    // Workers run worker.ts (worker.js once built) with this process's Node options; the config goes over IPC as a
    // structured clone (Maps included), never read again from the file.
    const here = fileURLToPath(import.meta.url);
    cluster.setupPrimary({ exec: here.replace(/supervisor\.(ts|js)$/, 'worker.$1'), args: [], serialization: 'advanced' });

    try {
      if (this.#options.pidFile !== undefined) await this.#writePidFile(this.#options.pidFile);
      if (config.metrics !== undefined) this.#metricsServer = await this.#openMetrics(config.metrics.listen);
      const starting = Array.from({ length: this.#current.count }, (_, slot) => this.#launch(slot, this.#current));
      this.#slots = starting;
      const failedStart = new Promise<never>((_, reject) => (this.#startFailed = reject));
      const [first] = await Promise.race([Promise.all(starting.map((member) => member.readiness)), failedStart]);
      this.#phase = 'serving';
      this.#announcer.info(
        {
          version: VERSION,
          issuer: config.baseUrl,
          listen: formatListen(config.listen),
          state: first?.state,
          tls: config.tls.mode,
          keys: first?.keyIds,
          workers: this.#current.count,
          ...(config.metrics !== undefined && { metrics: formatListen(config.metrics.listen) }),
        },
        'pinpoint is serving',
      );
      this.#logger.flush();
      if (this.#reloadAgain) this.#reload();
    } catch (error) {
      // A server that cannot start says why on stderr and exits 1, leaving nothing open.
      process.stderr.write(`pinpoint: ${(error as Error).message}\n`);
      void this.#stop(undefined, 1);
    }
    return done;
  }

  /**
   * Writes this primary's pid before any worker starts, so a start that cannot write it fails before it says it is
   * serving; a file naming another running `pinpoint serve` is left to it (its reload and its stop need it).
   */
  async #writePidFile(pidFile: string): Promise<void> {
    const holder = await pidIn(pidFile);
    if (holder !== undefined && holder !== process.pid && (await isPinpointServer(holder))) {
      throw new Error(`--pid-file ${pidFile} names a running server (pid ${holder}); stop it, or give this one another file`);
    }
    try {
      await writeAtomically(pidFile, `${process.pid}\n`);
    } catch (error) {
      throw new Error(`cannot write the pid file ${pidFile}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
    }
    this.#pidWritten = true;
  }

  #listen(signal: NodeJS.Signals, handler: () => void): void {
    process.on(signal, handler);
    this.#signals.push([signal, handler]);
  }

  /** Forks a worker for `slot` that will serve `prepared`. */
  #launch(slot: number, prepared: Prepared): Member {
    const worker = cluster.fork();
    let ready!: (info: { state: string; keyIds: readonly string[] }) => void;
    let notReady!: (error: Error) => void;
    let exited!: () => void;
    const member: Member = {
      worker,
      slot,
      prepared,
      startedAt: Date.now(),
      ready: false,
      retiring: false,
      readiness: new Promise((resolve, reject) => {
        ready = resolve;
        notReady = reject;
      }),
      exited: new Promise<void>((resolve) => (exited = resolve)),
    };
    // Whoever started it waits for readiness; a rejection nobody waits for must not end the process.
    member.readiness.catch(() => undefined);
    this.#members.add(member);
    const stuck = setTimeout(() => {
      member.failure = `not serving ${START_TIMEOUT_MS / 1000} s after it started`;
      worker.process.kill('SIGKILL');
    }, START_TIMEOUT_MS);
    worker.on('error', () => undefined);
    worker.on('message', (message: unknown) => {
      if (isLimiterMessage(message)) {
        fanOutLimiterMessage(message, worker, this.#workers());
        return;
      }
      if (isHandoverMessage(message)) {
        relayHandover(message, worker, this.#serving(), this.#workers());
        return;
      }
      if (isBudgetAsk(message)) return this.#budgets.ask(worker.id, message);
      if (isBudgetReleased(message)) return this.#budgets.released(worker.id, message);
      if (this.#metricsSource?.received(worker, message) === true) return;
      if (!isWorkerMessage(message)) return;
      if (message.pinpoint === 'hello') {
        // A worker asked to stop before it said hello has nothing to start.
        const start: PrimaryMessage = member.retiring
          ? { pinpoint: 'stop' }
          : { pinpoint: 'start', config: prepared.config, slot, workers: prepared.count, housekeeper: slot === HOUSEKEEPING_SLOT, ...(prepared.https !== undefined && { https: prepared.https }) };
        worker.send(start, undefined, () => undefined);
      } else if (message.pinpoint === 'ready') {
        clearTimeout(stuck);
        member.ready = true;
        ready({ state: message.state, keyIds: message.keyIds });
      } else {
        member.failure = message.message;
      }
    });
    worker.on('exit', (code, signal) => {
      clearTimeout(stuck);
      member.exitedAt = Date.now();
      this.#members.delete(member);
      this.#budgets.gone(worker.id);
      if (!member.ready) notReady(new Error(member.failure ?? `a worker exited (${code ?? signal}) before it was serving`));
      // Its last figures may still be on the channel: they are read before the channel reports it closed.
      if (worker.isConnected()) worker.once('disconnect', () => this.#metricsSource?.left(worker));
      else this.#metricsSource?.left(worker);
      exited();
      this.#onExit(member, code, signal);
    });
    return member;
  }

  #workers(): Worker[] {
    return [...this.#members].map((member) => member.worker);
  }

  /** Workers serving and not asked to stop, the longest serving first (members are kept in start order). */
  #serving(): Worker[] {
    return [...this.#members].filter((member) => member.ready && !member.retiring).map((member) => member.worker);
  }

  #onExit(member: Member, code: number | null, signal: string | null): void {
    if (this.#phase === 'stopping' || member.retiring || this.#slots[member.slot] !== member) return;
    if (this.#phase === 'starting') {
      if (member.ready) this.#startFailed(new Error(`a worker exited (${code ?? signal}) while the others were starting`));
      return;
    }
    this.#slots[member.slot] = undefined;
    const lived = (member.exitedAt ?? Date.now()) - member.startedAt;
    let delay = this.#backoff.next(lived);
    const serving = this.#slots.some((other) => other?.ready === true);
    if (delay === undefined && !serving) {
      this.#announcer.error({ worker: member.worker.process.pid, exit_code: code, signal, failure: member.failure }, 'workers keep dying as they start; giving up');
      void this.#stop(undefined, 1);
      return;
    }
    // Others still serve: keep trying, at the longest delay.
    delay ??= MAX_RESTART_DELAY_MS;
    this.#announcer.warn(
      // Not `code`: the log redacts that key everywhere (it names authorization codes).
      { worker: member.worker.process.pid, slot: member.slot, exit_code: code, signal, ...(member.failure !== undefined && { failure: member.failure }), restartInMs: delay },
      'a worker stopped unexpectedly; starting another',
    );
    const slot = member.slot;
    this.#restarts.set(
      slot,
      setTimeout(() => {
        this.#restarts.delete(slot);
        // A slot filled or removed meanwhile (a reload) has its timer cleared; this checks it once more.
        if (this.#phase === 'serving' && slot < this.#slots.length && this.#slots[slot] === undefined) this.#assign(slot, this.#launch(slot, this.#current));
      }, delay),
    );
  }

  /** Makes `member` the one worker of `slot`: a restart pending there is dropped and the worker there before drains; that one is returned. */
  #assign(slot: number, member: Member): Member | undefined {
    clearTimeout(this.#restarts.get(slot));
    this.#restarts.delete(slot);
    const displaced = this.#slots[slot];
    this.#slots[slot] = member;
    if (displaced !== undefined) this.#retire(displaced);
    return displaced;
  }

  /** Drops the slots from `count` on: their workers drain and their pending restarts are cancelled. */
  async #dropSlotsFrom(count: number): Promise<void> {
    for (const [slot, timer] of this.#restarts) {
      if (slot < count) continue;
      clearTimeout(timer);
      this.#restarts.delete(slot);
    }
    const surplus = this.#slots.splice(count);
    for (const member of surplus) if (member !== undefined) this.#retire(member);
    await Promise.all(surplus.map((member) => member?.exited));
  }

  /** Asks every worker to finish its requests and exit; then lets go of the rest and resolves run() with `code`. */
  async #stop(signal: string | undefined, code: number): Promise<void> {
    if (this.#phase === 'stopping') return;
    this.#phase = 'stopping';
    if (signal !== undefined) this.#logger.info({ signal }, 'stopping: the workers finish their in-flight requests');
    for (const timer of this.#restarts.values()) clearTimeout(timer);
    this.#restarts.clear();
    clearInterval(this.#collecting);
    const members = [...this.#members];
    for (const member of members) this.#retire(member);
    await Promise.all(members.map((member) => member.exited));
    // A reload still answering would write its result after the files below are removed.
    await this.#reloadRun?.catch(() => undefined);
    for (const [name, handler] of this.#signals) process.off(name, handler);
    await closeServer(this.#metricsServer);
    this.#metricsServer = undefined;
    const pidFile = this.#options.pidFile;
    if (this.#pidWritten && pidFile !== undefined) {
      const { request, result } = reloadFiles(pidFile);
      await Promise.all([pidFile, request, result].map((file) => rm(file, { force: true })));
    }
    if (signal !== undefined) this.#logger.info('stopped');
    this.#logger.flush();
    this.#finish(code);
  }

  #retire(member: Member): void {
    if (member.retiring) return;
    member.retiring = true;
    if (member.worker.isConnected()) member.worker.send({ pinpoint: 'stop' } satisfies PrimaryMessage, undefined, () => undefined);
    const hung = setTimeout(() => {
      this.#logger.warn({ worker: member.worker.process.pid }, `a worker still had requests ${DRAIN_TIMEOUT_MS / 1000} s after it was asked to stop; killed`);
      member.worker.process.kill('SIGKILL');
    }, DRAIN_TIMEOUT_MS);
    void member.exited.then(() => clearTimeout(hung));
  }

  /** SIGHUP: one reload at a time; a signal during one runs another after it. */
  #reload(): void {
    if (this.#reloadRun !== undefined || this.#phase !== 'serving') {
      this.#reloadAgain = true;
      return;
    }
    this.#reloadRun = this.#reloadWhileAsked().finally(() => (this.#reloadRun = undefined));
  }

  async #reloadWhileAsked(): Promise<void> {
    do {
      this.#reloadAgain = false;
      await this.#reloadOnce();
    } while (this.#reloadAgain && this.#phase === 'serving');
  }

  async #reloadOnce(): Promise<void> {
    const request = await this.#takeReloadRequest();
    const file = request?.config ?? this.#current.config.file;
    let outcome: ReloadOutcome;
    try {
      outcome = await this.#replaceWorkers(file);
    } catch (error) {
      outcome = { problems: [`the reload failed: ${(error as Error).message}`] };
    }
    for (const warning of outcome.warnings ?? []) this.#announcer.warn(warning);
    if (this.#phase !== 'serving') {
      // No answer is written: the stop removes the request, and `pinpoint reload` sees the server end without one.
      this.#announcer.warn({ file }, 'the configuration was not taken: the server is stopping');
      this.#logger.flush();
      return;
    }
    const ok = outcome.problems.length === 0;
    if (ok) {
      this.#announcer.info({ file, workers: this.#current.count }, 'configuration reloaded: every worker serves it');
    } else {
      for (const problem of outcome.problems) this.#announcer.error({ file, problem }, 'reload refused');
      this.#announcer.warn({ file, problems: outcome.problems.length }, 'the configuration was not taken; the workers keep serving the one they have');
    }
    this.#logger.flush();
    if (request !== undefined && this.#options.pidFile !== undefined) {
      const result: ReloadResult = { nonce: request.nonce, ok, problems: outcome.problems, ...(ok && { workers: this.#current.count }) };
      await writeAtomically(reloadFiles(this.#options.pidFile).result, `${JSON.stringify(result)}\n`).catch(() => undefined);
    }
  }

  /** The request `pinpoint reload` left next to the pid file, if any (read once: it is removed). */
  async #takeReloadRequest(): Promise<ReloadRequest | undefined> {
    if (this.#options.pidFile === undefined) return undefined;
    const file = reloadFiles(this.#options.pidFile).request;
    try {
      const request = JSON.parse(await readFile(file, 'utf8')) as Partial<ReloadRequest>;
      await rm(file, { force: true });
      if (typeof request.nonce !== 'string' || typeof request.config !== 'string') return undefined;
      return { nonce: request.nonce, config: resolve(request.config) };
    } catch {
      return undefined;
    }
  }

  /**
   * DESIGN.md §11: the config at `file` is loaded and checked as `check` would; when valid, each slot gets a new
   * worker, and only once it serves is the old one asked to drain. When a new worker cannot start, every slot goes
   * back to the old config. A stop during the reload ends it (the caller sees the phase).
   */
  async #replaceWorkers(file: string): Promise<ReloadOutcome> {
    let loaded: { config: Config; warnings: string[] };
    try {
      loaded = await loadConfigApart(file);
    } catch (error) {
      if (!(error instanceof ConfigInvalid)) throw error;
      return { problems: error.problems.map(formatProblem), warnings: error.warnings };
    }
    const next = await prepare(loaded.config, loaded.warnings, this.#options.workers);
    if ('problems' in next) return { problems: next.problems, warnings: loaded.warnings };
    const warnings =
      next.config.state.kind === 'memory'
        ? [...loaded.warnings, 'state is in memory: the new worker starts with new signing keys and none of the grants, codes and sessions the old one held']
        : loaded.warnings;
    if (this.#phase !== 'serving') return { problems: [], warnings };

    // A new metrics address listens before anything else changes, so a busy port refuses the reload as a whole.
    const metricsListen = next.config.metrics === undefined ? undefined : formatListen(next.config.metrics.listen);
    let newMetrics: MetricsListener | undefined;
    if (next.config.metrics !== undefined && metricsListen !== this.#metricsServer?.listen) {
      try {
        newMetrics = await this.#openMetrics(next.config.metrics.listen);
      } catch (error) {
        return { problems: [`metrics.listen ${metricsListen}: ${(error as Error).message}`], warnings };
      }
    }

    const previous = this.#current;
    // Restarts during the reload start the new config; should it be rolled back, they are found by it and replaced too.
    this.#adopt(next);
    let failure: { readonly slot: number; readonly reason: string } | undefined;
    for (let slot = 0; slot < next.count && failure === undefined && this.#phase === 'serving'; slot += 1) {
      if (this.#serves(slot, next)) continue;
      const reason = await this.#replaceSlot(slot, next);
      if (reason !== undefined) failure = { slot, reason };
    }
    if (failure === undefined && this.#phase === 'serving') {
      if (next.config.metrics === undefined || newMetrics !== undefined) {
        await closeServer(this.#metricsServer);
        this.#metricsServer = newMetrics;
      }
      await this.#dropSlotsFrom(next.count);
      return { problems: [], warnings };
    }
    await closeServer(newMetrics);
    this.#adopt(previous);
    if (failure === undefined || this.#phase !== 'serving') return { problems: [], warnings };

    // An operator reads exit 1 as "the server serves what it served" (DESIGN.md §11): the slots already moved go back, never two configs at once.
    const problems = [`worker ${failure.slot} could not start with this configuration: ${failure.reason}`];
    for (let slot = 0; slot < previous.count && this.#phase === 'serving'; slot += 1) {
      // A slot waiting for its restart gets the old config from it.
      if (this.#slots[slot]?.prepared !== next) continue;
      const reason = await this.#replaceSlot(slot, previous);
      if (reason !== undefined) problems.push(`worker ${slot} could not start with the old configuration either (${reason}); it keeps the new one until it is replaced`);
    }
    if (this.#phase === 'serving') await this.#dropSlotsFrom(previous.count);
    return { problems, warnings };
  }

  /** Whether the worker of `slot` already serves `prepared`. */
  #serves(slot: number, prepared: Prepared): boolean {
    const member = this.#slots[slot];
    return member !== undefined && member.prepared === prepared && member.ready;
  }

  /** Starts a worker serving `prepared` for `slot` and, once it serves, drains the one it takes over from; why it could not start, if it could not. */
  async #replaceSlot(slot: number, prepared: Prepared): Promise<string | undefined> {
    const replacement = this.#launch(slot, prepared);
    const failure = await replacement.readiness.then(
      () => (replacement.exitedAt === undefined ? undefined : 'it exited as soon as it was serving'),
      (error: unknown) => (error as Error).message,
    );
    // A stop that began meanwhile has asked the replacement to stop too: it takes over nothing.
    if (failure !== undefined || this.#phase !== 'serving') return failure;
    await this.#assign(slot, replacement)?.exited;
    return undefined;
  }

  /** The new config is the current one: restarts use it, and the primary logs at its level. */
  #adopt(next: Prepared): void {
    this.#current = next;
    this.#logger.level = next.config.logLevel;
    this.#announcer = announcerOf(this.#logger, next.config);
  }

  async #openMetrics(listen: { readonly host: string; readonly port: number }): Promise<MetricsListener> {
    this.#metricsSource ??= new ClusterMetrics(processRegistry('primary'), () =>
      [...this.#members].filter((member) => member.ready).map((member) => ({ worker: member.worker, current: this.#slots[member.slot] === member })),
    );
    this.#collecting ??= setInterval(() => {
      if (this.#metricsServer !== undefined) this.#metricsSource?.collect();
    }, COLLECT_EVERY_MS).unref();
    return { listen: formatListen(listen), server: await serveMetrics({ registry: this.#metricsSource }, listen) };
  }
}

/** What a reload came to: every problem (none when taken), and the config's warnings. */
interface ReloadOutcome {
  readonly problems: string[];
  readonly warnings?: readonly string[];
}

interface MetricsListener {
  readonly listen: string;
  readonly server: Server;
}

async function closeServer(listener: MetricsListener | undefined): Promise<void> {
  if (listener !== undefined) await new Promise<void>((resolve) => listener.server.close(() => resolve()));
}

/** The logger for what an operator must see at start and on reload, whatever log_level says short of "silent". */
function announcerOf(logger: Logger, config: Config): Logger {
  return config.logLevel === 'silent' ? logger : logger.child({}, { level: 'info' });
}

/** Writes `text` to `file` so that a reader sees the old content or the new, never half of it. */
async function writeAtomically(file: string, text: string): Promise<void> {
  const temporary = `${file}.${randomBytes(4).toString('hex')}.tmp`;
  await writeFile(temporary, text, { mode: 0o644 });
  await rename(temporary, file);
}

/** A fresh nonce for a reload request. */
export const newNonce = (): string => randomBytes(12).toString('hex');

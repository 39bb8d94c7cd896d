/**
 * Password checks in hashing threads of their own, at most `size` at once (DESIGN.md §11 "Password hashing never
 * stalls tokens"): scrypt at the default cost holds about 128 MiB and 100+ ms of a core, so a sign-in storm must
 * neither fill libuv's pool, where jose's WebCrypto signatures run, nor grow the process without bound.
 */
import { Worker } from 'node:worker_threads';
import { Counter, Gauge, type Registry } from 'prom-client';
import { decoyCheck, hashingJob, passwordCheckOf, type PasswordCheck, type ScryptCost } from './password.js';

/** What a hashing thread answers for each check. */
type HashingAnswer = { readonly matches: boolean } | { readonly failure: string };

/** DESIGN.md §11: a sign-in waits at most this long for a hashing slot, then gets 503. */
export const DEFAULT_PASSWORD_WAIT_MS = 5000;
/** Checks that may wait per slot: a queue longer than what the slots get through in the wait only holds requests to refuse later. */
const WAITING_PER_SLOT = 32;

/** How many checks may wait for `slots` hashing slots: WAITING_PER_SLOT each, unless `chosen` (a test's number) says. */
export function passwordWaitingRoom(slots: number, chosen?: number): number {
  return chosen ?? WAITING_PER_SLOT * slots;
}

/** Why a check was not run: no slot within the wait, too many waiting, its thread ended under it, or the pool is closed. */
export type PasswordCheckRefusal = 'wait_exceeded' | 'queue_full' | 'thread_exited' | 'closed';

/** A password that was not checked for want of a hashing slot or thread: the caller answers 503 with Retry-After. */
export class PasswordCheckUnavailableError extends Error {
  constructor(
    readonly reason: PasswordCheckRefusal,
    readonly retryAfterSeconds: number,
  ) {
    super(`password check not run: ${reason}`);
    this.name = 'PasswordCheckUnavailableError';
  }
}

export interface PasswordPoolOptions {
  /** Checks running at once (limits.password_hashes); each holds about 128 MiB at the default cost. */
  readonly size: number;
  /** How long a check may wait for a slot before it is refused. */
  readonly maxWaitMs?: number;
  /** Checks that may wait at once; more are refused at once. Default: passwordWaitingRoom(size). */
  readonly maxWaiting?: number;
  /** Where the pool's gauges go (`pinpoint_password_hash_queue`...). */
  readonly registry?: Registry;
  /** Told when a thread ends without being asked to (a replacement starts when a check next needs one). */
  readonly onThreadExit?: (exitCode: number, error: Error | undefined) => void;
  /** What an unknown user's decoy check costs (password.ts typicalCost of the users' hashes); default DEFAULT_COST. */
  readonly decoyCost?: ScryptCost;
}

/** What the pool is doing now (its gauges read the same). */
export interface PasswordPoolStats {
  readonly running: number;
  readonly waiting: number;
  readonly threads: number;
}

interface Job {
  readonly check: PasswordCheck;
  /** Who asked (the sign-in's address group): waiting checks are served one party at a time, in turn. */
  readonly party: string;
  readonly resolve: (matches: boolean) => void;
  readonly reject: (error: Error) => void;
  timer?: NodeJS.Timeout;
}

interface HashingThread {
  readonly worker: Worker;
  job: Job | undefined;
  error: Error | undefined;
}

/**
 * A hashing thread's code, plain JavaScript run with `eval`, so it starts the same way from the TypeScript sources
 * and from dist/ with no loader: one check at a time, scryptSync blocking this thread only, which is the point —
 * libuv's pool stays free for WebCrypto's signatures (DESIGN.md §11). It answers the verdict or why scrypt could not
 * run, never the password.
 */
const HASHING_THREAD_SOURCE = `
const { parentPort } = require('node:worker_threads');
const { scryptSync, timingSafeEqual } = require('node:crypto');
parentPort.on('message', (job) => {
  let answer;
  try {
    answer = { matches: timingSafeEqual(scryptSync(job.password, job.salt, job.key.length, job.options), job.key) };
  } catch (error) {
    answer = { failure: String(error && error.message) };
  }
  parentPort.postMessage(answer);
});
`;

export class PasswordPool {
  readonly #size: number;
  readonly #maxWaitMs: number;
  readonly #maxWaiting: number;
  readonly #onThreadExit: PasswordPoolOptions['onThreadExit'];
  readonly #decoyCost: ScryptCost | undefined;
  readonly #refusals: Counter<'reason'> | undefined;
  readonly #threads = new Set<HashingThread>();
  /**
   * Checks waiting, by party, parties in the order they are next served: one address's burst can neither hold the
   * queue nor keep the slots from a sign-in of another address, which waits at most one check per party ahead of it.
   */
  readonly #waiting = new Map<string, Job[]>();
  #waitingCount = 0;
  #closed = false;

  constructor(options: PasswordPoolOptions) {
    this.#size = options.size;
    this.#maxWaitMs = options.maxWaitMs ?? DEFAULT_PASSWORD_WAIT_MS;
    this.#maxWaiting = passwordWaitingRoom(options.size, options.maxWaiting);
    this.#onThreadExit = options.onThreadExit;
    this.#decoyCost = options.decoyCost;
    const registers = options.registry === undefined ? undefined : [options.registry];
    if (registers === undefined) return;
    const stats = (): PasswordPoolStats => this.stats();
    new Gauge({ name: 'pinpoint_password_hash_queue', help: 'Password checks waiting for a hashing slot', registers, collect() { this.set(stats().waiting); } });
    new Gauge({ name: 'pinpoint_password_hashes_running', help: 'Password checks running in hashing threads', registers, collect() { this.set(stats().running); } });
    this.#refusals = new Counter({ name: 'pinpoint_password_checks_refused_total', help: 'Password checks answered 503, by reason', labelNames: ['reason'], registers });
  }

  /**
   * Whether `password` matches `hash`; for an unknown user (no hash) the same work is done and the answer is false. A
   * malformed hash gives false. `party` names who asks (an address group), for the turns of the waiting room.
   */
  verify(password: string, hash: string | undefined, party: string): Promise<boolean> {
    const check = hash === undefined ? decoyCheck(password, this.#decoyCost) : passwordCheckOf(password, hash);
    if (check === undefined) return Promise.resolve(false);
    return new Promise((resolve, reject) => this.#submit({ check, party, resolve, reject }));
  }

  stats(): PasswordPoolStats {
    let running = 0;
    for (const thread of this.#threads) if (thread.job !== undefined) running += 1;
    return { running, waiting: this.#waitingCount, threads: this.#threads.size };
  }

  /** Refuses every waiting check and ends every thread (the app's onClose). */
  async close(): Promise<void> {
    this.#closed = true;
    const waiting = [...this.#waiting.values()].flat();
    this.#waiting.clear();
    this.#waitingCount = 0;
    for (const job of waiting) this.#refuse(job, 'closed');
    await Promise.all([...this.#threads].map((thread) => thread.worker.terminate()));
  }

  #submit(job: Job): void {
    if (this.#closed) return this.#refuse(job, 'closed');
    const thread = this.#idleThread() ?? this.#startThread();
    if (thread !== undefined) return this.#run(thread, job);
    if (this.#waitingCount >= this.#maxWaiting && !this.#makeRoomFor(job.party)) return this.#refuse(job, 'queue_full');
    job.timer = setTimeout(() => {
      if (this.#leaveQueue(job)) this.#refuse(job, 'wait_exceeded');
    }, this.#maxWaitMs);
    const queue = this.#waiting.get(job.party);
    if (queue === undefined) this.#waiting.set(job.party, [job]);
    else queue.push(job);
    this.#waitingCount += 1;
  }

  /**
   * A full waiting room takes `party`'s check in place of the newest check of the party holding the most places, when
   * that party holds more than one place beyond `party`'s: a queue filled from one address never turns the others away.
   */
  #makeRoomFor(party: string): boolean {
    let largest: Job[] | undefined;
    for (const queue of this.#waiting.values()) if (largest === undefined || queue.length > largest.length) largest = queue;
    const own = this.#waiting.get(party)?.length ?? 0;
    if (largest === undefined || largest.length <= own + 1) return false;
    const evicted = largest[largest.length - 1] as Job;
    this.#leaveQueue(evicted);
    this.#refuse(evicted, 'queue_full');
    return true;
  }

  /** Takes `job` out of the waiting room; false when it was not there (already running or refused). */
  #leaveQueue(job: Job): boolean {
    const queue = this.#waiting.get(job.party);
    const index = queue === undefined ? -1 : queue.indexOf(job);
    if (queue === undefined || index === -1) return false;
    queue.splice(index, 1);
    if (queue.length === 0) this.#waiting.delete(job.party);
    this.#waitingCount -= 1;
    return true;
  }

  #refuse(job: Job, reason: PasswordCheckRefusal): void {
    clearTimeout(job.timer);
    this.#refusals?.inc({ reason });
    job.reject(new PasswordCheckUnavailableError(reason, Math.max(1, Math.ceil(this.#maxWaitMs / 1000))));
  }

  #idleThread(): HashingThread | undefined {
    for (const thread of this.#threads) if (thread.job === undefined) return thread;
    return undefined;
  }

  /** A new thread when fewer than `size` run: started on demand and kept, unref'd while idle so a process can exit. */
  #startThread(): HashingThread | undefined {
    if (this.#threads.size >= this.#size) return undefined;
    // No execArgv of the parent: a flag such as --input-type=module would make the CommonJS source fail.
    const thread: HashingThread = { worker: new Worker(HASHING_THREAD_SOURCE, { eval: true, execArgv: [] }), job: undefined, error: undefined };
    thread.worker.on('message', (answer: HashingAnswer) => this.#answered(thread, answer));
    thread.worker.on('error', (error) => (thread.error = error));
    thread.worker.on('exit', (exitCode) => this.#exited(thread, exitCode));
    thread.worker.unref();
    this.#threads.add(thread);
    return thread;
  }

  #run(thread: HashingThread, job: Job): void {
    thread.job = job;
    // A check in flight keeps the process alive until it is answered.
    thread.worker.ref();
    thread.worker.postMessage(hashingJob(job.check));
  }

  #answered(thread: HashingThread, answer: HashingAnswer): void {
    const job = thread.job;
    thread.job = undefined;
    thread.worker.unref();
    if (job !== undefined) {
      if ('matches' in answer) job.resolve(answer.matches);
      else job.reject(new Error(`scrypt failed: ${answer.failure}`));
    }
    this.#runNext(thread);
  }

  /** The first party's oldest check runs; that party, if it has more waiting, goes to the back of the turns. */
  #runNext(thread: HashingThread | undefined): void {
    if (thread === undefined) return;
    const next = this.#waiting.entries().next();
    if (next.done === true) return;
    const [party, queue] = next.value;
    const job = queue.shift() as Job;
    this.#waiting.delete(party);
    if (queue.length > 0) this.#waiting.set(party, queue);
    this.#waitingCount -= 1;
    clearTimeout(job.timer);
    this.#run(thread, job);
  }

  #exited(thread: HashingThread, exitCode: number): void {
    this.#threads.delete(thread);
    if (thread.job !== undefined) this.#refuse(thread.job, this.#closed ? 'closed' : 'thread_exited');
    if (this.#closed) return;
    this.#onThreadExit?.(exitCode, thread.error);
    // A replacement starts now for checks already waiting, otherwise when the next check comes.
    if (this.#waitingCount > 0) this.#runNext(this.#startThread());
  }
}

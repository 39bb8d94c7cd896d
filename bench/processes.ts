/** Child processes of the benchmark: spawned pinned to one core (taskset), spoken to over IPC, measured through /proc. */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readdirSync, readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import type { RpcReply } from './common.js';

/** Core of the servers and core of the load driver (and of this runner). */
export const SERVER_CORE = 0;
export const DRIVER_CORE = 1;
/** Every core of the machine: a child spawned by the runner (pinned itself) would otherwise inherit its one core. */
export const ALL_CORES = 'all';
export type Cores = number | typeof ALL_CORES;

/** taskset's list for `cores`. */
const coreList = (cores: Cores): string => (cores === ALL_CORES ? `0-${cpus().length - 1}` : String(cores));

const CLOCK_TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

export interface SpawnOptions {
  readonly script: string;
  readonly args?: readonly string[];
  readonly env?: Record<string, string>;
  /** Core to pin to, or ALL_CORES; undefined when taskset is missing. */
  readonly core: Cores | undefined;
  /** Files for stdout and stderr (stderr of the driver is inherited). */
  readonly stdout?: string;
  readonly stderr?: string;
  /** Extra node options, e.g. --cpu-prof. */
  readonly nodeOptions?: readonly string[];
  /** Modules loaded with --import after tsx (so they may be TypeScript), e.g. a module-resolution hook. */
  readonly imports?: readonly string[];
  /** A command node runs under, with its arguments (valgrind for --instructions); it must keep node's pid. */
  readonly wrapper?: readonly string[];
}

/**
 * The command and its arguments that run node with `nodeArgs` on `cores` (anywhere when undefined: no taskset), under
 * `wrapper` when one is given.
 */
export function nodeOnCores(cores: Cores | undefined, nodeArgs: readonly string[], wrapper: readonly string[] = []): [string, string[]] {
  const node = [...wrapper, process.execPath, ...nodeArgs];
  return cores === undefined ? [node[0] as string, node.slice(1)] : ['taskset', ['-c', coreList(cores), ...node]];
}

function spawnNode(options: SpawnOptions, ipc: boolean, pipeStdout = false): ChildProcess {
  const imports = (options.imports ?? []).flatMap((module) => ['--import', module]);
  const nodeArgs = [...(options.nodeOptions ?? []), '--import', 'tsx', ...imports, options.script, ...(options.args ?? [])];
  const [command, argv] = nodeOnCores(options.core, nodeArgs, options.wrapper);
  const out = pipeStdout ? 'pipe' : options.stdout === undefined ? 'inherit' : openSync(options.stdout, 'a');
  const err = options.stderr === undefined ? 'inherit' : openSync(options.stderr, 'a');
  // taskset execs node in place, so the pid is node's and the IPC channel (fd 3) passes through.
  const child = spawn(command, argv, {
    stdio: ['ignore', out, err, ...(ipc ? (['ipc'] as const) : [])],
    env: { ...process.env, ...options.env },
  });
  if (typeof out === 'number') closeSync(out);
  if (typeof err === 'number') closeSync(err);
  return child;
}

/** Runs a node script to its end; resolves with its stdout (stderr is inherited). */
export async function runScript(options: SpawnOptions): Promise<string> {
  const child = spawnNode(options, false, true);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    child.stdout?.on('data', (chunk: Buffer) => chunks.push(chunk));
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code === 0) resolve(Buffer.concat(chunks).toString('utf8'));
      else reject(new Error(`${options.script} exited with ${code}`));
    });
  });
}

/** What the runner needs of a server's process: its pid, its RPC commands (benchmark servers only), and stopping it. */
export interface ServerProcess {
  readonly pid: number;
  call<T>(cmd: string, fields?: Record<string, unknown>): Promise<T>;
  stop(): Promise<void>;
}

/** A child that answers RPC requests (common.ts serveRpc) and says `ready` once it listens. */
export class Peer<Ready extends object = { ready: true }> implements ServerProcess {
  readonly name: string;
  readonly child: ChildProcess;
  readonly ready: Promise<Ready>;
  readonly #pending = new Map<number, { resolve: (value: unknown) => void; reject: (error: Error) => void }>();
  #nextId = 1;
  #exited: Error | undefined;

  constructor(name: string, options: SpawnOptions) {
    this.name = name;
    this.child = spawnNode(options, true);
    this.ready = new Promise<Ready>((resolve, reject) => {
      this.child.on('message', (message: RpcReply | (Ready & { ready: true })) => {
        if ('ready' in message) return resolve(message);
        const waiting = this.#pending.get(message.id);
        if (waiting === undefined) return;
        this.#pending.delete(message.id);
        if (message.ok) waiting.resolve(message.value);
        else waiting.reject(new Error(`${name}: ${message.error}`));
      });
      this.child.on('exit', (code, signal) => {
        this.#exited = new Error(`${name} exited (${signal ?? code})`);
        reject(this.#exited);
        for (const waiting of this.#pending.values()) waiting.reject(this.#exited);
        this.#pending.clear();
      });
    });
    // A failure to start is reported by whoever awaits `ready`; this keeps it from being unhandled meanwhile.
    this.ready.catch(() => undefined);
  }

  get pid(): number {
    return this.child.pid ?? -1;
  }

  async call<T>(cmd: string, fields: Record<string, unknown> = {}): Promise<T> {
    if (this.#exited !== undefined) throw this.#exited;
    const id = this.#nextId++;
    return new Promise<T>((resolve, reject) => {
      this.#pending.set(id, { resolve: resolve as (value: unknown) => void, reject });
      this.child.send({ id, cmd, ...fields });
    });
  }

  /** Asks the child to stop, and kills it if it has not within `ms`. */
  async stop(ms = 5000): Promise<void> {
    if (this.#exited !== undefined || this.child.exitCode !== null) return;
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    this.call('stop').catch(() => undefined);
    const timer = setTimeout(() => this.child.kill('SIGKILL'), ms);
    await exited;
    clearTimeout(timer);
  }
}

/**
 * The fields of a /proc stat line after the parenthesised command name (which may hold spaces): state first, then
 * the parent pid; utime and stime are [11] and [12].
 */
const statFields = (stat: string): string[] => stat.slice(stat.lastIndexOf(')') + 2).split(' ');

/** CPU seconds (user + system, all threads) the process has used so far. */
export function cpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = statFields(stat);
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
  } catch {
    return Number.NaN;
  }
}

/** One thread's name and its CPU seconds so far, user and system apart. */
export interface ThreadCpu {
  readonly name: string;
  readonly user: number;
  readonly system: number;
}

/** Every thread of process `pid` by thread id: its name (/proc comm) and CPU seconds, user and system apart. */
export function threadCpu(pid: number): Map<number, ThreadCpu> {
  const threads = new Map<number, ThreadCpu>();
  let entries: string[];
  try {
    entries = readdirSync(`/proc/${pid}/task`);
  } catch {
    return threads;
  }
  for (const tid of entries) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      // Node names none of its threads: the event loop's is told by its id (the process's), the rest by what Linux shows.
      const name = Number(tid) === pid ? 'main thread (event loop)' : stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const fields = statFields(stat);
      threads.set(Number(tid), { name, user: Number(fields[11]) / CLOCK_TICKS, system: Number(fields[12]) / CLOCK_TICKS });
    } catch {
      // ended meanwhile
    }
  }
  return threads;
}

/** CPU seconds used meanwhile by the threads of one name, user and system apart. */
export interface ThreadsCpuUsed {
  readonly name: string;
  threads: number;
  user: number;
  system: number;
}

/**
 * CPU used between two `threadCpu` readings, summed per thread name (libuv's pool threads share one, V8's too), user
 * and system apart; a thread that began meanwhile counts from zero. Largest first.
 */
export function threadCpuUsed(before: ReadonlyMap<number, ThreadCpu>, after: ReadonlyMap<number, ThreadCpu>): ThreadsCpuUsed[] {
  const byName = new Map<string, ThreadsCpuUsed>();
  for (const [tid, now] of after) {
    const then = before.get(tid);
    const entry = byName.get(now.name) ?? { name: now.name, threads: 0, user: 0, system: 0 };
    entry.threads += 1;
    entry.user += now.user - (then?.user ?? 0);
    entry.system += now.system - (then?.system ?? 0);
    byName.set(now.name, entry);
  }
  return [...byName.values()].sort((a, b) => b.user + b.system - (a.user + a.system));
}

/** Resident set size now and its peak, in bytes. */
export function residentMemory(pid: number): { rss: number; peak: number } {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kib = (field: string): number => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? Number.NaN) * 1024;
    return { rss: kib('VmRSS'), peak: kib('VmHWM') };
  } catch {
    return { rss: Number.NaN, peak: Number.NaN };
  }
}

/** Pins this process (all its threads) to `core`; false when that failed. */
export function pinSelf(core: number): boolean {
  return pinProcess(process.pid, core);
}

/** Pins process `pid` (all its threads) to `cores`; false when that failed. */
export function pinProcess(pid: number, cores: Cores): boolean {
  return spawnSync('taskset', ['-a', '-cp', coreList(cores), String(pid)], { stdio: 'ignore' }).status === 0;
}

/** `root` and every process descended from it (pinpoint serve's cluster workers), from the parent pids in /proc. */
export function processTree(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // ended meanwhile
    }
    const parent = Number(statFields(stat)[1]);
    children.set(parent, [...(children.get(parent) ?? []), Number(entry)]);
  }
  const tree = [root];
  for (let i = 0; i < tree.length; i += 1) tree.push(...(children.get(tree[i] as number) ?? []));
  return tree;
}

/** CPU seconds used so far by each process of the tree rooted at `root`. */
export function cpuOfTree(root: number): Map<number, number> {
  const used = new Map<number, number>();
  for (const pid of processTree(root)) {
    const seconds = cpuSeconds(pid);
    if (Number.isFinite(seconds)) used.set(pid, seconds);
  }
  return used;
}

/** Resident set size of the tree rooted at `root` now, summed over its processes, in bytes (NaN once `root` has ended). */
export function treeResidentMemory(root: number): number {
  const [first, ...rest] = processTree(root).map((pid) => residentMemory(pid).rss);
  // A descendant that ended between the listing and the read counts as nothing.
  return rest.reduce((sum, rss) => sum + (Number.isNaN(rss) ? 0 : rss), first as number);
}

/**
 * CPU seconds used so far by each of `pids` that is a process of this machine named `name` (a pid another
 * machine gave, or that has ended since, is left out).
 */
export function cpuOfNamed(pids: readonly number[], name: string): Map<number, number> {
  const used = new Map<number, number>();
  for (const pid of pids) {
    try {
      if (readFileSync(`/proc/${pid}/comm`, 'utf8').trim() !== name) continue;
    } catch {
      continue;
    }
    const seconds = cpuSeconds(pid);
    if (Number.isFinite(seconds)) used.set(pid, seconds);
  }
  return used;
}

/** Busy and total CPU ticks of the whole machine, all cores, since boot (/proc/stat). */
export function machineTicks(): { busy: number; total: number } {
  try {
    // user nice system idle iowait irq softirq steal (guest time is already counted in user).
    const fields = (readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '').trim().split(/\s+/).slice(1, 9).map(Number);
    const total = fields.reduce((sum, value) => sum + value, 0);
    const idle = (fields[3] ?? 0) + (fields[4] ?? 0);
    return { busy: total - idle, total };
  } catch {
    return { busy: Number.NaN, total: Number.NaN };
  }
}

import { closeSync, mkdirSync, openSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import type { Worker } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { sqliteStatement } from './dialect.js';
import { guardHolds, type Driver, type Script, type Step, type Written } from './driver.js';
import { migrateSqlite } from './migrations.js';
import { KEEPS_HOLDINGS, type Statement } from './sql.js';
import { startCheckpointer } from './sqlite-checkpointer.js';
import { SqlStore } from './sql-store.js';
import { StoreUnavailableError } from './unavailable.js';

/** How long a writer waits for another process's write lock before the store counts as unavailable. */
const BUSY_TIMEOUT_MS = 5000;

/** How often the checkpointer thread copies the WAL back into the database file (a page written often is copied once). */
const CHECKPOINT_INTERVAL_MS = 250;

/**
 * WAL pages (4 KiB) after which a commit checkpoints on the request path. Writers keep the WAL from being
 * fully copied while the checkpointer works, so this is what finally restarts it, finishing what the
 * checkpointer left: rarely, and with little to copy.
 */
const FALLBACK_AUTOCHECKPOINT_PAGES = 30_000;

/** SQLite primary result codes that mean "the database cannot serve now", not "this request is wrong". */
const UNAVAILABLE_CODES = new Set([
  'SQLITE_BUSY',
  'SQLITE_LOCKED',
  'SQLITE_IOERR',
  'SQLITE_FULL',
  'SQLITE_CANTOPEN',
  'SQLITE_READONLY',
  'SQLITE_PROTOCOL',
  'SQLITE_NOMEM',
]);

/** The primary result code of a better-sqlite3 error's (possibly extended) code: SQLITE_IOERR_SHORT_READ -> SQLITE_IOERR. */
const primaryCode = (error: unknown): string | undefined => {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code.split('_', 2).join('_') : undefined;
};

/** How long a process waits before trying again to put a new file in WAL mode while another process does too. */
const WAL_SWITCH_RETRY_MS = 20;

/** Something to wait on synchronously: opening the store happens in a constructor, at start. */
const PAUSE = new Int32Array(new SharedArrayBuffer(4));

/**
 * Puts the file in WAL mode. Processes opening a new file at once (the workers of a first start) can find it locked,
 * and SQLite then answers the switch with SQLITE_BUSY at once, without its busy timeout: so it is tried again, up to
 * BUSY_TIMEOUT_MS.
 */
function switchToWal(db: Database.Database): void {
  const deadline = Date.now() + BUSY_TIMEOUT_MS;
  for (;;) {
    let failure: unknown;
    try {
      const mode: unknown = db.pragma('journal_mode = WAL', { simple: true });
      if (mode === 'wal') return;
      failure = new Error(`the database stayed in journal mode ${String(mode)}, not WAL`);
    } catch (error) {
      if (primaryCode(error) !== 'SQLITE_BUSY') throw error;
      failure = error;
    }
    if (Date.now() >= deadline) throw failure;
    Atomics.wait(PAUSE, 0, 0, WAL_SWITCH_RETRY_MS);
  }
}

/** Thrown inside a script's transaction when a guard fails, so the savepoint rolls back; never leaves the driver. */
const GUARD_FAILED = Symbol('guard failed');

/** A write waiting for the end of the event-loop turn, when it commits with the others queued in that turn. */
interface PendingWrite {
  readonly run: () => unknown;
  /** Whether every statement it runs is in KEEPS_HOLDINGS: its commit leaves the holdings version as it is. */
  readonly keepsHoldings: boolean;
  readonly resolve: (value: never) => void;
  readonly reject: (reason: unknown) => void;
}

type WriteOutcome = { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly error: unknown };

interface Prepared {
  readonly statement: Database.Statement;
  /** sqliteStatement's order: which value each `?` takes; undefined when they come as given. */
  readonly order: readonly number[] | undefined;
  /** A reader's column names: it returns each row as an array of values (raw mode), which rowsOf names. */
  readonly columns: readonly string[] | undefined;
}

/**
 * Rows of a raw reader as objects keyed by column name, as better-sqlite3 would give them (a later column of the same
 * name wins). Built here because better-sqlite3 sets each property through V8's API, at 1,600 instructions a column:
 * this loop saved 7,800 instructions a refresh (bench --instructions) and 1.5 µs a 16-column row.
 */
function rowsOf<R>(columns: readonly string[], raw: readonly (readonly unknown[])[]): R[] {
  return raw.map((values) => {
    const row: Record<string, unknown> = {};
    for (let i = 0; i < columns.length; i++) row[columns[i] as string] = values[i];
    return row as R;
  });
}

/**
 * One SQLite file (better-sqlite3, WAL). Reads run at once; writes wait for the end of the event-loop turn and
 * commit together (group commit, see #write); a script is a savepoint inside that commit.
 */
class SqliteDriver implements Driver {
  readonly description: string;
  readonly #db: Database.Database;
  readonly #prepared = new Map<Statement, Prepared>();
  readonly #runScript: (script: Script) => number[];
  readonly #writeBatch: Database.Transaction<(writes: readonly PendingWrite[]) => WriteOutcome[]>;
  #pending: PendingWrite[] = [];
  readonly #checkpointer: Worker;
  readonly #dataVersion: Database.Statement;
  /** PRAGMA data_version when last asked: it changes when another connection (another process) commits. */
  #seenDataVersion: unknown;
  #holdingsVersion = 0;

  /** Opens (creating folder and file, mode 0600, when missing) and migrates the database at `path`. */
  constructor(path: string) {
    const file = resolve(path);
    this.description = `sqlite ${file}`;
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    // Created before SQLite opens it so it never exists with a wider mode; -wal and -shm copy this mode.
    closeSync(openSync(file, 'a', 0o600));
    const db = new Database(file, { timeout: BUSY_TIMEOUT_MS });
    this.#db = db;
    try {
      switchToWal(db);
      db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
      // NORMAL in WAL loses recent commits only on an OS crash or power loss; a killed process loses nothing.
      db.pragma('synchronous = NORMAL');
      db.pragma(`wal_autocheckpoint = ${FALLBACK_AUTOCHECKPOINT_PAGES}`);
      migrateSqlite(db);
    } catch (error) {
      const failure = this.#unavailable(error);
      db.close();
      throw failure;
    }
    // Nested in the batch's transaction, a script is a savepoint: a failed guard or statement rolls back it alone.
    this.#runScript = db.transaction((script: Script): number[] =>
      script.steps.map((step) => {
        const changes = this.#run(step);
        if (!guardHolds(step, changes)) throw GUARD_FAILED;
        return changes;
      }),
    );
    this.#writeBatch = db.transaction((writes: readonly PendingWrite[]): WriteOutcome[] =>
      writes.map((write) => {
        try {
          return { ok: true, value: write.run() };
        } catch (error) {
          return { ok: false, error };
        }
      }),
    );
    this.#dataVersion = db.prepare('PRAGMA data_version').pluck();
    this.#checkpointer = startCheckpointer({ file, busyTimeoutMs: BUSY_TIMEOUT_MS, intervalMs: CHECKPOINT_INTERVAL_MS });
  }

  async read<R>(statement: Statement, values: readonly unknown[]): Promise<R[]> {
    try {
      return this.#statement(statement, values, (prepared, bound, columns) => rowsOf<R>(columns ?? [], prepared.all(...bound) as unknown[][]));
    } catch (error) {
      throw this.#unavailable(error);
    }
  }

  write<R>(statement: Statement, values: readonly unknown[]): Promise<Written<R>> {
    return this.#write(() =>
      this.#statement(statement, values, (prepared, bound, columns): Written<R> => {
        if (columns === undefined) return { changes: prepared.run(...bound).changes, rows: [] };
        const rows = rowsOf<R>(columns, prepared.all(...bound) as unknown[][]);
        return { changes: rows.length, rows };
      }),
      KEEPS_HOLDINGS.has(statement),
    );
  }

  script(script: Script): Promise<readonly number[] | undefined> {
    const [only, ...rest] = script.steps;
    const keepsHoldings = script.steps.every((step) => KEEPS_HOLDINGS.has(step.statement));
    // One statement is atomic by itself (as the PostgreSQL driver runs it too): no savepoint around it.
    if (only !== undefined && rest.length === 0) {
      return this.#write(() => {
        const changes = this.#run(only);
        return guardHolds(only, changes) ? [changes] : undefined;
      }, keepsHoldings);
    }
    // alone: every batch is an IMMEDIATE transaction, which no other writer (nor process) runs beside.
    return this.#write(() => {
      try {
        return this.#runScript(script);
      } catch (error) {
        if (error === GUARD_FAILED) return undefined;
        throw error;
      }
    }, keepsHoldings);
  }

  holdingsVersion(): number {
    let dataVersion: unknown;
    try {
      dataVersion = this.#dataVersion.get();
    } catch (error) {
      throw this.#unavailable(error);
    }
    if (dataVersion !== this.#seenDataVersion) {
      this.#seenDataVersion = dataVersion;
      this.#holdingsVersion += 1;
    }
    return this.#holdingsVersion;
  }

  async close(): Promise<void> {
    this.#commitPending();
    await this.#checkpointer.terminate();
    if (this.#db.open) this.#db.close();
  }

  /** Runs one step's statement; the rows it changed. */
  #run(step: Step): number {
    return this.#statement(step.statement, step.values, (prepared, bound) => prepared.run(...bound).changes);
  }

  /**
   * Runs `call` on the statement, prepared on first use, with `values` in the order its `?` take them, and a reader's
   * column names (it gives rows as arrays of values: rowsOf).
   */
  #statement<T>(
    statement: Statement,
    values: readonly unknown[],
    call: (prepared: Database.Statement, bound: readonly unknown[], columns: readonly string[] | undefined) => T,
  ): T {
    let prepared = this.#prepared.get(statement);
    if (prepared === undefined) {
      const { text, order } = sqliteStatement(statement.text);
      const compiled = this.#db.prepare(text);
      const columns = compiled.reader ? compiled.raw(true).columns().map((column) => column.name) : undefined;
      prepared = { statement: compiled, order, columns };
      this.#prepared.set(statement, prepared);
    }
    const { order, columns } = prepared;
    return call(prepared.statement, order === undefined ? values : order.map((index) => values[index]), columns);
  }

  /** An outage-like failure (busy, I/O, closed database) as StoreUnavailableError; anything else as it is. */
  #unavailable(error: unknown): unknown {
    if (UNAVAILABLE_CODES.has(primaryCode(error) ?? '') || !this.#db.open) return new StoreUnavailableError(error);
    return error;
  }

  /**
   * Group commit: a write waits for the end of the event-loop turn and commits in one transaction with
   * every write queued in that turn; one failing write leaves the others whole (each is a statement, atomic by
   * itself, or a script's savepoint). It resolves only once committed (DESIGN.md §6: no answer before its state
   * change is), and a commit writes the WAL pages its writes share once, so under load a write costs far less.
   */
  #write<T>(run: () => T, keepsHoldings: boolean): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (this.#pending.push({ run, keepsHoldings, resolve, reject }) === 1) setImmediate(this.#commitPending);
    });
  }

  readonly #commitPending = (): void => {
    const writes = this.#pending;
    if (writes.length === 0) return;
    this.#pending = [];
    let outcomes: WriteOutcome[];
    try {
      outcomes = this.#writeBatch.immediate(writes);
    } catch (error) {
      // BEGIN or COMMIT failed: none of the writes happened.
      const failure = this.#unavailable(error);
      for (const write of writes) write.reject(failure);
      return;
    }
    // Before any write is answered, so no one told "revoked" can still find the holding remembered.
    if (!writes.every((write) => write.keepsHoldings)) this.#holdingsVersion += 1;
    outcomes.forEach((outcome, i) => {
      const write = writes[i] as PendingWrite;
      if (outcome.ok) write.resolve(outcome.value as never);
      else write.reject(this.#unavailable(outcome.error));
    });
  };
}

/** State in one SQLite file (better-sqlite3, WAL): the embedded default of DESIGN.md §6. */
export class SqliteStore extends SqlStore {
  /** Opens (creating folder and file, mode 0600, when missing) and migrates the database at `path`. */
  constructor(path: string) {
    super(new SqliteDriver(path));
  }
}

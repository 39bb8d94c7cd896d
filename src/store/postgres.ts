import pg from 'pg';
import type { ClientConfig, PoolClient, QueryResult, QueryResultRow } from 'pg';
import type { StateConfig } from '../config/types.js';
import { POSTGRES_TRANSACTION_LOCK } from './dialect.js';
import { guardHolds, type Driver, type Script, type Step, type Written } from './driver.js';
import { migratePostgres, quoteIdentifier } from './migrations.js';
import type { Statement } from './sql.js';
import { SqlStore } from './sql-store.js';
import { StoreUnavailableError } from './unavailable.js';

export type PostgresStateConfig = Extract<StateConfig, { kind: 'postgres' }>;

export interface StoreLog {
  warn(msg: string): void;
}

/** How long to wait for a connection before the store counts as unavailable (DESIGN.md §7: 503, not a hang). */
const CONNECT_TIMEOUT_MS = 2000;
/** A query that gets no answer this long means the server is gone (a dropped network sends no reset). */
const QUERY_TIMEOUT_MS = 15_000;
/** Serialises the scripts that must run alone (the first key creation of instances starting at once). */
const ALONE_LOCK = 7_041_984_431_002;
/** Runs of one piece of work: a deadlock, or a connection found broken before anything was committed, runs it again. */
const MAX_ATTEMPTS = 3;

/** SQLSTATE classes of a server that cannot serve: 08 connection exception, 53 insufficient resources, 57P shutdown, 58 system error. */
const UNAVAILABLE_SQLSTATES = ['08', '53', '57P', '58'];

/**
 * True for failures of the connection or the server, not of the statement. The server's answers are DatabaseErrors,
 * judged by SQLSTATE class; anything else pg raises while running a query comes from its connection layer: plain
 * Errors (connection terminated, read timeout, client not queryable) and Node's network errors (errno).
 */
function isConnectionError(error: unknown): boolean {
  if (error instanceof pg.DatabaseError) return UNAVAILABLE_SQLSTATES.some((sqlstate) => error.code?.startsWith(sqlstate) === true);
  return error instanceof Error && (Object.getPrototypeOf(error) === Error.prototype || 'errno' in error);
}

/** Deadlock or serialization failure: the server rolled the transaction back, so it can simply run again. */
const isRetryable = (error: unknown): boolean =>
  error instanceof pg.DatabaseError && (error.code === '40P01' || error.code === '40001');

/** "postgres host:port/db (schema s)": what the startup log and `pinpoint check` show; never the password. */
export function describePostgres(url: string, schema: string): string {
  try {
    const parsed = new URL(url);
    const host = parsed.searchParams.get('host') ?? (parsed.hostname || process.env['PGHOST'] || 'localhost');
    const port = parsed.searchParams.get('port') ?? (parsed.port || process.env['PGPORT'] || '5432');
    const database = decodeURIComponent(parsed.pathname.replace(/^\//, '')) || process.env['PGDATABASE'] || decodeURIComponent(parsed.username);
    return `postgres ${host}:${port}/${database} (schema ${schema})`;
  } catch {
    return `postgres (schema ${schema})`;
  }
}

/**
 * The connection string and startup `options` that give every connection `schema` as its search_path, so statements
 * name tables unqualified. pg lets the URL's own `options` replace the `options` setting, so those move over.
 */
function withSearchPath(url: string, schema: string): { connectionString: string; options: string } {
  // The server splits options at white space; a backslash keeps the next character.
  const searchPath = `--search_path=${quoteIdentifier(schema)}`.replace(/[\\\s]/g, '\\$&');
  let parsed: URL | undefined;
  try {
    parsed = new URL(url);
  } catch {
    parsed = undefined;
  }
  const own = parsed?.searchParams.get('options') ?? null;
  if (parsed === undefined || own === null) {
    const fromEnvironment = process.env['PGOPTIONS'];
    return { connectionString: url, options: fromEnvironment ? `${fromEnvironment} ${searchPath}` : searchPath };
  }
  parsed.searchParams.delete('options');
  return { connectionString: parsed.toString(), options: `${own} ${searchPath}` };
}

/**
 * pg lets a connection string's (empty) password override the `password` option, so a password
 * read from password_file is set on each client after its parameters are parsed.
 */
function clientWithPassword(password: string): typeof pg.Client {
  return class PasswordClient extends pg.Client {
    constructor(config?: string | ClientConfig) {
      super(config);
      Object.defineProperty(this, 'password', { value: password, writable: true, enumerable: false, configurable: true });
    }
  };
}

const query = <R extends QueryResultRow>(client: PoolClient, { name, text }: Statement, values: readonly unknown[]): Promise<QueryResult<R>> =>
  client.query<R>({ name, text, values: values as unknown[] });

/**
 * A pg pool on one database and schema. A script is a BEGIN/COMMIT on one pooled connection, its guards relying on
 * row locks: a concurrent script on the same row waits, then finds the row changed and its guard fails.
 */
class PostgresDriver implements Driver {
  readonly description: string;
  readonly #schema: string;
  readonly #pool: pg.Pool;

  constructor(state: PostgresStateConfig, log?: StoreLog) {
    this.#schema = state.schema;
    this.description = describePostgres(state.url, state.schema);
    this.#pool = new pg.Pool({
      ...withSearchPath(state.url, state.schema),
      connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
      query_timeout: QUERY_TIMEOUT_MS,
      idleTimeoutMillis: 30_000,
      keepAlive: true,
      application_name: 'pinpoint',
      ...(state.password === undefined ? {} : { Client: clientWithPassword(state.password) }),
    });
    // An idle connection that breaks is dropped by the pool; report it instead of crashing.
    this.#pool.on('error', (error) => log?.warn(`postgres connection lost: ${error.message}`));
    // A checked-out connection that breaks also rejects its query; this listener keeps the error from being unhandled.
    this.#pool.on('connect', (client) => client.on('error', () => undefined));
  }

  /** Applies missing migrations; returns the versions this call applied. */
  migrate(): Promise<number[]> {
    return this.#withClient((client) => migratePostgres(client, this.#schema), () => true);
  }

  /** The newest schema version applied to the database, reading only; 0 before the first start. */
  newestAppliedVersion(): Promise<number> {
    return this.#withClient(async (client) => {
      const present = await client.query<{ present: boolean }>("SELECT to_regclass('schema_migrations') IS NOT NULL AS present");
      if (present.rows[0]?.present !== true) return 0;
      const newest = await client.query<{ newest: number | null }>('SELECT max(version) AS newest FROM schema_migrations');
      return Number(newest.rows[0]?.newest ?? 0);
    }, () => true);
  }

  async read<R>(statement: Statement, values: readonly unknown[]): Promise<R[]> {
    // A read changes nothing, so a connection found broken simply runs it again on another.
    const result = await this.#withClient((client) => query<R & QueryResultRow>(client, statement, values), () => true);
    return result.rows;
  }

  async write<R>(statement: Statement, values: readonly unknown[]): Promise<Written<R>> {
    // Once sent, a write may have committed: a lost connection is reported, never run again.
    const result = await this.#withClient((client) => query<R & QueryResultRow>(client, statement, values), () => false);
    return { changes: result.rowCount ?? 0, rows: result.rows };
  }

  async script({ steps, alone = false, atOnce }: Script): Promise<readonly number[] | undefined> {
    // One statement is a transaction by itself: one round trip instead of BEGIN, each step and COMMIT.
    const only = atOnce ?? (steps.length === 1 ? steps[0] : undefined);
    if (only !== undefined && !alone) {
      const { changes } = await this.write(only.statement, only.values);
      return guardHolds(only, changes) ? [changes] : undefined;
    }
    let commitSent = false;
    return this.#withClient(
      async (client) => {
        commitSent = false;
        await client.query('BEGIN');
        try {
          if (alone) await client.query(POSTGRES_TRANSACTION_LOCK, [ALONE_LOCK]);
          const changed: number[] = [];
          for (const step of steps) {
            const changes = (await query(client, step.statement, step.values)).rowCount ?? 0;
            if (!guardHolds(step, changes)) {
              await client.query('ROLLBACK');
              return undefined;
            }
            changed.push(changes);
          }
          commitSent = true;
          await client.query('COMMIT');
          return changed;
        } catch (error) {
          if (!commitSent) await client.query('ROLLBACK').catch(() => undefined);
          throw error;
        }
      },
      // Until COMMIT is sent, a lost connection has committed nothing.
      () => !commitSent,
    );
  }

  async close(): Promise<void> {
    if (!this.#pool.ending) await this.#pool.end();
  }

  /**
   * Runs `work` on a pooled connection. Connection failures become StoreUnavailableError, after one more run when
   * `rerunnable()` says nothing was committed; deadlocks run again.
   */
  async #withClient<T>(work: (client: PoolClient) => Promise<T>, rerunnable: () => boolean): Promise<T> {
    for (let attempt = 1; ; attempt += 1) {
      let client: PoolClient;
      try {
        client = await this.#pool.connect();
      } catch (error) {
        throw new StoreUnavailableError(error);
      }
      try {
        const result = await work(client);
        client.release();
        return result;
      } catch (error) {
        const lost = isConnectionError(error);
        // A broken connection is destroyed rather than returned to the pool.
        client.release(lost ? (error as Error) : undefined);
        if (attempt < MAX_ATTEMPTS && (isRetryable(error) || (lost && attempt === 1 && rerunnable()))) continue;
        throw lost ? new StoreUnavailableError(error) : error;
      }
    }
  }
}

/** State in PostgreSQL, shared by every Pinpoint instance pointed at the same database and schema (DESIGN.md §6). */
export class PostgresStore extends SqlStore {
  readonly schema: string;
  readonly #driver: PostgresDriver;

  /** Creates the pool without connecting; `open` also migrates. */
  constructor(state: PostgresStateConfig, log?: StoreLog) {
    const driver = new PostgresDriver(state, log);
    super(driver);
    this.#driver = driver;
    this.schema = state.schema;
  }

  /** Connects, creates the schema and tables when missing, and returns the store. */
  static async open(state: PostgresStateConfig, log?: StoreLog): Promise<PostgresStore> {
    const store = new PostgresStore(state, log);
    try {
      await store.migrate();
    } catch (error) {
      await store.close();
      throw error;
    }
    return store;
  }

  /** Applies missing migrations; returns the versions this call applied. */
  migrate(): Promise<number[]> {
    return this.#driver.migrate();
  }

  /** The newest schema version applied to the database, reading only (check --probe). */
  newestAppliedVersion(): Promise<number> {
    return this.#driver.newestAppliedVersion();
  }
}

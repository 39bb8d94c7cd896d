/**
 * The benchmark's own PostgreSQL database: made for one run on the server PINPOINT_TEST_POSTGRES_URL names
 * (default: the local test server), dropped at the end, and told apart from the ones other runs use by the pid.
 */
import pg from 'pg';

const DEFAULT_URL = 'postgres://postgres@127.0.0.1:5432/test';
const PREFIX = 'pinpoint_bench_';

const adminUrl = (): string => process.env.PINPOINT_TEST_POSTGRES_URL ?? DEFAULT_URL;

/** Where the benchmark looks for PostgreSQL, without user or password: `host:port/database (from ...)`. */
export function serverAddress(): string {
  const from = process.env.PINPOINT_TEST_POSTGRES_URL === undefined ? 'the default' : 'PINPOINT_TEST_POSTGRES_URL';
  try {
    const url = new URL(adminUrl());
    return `${url.host}${url.pathname} (${from})`;
  } catch {
    return `an unreadable URL (${from})`;
  }
}

export interface BenchDatabase {
  readonly name: string;
  /** The database's URL, for Pinpoint's `state { url = ... }`. */
  readonly url: string;
  /** Server pids working for this database: its connections' backends and the server's own background processes. */
  processes(): Promise<number[]>;
  /** Drops the database, closing whatever is still connected to it. */
  drop(): Promise<void>;
}

async function withAdmin<T>(url: string, work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: the process exists, run by someone else.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
};

/**
 * Creates `pinpoint_bench_<pid>`, after dropping those a killed run of this machine left behind (their pid is gone);
 * rejects with the reason when the server cannot be reached.
 */
export async function createBenchDatabase(): Promise<BenchDatabase> {
  const admin = adminUrl();
  const name = `${PREFIX}${process.pid}`;
  await withAdmin(admin, async (client) => {
    const stale = await client.query<{ datname: string }>('SELECT datname FROM pg_database WHERE datname LIKE $1', [`${PREFIX}%`]);
    for (const { datname } of stale.rows) {
      const pid = Number(datname.slice(PREFIX.length));
      if (datname !== name && (!Number.isInteger(pid) || alive(pid))) continue;
      // Without FORCE: a database someone is still connected to is not ours to drop.
      await client.query(`DROP DATABASE IF EXISTS "${datname}"`).catch(() => undefined);
    }
    await client.query(`CREATE DATABASE "${name}"`);
  });
  const url = new URL(admin);
  url.pathname = `/${name}`;
  // Kept open while measuring, on the admin database, so its own backend is not counted.
  let watcher: pg.Client | undefined;
  return {
    name,
    url: url.href,
    async processes() {
      if (watcher === undefined) {
        watcher = new pg.Client({ connectionString: admin, connectionTimeoutMillis: 3000 });
        await watcher.connect();
      }
      const rows = await watcher.query<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE datname = $1 OR backend_type <> 'client backend'", [name]);
      return rows.rows.map((row) => row.pid);
    },
    async drop() {
      await watcher?.end();
      await withAdmin(admin, async (client) => void (await client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`)));
    },
  };
}

/** The PostgreSQL server's version line and the settings that bound a write-heavy case, for the results. */
export async function describeServer(url: string): Promise<string> {
  return withAdmin(url, async (client) => {
    const version = (await client.query<{ server_version: string }>('SHOW server_version')).rows[0]?.server_version.split(' ')[0] ?? '?';
    const settings: string[] = [];
    for (const name of ['synchronous_commit', 'fsync', 'shared_buffers']) {
      const value = (await client.query<{ value: string }>('SELECT current_setting($1) AS value', [name])).rows[0]?.value ?? '?';
      settings.push(`${name} ${value}`);
    }
    return `PostgreSQL ${version} (${settings.join(', ')})`;
  });
}

/** What the SQL store (sql-store.ts) needs of a database: sqlite.ts and postgres.ts each implement it. */
import type { Statement } from './sql.js';

/** One statement of a script with its parameters; a guard must change exactly one row. */
export interface Step {
  readonly statement: Statement;
  readonly values: readonly unknown[];
  readonly guard?: boolean;
}

/** Whether a step that changed `changes` rows lets its script go on: a guard must change exactly one. */
export const guardHolds = (step: Step, changes: number): boolean => step.guard !== true || changes === 1;

/**
 * A state change of several statements, run in order in one transaction. When a guard step changes no row (or
 * more than one), nothing of the script is kept and it answers undefined: this is how "only if still active" is
 * written, e.g. rotate = [mark the old token rotated (guard), add the new one, extend the grant].
 */
export interface Script {
  readonly steps: readonly Step[];
  /** Runs as if no other script of this kind were running, also in other processes (key creation). */
  readonly alone?: boolean;
  /**
   * The same change as one statement (sql.ts atOnce, guarded: one row answered when it held), for a driver that pays
   * a round trip per statement (PostgreSQL); the script then answers that one count. SQLite runs the steps.
   */
  readonly atOnce?: Step;
}

export interface Written<R> {
  /** Rows the statement changed. */
  readonly changes: number;
  /** What RETURNING gave. */
  readonly rows: R[];
}

/** Every method may reject with StoreUnavailableError when the database cannot serve. */
export interface Driver {
  readonly description: string;
  /** Runs a SELECT; never waits for writes. */
  read<R>(statement: Statement, values: readonly unknown[]): Promise<R[]>;
  /** Runs one writing statement on its own (atomic by itself); resolves once committed. */
  write<R = never>(statement: Statement, values: readonly unknown[]): Promise<Written<R>>;
  /** Runs a script in one transaction; once every guard held and it committed, the rows each step changed. */
  script(script: Script): Promise<readonly number[] | undefined>;
  /**
   * A number that changes whenever a commit may have ended a grant's standing (anything but sql.ts KEEPS_HOLDINGS),
   * made in this process or in another; absent where other processes' commits go unseen (PostgreSQL), so that
   * nothing read may be remembered.
   */
  holdingsVersion?(): number;
  close(): Promise<void>;
}

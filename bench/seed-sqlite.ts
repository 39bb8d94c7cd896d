/**
 * Bulk seeding for the scale cases: `grants` live grants, each with an active refresh token, written
 * straight into a Pinpoint SQLite file in large transactions (rows as the store writes them: the store's own
 * statements and parameters, SHA-256 digests from crypto/). When the driver needs more fresh tokens than there
 * are grants, the grants get several active tokens each. Writes `tokens` token values, spread evenly over
 * the table and shuffled (clients refresh in no particular order), one per line, to `out`.
 * Usage: node --import tsx bench/seed-sqlite.ts DB_PATH GRANTS TOKENS OUT
 */
import { randomUUID } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import Database from 'better-sqlite3';
import { sqliteStatement } from '../src/store/dialect.js';
import { grantParams, refreshTokenInsertParams } from '../src/store/rows.js';
import { GRANT_EXPIRY_SLACK_MS } from '../src/store/rules.js';
import { SQL, type Statement } from '../src/store/sql.js';
import { SqliteStore } from '../src/store/sqlite.js';
import type { Grant } from '../src/store/types.js';
import { newRefreshToken } from '../src/crypto/refresh-token.js';
import { AUDIENCE, CLIENT_ID, REFRESH_LIFETIME_MS, SCOPE, shuffled, subjectOf } from './common.js';

const BATCH = 50_000;

const [path, grantsText, tokensText, out] = process.argv.slice(2);
if (path === undefined || grantsText === undefined || tokensText === undefined || out === undefined) {
  throw new Error('usage: seed-sqlite.ts DB_PATH GRANTS TOKENS OUT');
}
const grants = Number(grantsText);
const wanted = Number(tokensText);
const tokensPerGrant = Math.max(1, Math.ceil(wanted / grants));
// Every `stride`-th token is handed to the driver, so the ones it uses are spread over the whole table.
const stride = Math.max(1, Math.floor((grants * tokensPerGrant) / wanted));

const started = performance.now();
// The store creates the file and its tables (migrations), exactly as on a first start.
await new SqliteStore(path).close();
const db = new Database(path);
db.pragma('journal_mode = WAL');
/** The store's statement, whose parameters come in order. */
const prepare = (statement: Statement): Database.Statement => {
  const { text, order } = sqliteStatement(statement.text);
  if (order !== undefined) throw new Error(`${statement.name}: parameters out of order`);
  return db.prepare(text);
};
const insertGrant = prepare(SQL.insertGrant);
const insertToken = prepare(SQL.insertRefreshToken);

const handedOut: string[] = [];
let written = 0;
let tokenIndex = 0;
const insertBatch = db.transaction((from: number, to: number, now: number): void => {
  for (let i = from; i < to; i += 1) {
    const grant: Grant = {
      id: randomUUID(),
      clientId: CLIENT_ID,
      subject: subjectOf(i),
      scope: [SCOPE],
      resources: [...AUDIENCE],
      claims: {},
      authTime: now,
      createdAt: now,
      // As adding a refresh token leaves it (rules.ts grantExtension): past its tokens by the slack.
      expiresAt: now + REFRESH_LIFETIME_MS + GRANT_EXPIRY_SLACK_MS,
    };
    insertGrant.run(...grantParams(grant));
    for (let t = 0; t < tokensPerGrant; t += 1) {
      const token = newRefreshToken(grant.id, now, REFRESH_LIFETIME_MS);
      insertToken.run(...refreshTokenInsertParams(token.record));
      if (tokenIndex % stride === 0 && written < wanted) {
        handedOut.push(token.value);
        written += 1;
      }
      tokenIndex += 1;
    }
  }
});

for (let from = 0; from < grants; from += BATCH) insertBatch(from, Math.min(grants, from + BATCH), Date.now());
await writeFile(out, `${shuffled(handedOut).join('\n')}\n`);
db.pragma('wal_checkpoint(TRUNCATE)');
db.close();
process.stdout.write(
  `${JSON.stringify({ grants, refreshTokens: grants * tokensPerGrant, handedOut: written, seconds: (performance.now() - started) / 1000 })}\n`,
);

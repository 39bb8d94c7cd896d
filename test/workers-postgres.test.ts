/**
 * DESIGN.md §11 "Every core": the tests of workers.test.ts, with the server's state in PostgreSQL (serve --workers 2).
 */
import { after, describe } from 'node:test';
import { createTestDatabase, type TestDatabase } from './helpers/process.js';
import { POSTGRES_URL } from './helpers/cluster.js';
import { workersSuite } from './helpers/workers-suite.js';

describe('serve with 2 workers on PostgreSQL (serve --workers 2)', { skip: POSTGRES_URL === undefined ? 'PINPOINT_TEST_POSTGRES_URL is unset: no PostgreSQL to test against' : false }, () => {
  let database: TestDatabase | undefined;
  after(async () => database?.drop());
  workersSuite(async () => {
    database = await createTestDatabase(POSTGRES_URL as string, 'pinpoint_workers');
    return { url: database.url };
  }, 'flag');
});

/**
 * DESIGN.md §5 "persistence" and §6: state survives a restart of `pinpoint serve` on the same SQLite
 * file, a restart never widens a grant, keys are kept, and after SIGKILL every rotation answered 200 is there.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { createLocalJWKSet, jwtVerify, type JSONWebKeySet } from 'jose';
import { digestOf } from '../src/crypto/digest.js';
import { claimsOf } from './helpers/app.js';
import {
  API,
  FILES,
  createDeployment,
  killAll,
  refreshAt,
  removeDeployment,
  signInForTokens,
  startPinpoint,
  type Deployment,
} from './helpers/process.js';

const deployments: Deployment[] = [];

after(async () => {
  await killAll();
  for (const deployment of deployments) await removeDeployment(deployment);
});

async function sqliteDeployment(): Promise<Deployment> {
  const deployment = await createDeployment({ state: { path: 'state/pinpoint.db' } });
  deployments.push(deployment);
  return deployment;
}

test('after SIGTERM and a restart on the same file: the refresh token works, the grant stays bound to its one resource, old tokens verify', async () => {
  const deployment = await sqliteDeployment();
  const first = await startPinpoint(deployment);
  const tokens = await signInForTokens(first.baseUrl, { resources: [API] });
  assert.equal(claimsOf(tokens.access_token)['aud'], API);
  const exit = await first.stop('SIGTERM');
  assert.deepEqual(exit, { code: 0, signal: null }, first.output);
  assert.ok(first.logs.some((record) => record['msg'] === 'stopped'), 'a graceful stop');

  const second = await startPinpoint(deployment);
  const refreshed = await refreshAt(second.baseUrl, tokens.refresh_token);
  assert.equal(refreshed.status, 200, refreshed.text);
  const claims = claimsOf(refreshed.body['access_token'] as string);
  assert.equal(claims['aud'], API, 'aud is the one resource of the authorization, not the whole audience');
  assert.equal(claims['iss'], deployment.baseUrl);

  // The grant was bound to API at /authorize: naming another audience entry is refused and leaves the token usable.
  const next = refreshed.body['refresh_token'] as string;
  const widened = await refreshAt(second.baseUrl, next, [FILES]);
  assert.equal(widened.status, 400, widened.text);
  assert.deepEqual(widened.body, { error: 'invalid_target', error_description: `resource "${FILES}" was not part of the authorization` });
  const named = await refreshAt(second.baseUrl, next, [API]);
  assert.equal(named.status, 200, named.text);
  assert.equal(claimsOf(named.body['access_token'] as string)['aud'], API);

  // The signing keys were persisted: a token minted by the first process verifies against the new /jwks.
  const jwks = (await (await fetch(`${second.baseUrl}/jwks`)).json()) as JSONWebKeySet;
  const verified = await jwtVerify(tokens.access_token, createLocalJWKSet(jwks), { issuer: deployment.baseUrl, typ: 'at+jwt', audience: API });
  assert.equal(verified.payload['client_id'], 'webapp');
  await jwtVerify(refreshed.body['access_token'] as string, createLocalJWKSet(jwks), { issuer: deployment.baseUrl, typ: 'at+jwt' });
  await second.stop('SIGTERM');
});

const CHAINS = 8;
/** Bounds of the load: it is killed once this many rotations were answered, or after this long. */
const KILL_AFTER_ACKS = 80;
const KILL_AFTER_MS = 8000;
const MAX_REFRESHES_PER_CHAIN = 400;

interface Chain {
  /** Every refresh token answered with 200 (the first from the code exchange), in order. */
  readonly acknowledged: string[];
  /** A refresh of the last acknowledged token was sent and never answered (the kill cut it). */
  inFlight: boolean;
}

test('SIGKILL during a load of refresh chains loses no rotation that was answered 200', async (t) => {
  const deployment = await sqliteDeployment();
  const first = await startPinpoint(deployment);
  const chains: Chain[] = [];
  for (let i = 0; i < CHAINS; i += 1) {
    const tokens = await signInForTokens(first.baseUrl, { resources: [i % 2 === 0 ? API : FILES] });
    chains.push({ acknowledged: [tokens.refresh_token], inFlight: false });
  }

  let acks = 0;
  let killed = false;
  const runChain = async (chain: Chain): Promise<void> => {
    // Each chain refreshes serially, as a client must (DESIGN.md §6); it stops at the first request the kill cuts.
    for (let n = 0; n < MAX_REFRESHES_PER_CHAIN && !killed; n += 1) {
      chain.inFlight = true;
      let answer;
      try {
        answer = await refreshAt(first.baseUrl, chain.acknowledged.at(-1) as string, [], 5000);
      } catch {
        return;
      }
      chain.inFlight = false;
      // An answer is acknowledged only if it arrived complete; after the kill nothing more can arrive.
      assert.equal(answer.status, 200, answer.text);
      chain.acknowledged.push(answer.body['refresh_token'] as string);
      acks += 1;
    }
  };
  const load = Promise.all(chains.map(runChain));
  const deadline = Date.now() + KILL_AFTER_MS;
  while (acks < KILL_AFTER_ACKS && Date.now() < deadline) await sleep(5);
  const exit = await first.stop('SIGKILL');
  killed = true;
  assert.equal(exit.signal, 'SIGKILL');
  await load;
  assert.ok(acks >= CHAINS, `the load was running when killed (${acks} rotations answered)`);

  const second = await startPinpoint(deployment);
  const db = new Database(join(deployment.folder, 'state', 'pinpoint.db'), { readonly: true, fileMustExist: true });
  const statusOf = db.prepare<[string], { status: string; grant_id: string }>('SELECT status, grant_id FROM refresh_tokens WHERE digest = ?');
  const activeIn = db.prepare<[string], { n: number }>("SELECT count(*) AS n FROM refresh_tokens WHERE grant_id = ? AND status = 'active'");
  let stillWorking = 0;
  try {
    for (const [index, chain] of chains.entries()) {
      const last = chain.acknowledged.at(-1) as string;
      // Every acknowledged rotation is stored: each earlier token is rotated, the last one is there.
      for (const earlier of chain.acknowledged.slice(0, -1)) assert.equal(statusOf.get(digestOf(earlier))?.status, 'rotated', `chain ${index}`);
      const row = statusOf.get(digestOf(last));
      assert.ok(row !== undefined, `chain ${index}: the last acknowledged refresh token was lost`);
      assert.equal(activeIn.get(row.grant_id)?.n, 1, `chain ${index}: one active refresh token in its grant`);
      if (row.status === 'rotated') {
        // The kill cut the answer of a rotation that had committed: the client never saw its successor.
        assert.ok(chain.inFlight, `chain ${index}: its last acknowledged token was rotated by a request nobody answered`);
        continue;
      }
      assert.equal(row.status, 'active');
      const answer = await refreshAt(second.baseUrl, last);
      assert.equal(answer.status, 200, `chain ${index} after ${chain.acknowledged.length - 1} rotations: ${answer.text}`);
      assert.equal(claimsOf(answer.body['access_token'] as string)['aud'], index % 2 === 0 ? API : FILES);
      stillWorking += 1;
    }
  } finally {
    db.close();
  }
  t.diagnostic(`${acks} rotations answered before SIGKILL; ${stillWorking} of ${CHAINS} last acknowledged tokens still work, the others were rotated by an unanswered request`);
  assert.ok(stillWorking >= 1, 'at least one chain was between requests when killed');
  await second.stop('SIGTERM');
});

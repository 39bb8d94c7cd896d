/**
 * The SQLite store remembers what findGrantHolding read (store/remembered-holdings.ts) and must never answer from it
 * once a grant or token is revoked: by its own connection, by another one on the same file (another worker or
 * `pinpoint grants revoke`), or by time. Real SQLite files; two stores on one file are two processes' connections.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { digestOf } from '../src/crypto/digest.js';
import { newRefreshToken } from '../src/crypto/refresh-token.js';
import { REMEMBERED_HOLDINGS_LIMIT, RememberedHoldings } from '../src/store/remembered-holdings.js';
import { KEEPS_HOLDINGS } from '../src/store/sql.js';
import { SqliteStore } from '../src/store/sqlite.js';
import type { Grant, GrantHolding } from '../src/store/types.js';

const MINUTE = 60_000;
const HOLDING: GrantHolding = { clientId: 'webapp', subject: 'alice', tokenRevoked: false };

describe('RememberedHoldings', () => {
  it('answers only at the version it was read at, and only while the grant lives', () => {
    const holdings = new RememberedHoldings();
    holdings.keep('g1', 7, HOLDING, 1000);
    assert.deepEqual(holdings.find('g1', 7, 999), HOLDING);
    assert.equal(holdings.find('g1', 8, 999), undefined, 'another version');
    assert.equal(holdings.find('g1', 7, 1000), undefined, 'the grant has expired');
    assert.equal(holdings.find('g2', 7, 0), undefined, 'never read');
  });

  it('forgets every entry of an older version when one of a newer version is kept', () => {
    const holdings = new RememberedHoldings();
    holdings.keep('g1', 1, HOLDING, 1000);
    holdings.keep('g2', 2, HOLDING, 1000);
    assert.equal(holdings.size, 1);
    assert.equal(holdings.find('g1', 2, 0), undefined);
    assert.deepEqual(holdings.find('g2', 2, 0), HOLDING);
  });

  it(`keeps at most ${REMEMBERED_HOLDINGS_LIMIT} entries, the oldest going first`, () => {
    const holdings = new RememberedHoldings();
    for (let i = 0; i <= REMEMBERED_HOLDINGS_LIMIT; i += 1) holdings.keep(`g${i}`, 1, HOLDING, 1000);
    assert.equal(holdings.size, REMEMBERED_HOLDINGS_LIMIT);
    assert.equal(holdings.find('g0', 1, 0), undefined, 'the oldest went');
    assert.deepEqual(holdings.find(`g${REMEMBERED_HOLDINGS_LIMIT}`, 1, 0), HOLDING);
    holdings.keep('g1', 1, HOLDING, 1000);
    assert.equal(holdings.size, REMEMBERED_HOLDINGS_LIMIT, 'keeping a known key again adds nothing');
  });
});

describe('KEEPS_HOLDINGS', () => {
  it('holds no statement that deletes or shortens a grant, or touches a token revocation', () => {
    for (const statement of KEEPS_HOLDINGS) {
      const text = statement.text.replace(/\s+/g, ' ');
      assert.doesNotMatch(text, /revoked_access_tokens/, statement.name);
      assert.doesNotMatch(text, /DELETE FROM grants\b/, statement.name);
      if (/^UPDATE grants\b/.test(text)) {
        // Only extensions: rules.ts grantExtension, which never shortens (`expires_at < before`).
        assert.match(text, /^UPDATE grants SET expires_at = .*expires_at < \$\d/, statement.name);
      }
    }
  });
});

describe('SQLite store: a remembered holding never outlives a revocation', () => {
  let dir: string;
  let stores: SqliteStore[] = [];
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'pinpoint-holdings-'));
  });
  after(async () => {
    for (const store of stores) await store.close();
    stores = [];
    await rm(dir, { recursive: true, force: true });
  });

  let files = 0;
  /** Two stores on one new file: `here` answers, `elsewhere` is another process's connection. */
  async function twoConnections(): Promise<{ here: SqliteStore; elsewhere: SqliteStore; grant: Grant; now: number }> {
    const file = join(dir, `state-${(files += 1)}.db`);
    const here = new SqliteStore(file);
    const elsewhere = new SqliteStore(file);
    stores.push(here, elsewhere);
    const now = Date.now();
    const grant: Grant = {
      id: `grant-${files}`,
      clientId: 'webapp',
      subject: 'alice',
      scope: ['openid'],
      resources: ['https://api.example.org/'],
      claims: {},
      authTime: now,
      createdAt: now,
      expiresAt: now + 10 * MINUTE,
    };
    const code = { digest: digestOf(`code-${files}`), grantId: grant.id, clientId: 'webapp', redirectUri: 'https://app.example.org/cb', codeChallenge: 'x'.repeat(43), expiresAt: now + MINUTE };
    await here.createGrantWithCode(grant, code);
    return { here, elsewhere, grant, now };
  }

  it('sees a grant revoked through another connection at once', async () => {
    const { here, elsewhere, grant, now } = await twoConnections();
    assert.deepEqual(await here.findGrantHolding(grant.id, undefined, now), HOLDING);
    assert.deepEqual(await here.findGrantHolding(grant.id, undefined, now), HOLDING, 'asked again');
    await elsewhere.revokeGrant(grant.id);
    assert.equal(await here.findGrantHolding(grant.id, undefined, now), undefined);
  });

  it("sees an exchanged token's jti revoked through another connection at once", async () => {
    const { here, elsewhere, grant, now } = await twoConnections();
    assert.deepEqual(await here.findGrantHolding(grant.id, 'jti-1', now), HOLDING);
    await elsewhere.revokeAccessToken('jti-1', now + MINUTE);
    assert.deepEqual(await here.findGrantHolding(grant.id, 'jti-1', now), { ...HOLDING, tokenRevoked: true });
    assert.deepEqual(await here.findGrantHolding(grant.id, 'jti-2', now), HOLDING, 'another token of the grant still stands');
  });

  it('answers a revocation of its own connection once committed, also to a read made while it was queued', async () => {
    const { here, grant, now } = await twoConnections();
    const revoking = here.revokeGrant(grant.id);
    // Queued, not yet committed (the store commits at the end of the event-loop turn): the grant still stands.
    assert.deepEqual(await here.findGrantHolding(grant.id, undefined, now), HOLDING);
    await revoking;
    assert.equal(await here.findGrantHolding(grant.id, undefined, now), undefined);
  });

  it('answers bulk revocation by subject, and a grant that expires without any commit', async () => {
    const { here, grant, now } = await twoConnections();
    assert.deepEqual(await here.findGrantHolding(grant.id, undefined, now), HOLDING);
    assert.equal(await here.findGrantHolding(grant.id, undefined, grant.expiresAt), undefined, 'expired');
    await here.revokeGrants({ subject: 'alice' });
    assert.equal(await here.findGrantHolding(grant.id, undefined, now), undefined, 'revoked by subject');
  });

  it('still answers from the database after writes that keep holdings (a rotation) and after those that do not', async () => {
    const { here, elsewhere, grant, now } = await twoConnections();
    const first = newRefreshToken(grant.id, now, MINUTE);
    assert.equal(await here.addRefreshToken(first.record, now), true);
    assert.deepEqual(await here.findGrantHolding(grant.id, undefined, now), HOLDING);
    const next = newRefreshToken(grant.id, now, MINUTE);
    assert.equal(await here.rotateRefreshToken(first.record.digest, next.record, now), true);
    assert.deepEqual(await here.findGrantHolding(grant.id, undefined, now), HOLDING, 'a rotation changes no holding');
    await elsewhere.revokeGrants({ clientId: 'webapp' });
    assert.equal(await here.findGrantHolding(grant.id, undefined, now), undefined, 'revoked by client elsewhere');
  });
});

/**
 * The lookup behind fetches of strangers' URLs (clients/safe-fetch.ts resolverLookup), against DNS servers of our own
 * on loopback UDP: one that answers, and one that never does. A cost audit found that node:dns's lookup (getaddrinfo
 * on libuv's thread pool) let 20 names whose DNS never answers stall every lookup in the process for some 100 s.
 */
import assert from 'node:assert/strict';
import { pbkdf2 } from 'node:crypto';
import { createSocket, type Socket } from 'node:dgram';
import type { LookupAddress } from 'node:dns';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { resolverLookup } from '../src/clients/safe-fetch.js';

/** A DNS server that answers every A question with 93.184.216.34 and every other question with no record. */
function answeringServer(socket: Socket): void {
  socket.on('message', (query, peer) => {
    // The question: labels from byte 12 to a zero byte, then type and class.
    let end = 12;
    while ((query[end] as number) !== 0) end += (query[end] as number) + 1;
    end += 5;
    const type = query.readUInt16BE(end - 4);
    const header = Buffer.alloc(12);
    query.copy(header, 0, 0, 2);
    header.writeUInt16BE(0x8180, 2);
    header.writeUInt16BE(1, 4);
    header.writeUInt16BE(type === 1 ? 1 : 0, 6);
    const answer = type === 1 ? Buffer.from([0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 93, 184, 216, 34]) : Buffer.alloc(0);
    socket.send(Buffer.concat([header, query.subarray(12, end), answer]), peer.port, peer.address);
  });
}

const bound = async (socket: Socket): Promise<string> => {
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  return `127.0.0.1:${socket.address().port}`;
};

const lookupWith = (servers: readonly string[], hostname: string): Promise<{ error: NodeJS.ErrnoException | null; addresses: LookupAddress[] }> =>
  new Promise((resolve) => {
    const lookup = resolverLookup({ servers }) as unknown as (host: string, options: object, callback: (error: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void) => void;
    lookup(hostname, { all: true }, (error, addresses) => resolve({ error, addresses }));
  });

describe('the lookup of a stranger\'s host name', () => {
  const answering = createSocket('udp4');
  const silent = createSocket('udp4');
  let answeringServerAddress = '';
  let silentServerAddress = '';
  before(async () => {
    answeringServer(answering);
    answeringServerAddress = await bound(answering);
    // Takes every query and answers none.
    silent.on('message', () => undefined);
    silentServerAddress = await bound(silent);
  });
  after(() => {
    answering.close();
    silent.close();
  });

  test('every address of the name, from DNS', async () => {
    const { error, addresses } = await lookupWith([answeringServerAddress], 'documents.example');
    assert.equal(error, null);
    assert.deepEqual(addresses, [{ address: '93.184.216.34', family: 4 }]);
  });

  test('names whose DNS never answers fail on their own, and hold no thread of the pool meanwhile', async () => {
    const settled: string[] = [];
    const lookups = Array.from({ length: 8 }, (_, i) =>
      lookupWith([silentServerAddress], `stall-${i}.example`).then((result) => {
        settled.push(`lookup ${i}`);
        return result;
      }),
    );
    const stalledToo = lookupWith([silentServerAddress], 'stall-again.example').then((result) => {
      settled.push('lookup 8');
      return result;
    });
    // Eight thread-pool jobs, started after the lookups: with getaddrinfo they would queue behind the stalled names.
    await Promise.all(Array.from({ length: 8 }, () => promisify(pbkdf2)('x', 'salt', 1, 32, 'sha256').then(() => settled.push('pool job'))));
    assert.deepEqual(settled, Array(8).fill('pool job'), 'every pool job finished before any lookup settled');
    // And a name from a DNS server that answers is found while they stall.
    assert.equal((await lookupWith([answeringServerAddress], 'documents.example')).addresses.length, 1);
    assert.equal(settled.length, 8, 'found before any stalled lookup settled');
    for (const { error, addresses } of await Promise.all([...lookups, stalledToo])) {
      assert.equal(error?.code, 'ETIMEOUT');
      assert.deepEqual(addresses, []);
    }
  });
});

/**
 * DESIGN.md §11 (a draining worker refuses no request): connection-drain.ts over real sockets, with a quiet moment of
 * 300 ms and a deadline of 2 s. Requests are written by hand on raw connections, so that a test decides when each
 * byte is sent; the worker's own drain is tested through `pinpoint serve` in workers-drain.test.ts.
 */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { afterEach, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { drainableConnections, type DrainableConnections } from '../src/http/connection-drain.js';

const TIMES = { quietMs: 300, deadlineMs: 2_000 };
const REQUEST = 'GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n';

let server: Server | undefined;
afterEach(() => {
  server?.closeAllConnections();
  server?.close();
});

/** A server answering "ok" at once, except at /hang, which never answers; its connections can be drained. */
async function serve(): Promise<{ port: number; connections: DrainableConnections }> {
  server = createServer((request, response) => {
    if (request.url !== '/hang') response.end('ok');
  });
  const connections = drainableConnections(server, TIMES);
  await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', resolve));
  return { port: (server.address() as AddressInfo).port, connections };
}

/** A raw connection: what it received so far, and when the server closed it. */
async function open(port: number): Promise<{ socket: Socket; received: () => string; closed: Promise<void> }> {
  const socket = connect(port, '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  let text = '';
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => (text += chunk));
  socket.on('error', () => undefined);
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  return { socket, received: () => text, closed };
}

/** Waits, at most 100 times 20 ms, until `connection` has received `count` answers. */
async function answers(connection: { received: () => string }, count: number): Promise<string[]> {
  for (let attempt = 0; attempt < 100; attempt += 1) {
    const heads = connection.received().split('HTTP/1.1 ').slice(1);
    if (heads.length >= count && heads[count - 1]?.includes('\r\n\r\nok')) return heads;
    await sleep(20);
  }
  throw new Error(`no ${count} answers: ${JSON.stringify(connection.received())}`);
}

test('a request sent on an idle keep-alive connection as the drain starts is answered with Connection: close, then the connection closes', async () => {
  const { port, connections } = await serve();
  const client = await open(port);
  client.socket.write(REQUEST);
  const [first] = await answers(client, 1);
  assert.match(first as string, /keep-alive/i, 'kept alive before the drain');
  const drained = connections.drain();
  client.socket.write(REQUEST);
  const [, second] = await answers(client, 2);
  assert.match(second as string, /^200 /);
  assert.match(second as string, /\r\nConnection: close\r\n/i);
  await client.closed;
  await drained;
});

test('a request half sent when the drain starts and finished after three quiet moments is answered', async () => {
  const { port, connections } = await serve();
  const client = await open(port);
  client.socket.write(REQUEST.slice(0, 20));
  await sleep(50);
  const drained = connections.drain();
  await sleep(3 * TIMES.quietMs);
  client.socket.write(REQUEST.slice(20));
  const [answer] = await answers(client, 1);
  assert.match(answer as string, /^200 /);
  assert.match(answer as string, /\r\nConnection: close\r\n/i);
  await client.closed;
  await drained;
});

test('a connection that carries nothing is closed once it has been quiet, and the drain ends', async () => {
  const { port, connections } = await serve();
  const used = await open(port);
  used.socket.write(REQUEST);
  await answers(used, 1);
  const unused = await open(port);
  await connections.drain();
  await Promise.all([used.closed, unused.closed]);
});

test('a request still unanswered at the deadline has its connection closed, and the drain ends', async () => {
  const { port, connections } = await serve();
  const client = await open(port);
  client.socket.write('GET /hang HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
  await sleep(50);
  await connections.drain();
  await client.closed;
  assert.equal(client.received(), '');
});

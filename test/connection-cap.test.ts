/**
 * limits.address_connections over real sockets: one address holds at most that many connections open; one more is
 * closed before anything is read, counted and logged once, while other addresses and trusted proxies are not held
 * to it; a closed connection frees its place.
 */
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { testApp, testConfig, type TestApp } from './helpers/app.js';

const CAP = 3;

/** A connection from `localAddress`, open once connected. */
function open(port: number, localAddress = '127.0.0.1'): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port, host: '127.0.0.1', localAddress });
    socket.once('connect', () => resolve(socket));
    socket.once('error', reject);
  });
}

/** Whether the server closes `socket` within `ms` without answering anything. */
function closedUnanswered(socket: Socket, ms = 2000): Promise<boolean> {
  return new Promise((resolve) => {
    let received = '';
    socket.on('data', (chunk) => (received += chunk.toString()));
    const timer = setTimeout(() => resolve(false), ms);
    socket.once('close', () => {
      clearTimeout(timer);
      resolve(received === '');
    });
    socket.on('error', () => undefined);
  });
}

/** One GET /healthz on an open connection: its status line. */
function healthz(socket: Socket): Promise<string> {
  return new Promise((resolve, reject) => {
    let received = '';
    const onData = (chunk: Buffer): void => {
      received += chunk.toString();
      if (received.includes('\r\n\r\n')) {
        socket.off('data', onData);
        resolve(received.slice(0, received.indexOf('\r\n')));
      }
    };
    socket.on('data', onData);
    socket.once('error', reject);
    socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
  });
}

describe('connections per address (limits.address_connections)', () => {
  const lines: Record<string, unknown>[] = [];
  let t: TestApp;
  let port: number;
  const sockets: Socket[] = [];
  before(async () => {
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
    t = await testApp({ logger, limits: { addressConnections: CAP } });
    await t.app.listen({ host: '127.0.0.1', port: 0 });
    port = (t.app.server.address() as { port: number }).port;
  });
  after(async () => {
    for (const socket of sockets) socket.destroy();
    await t.app.close();
  });

  test('one connection over the cap is closed unanswered, counted in /metrics and logged once; the others serve', async () => {
    for (let i = 0; i < CAP; i += 1) sockets.push(await open(port));
    const refused = await Promise.all(Array.from({ length: 5 }, () => open(port)));
    sockets.push(...refused);
    const closed = await Promise.all(refused.map((socket) => closedUnanswered(socket)));
    assert.deepEqual(closed, [true, true, true, true, true]);
    for (const socket of sockets.slice(0, CAP)) assert.equal(await healthz(socket), 'HTTP/1.1 200 OK');
    const counted = await t.ctx.metrics.registry.getSingleMetricAsString('pinpoint_connections_refused_total');
    assert.match(counted, /^pinpoint_connections_refused_total 5$/m);
    const warnings = lines.filter((line) => line.msg === 'connections refused: this address holds limits.address_connections open');
    assert.equal(warnings.length, 1, 'one line for a burst, not one per connection');
    assert.equal(warnings[0]?.address, '127.0.0.1');
    assert.equal(warnings[0]?.limit, CAP);
  });

  test('another address is not held to the first one\'s connections; a closed connection frees its place', async () => {
    const elsewhere = await open(port, '127.0.0.2');
    assert.equal(await healthz(elsewhere), 'HTTP/1.1 200 OK');
    elsewhere.destroy();
    const first = sockets[0] as Socket;
    await new Promise<void>((resolve) => {
      first.once('close', () => resolve());
      first.destroy();
    });
    // The server sees the close a moment after the client does.
    let again: Socket | undefined;
    for (let attempt = 0; attempt < 20 && again === undefined; attempt += 1) {
      const socket = await open(port);
      const status = await Promise.race([healthz(socket), new Promise<string>((resolve) => socket.once('close', () => resolve('closed')))]);
      if (status === 'HTTP/1.1 200 OK') again = socket;
      else await new Promise((resolve) => setTimeout(resolve, 50));
    }
    assert.ok(again, 'a place freed by a closed connection is taken again');
    sockets.push(again);
  });
});

describe('connections from a trusted proxy are not capped', () => {
  test('a proxy holds more connections than the cap, all served', async () => {
    const t = await testApp({ config: await testConfig({ trustedProxies: ['127.0.0.1'] }), limits: { addressConnections: 2 } });
    const sockets: Socket[] = [];
    try {
      await t.app.listen({ host: '127.0.0.1', port: 0 });
      const port = (t.app.server.address() as { port: number }).port;
      for (let i = 0; i < 6; i += 1) sockets.push(await open(port));
      for (const socket of sockets) assert.equal(await healthz(socket), 'HTTP/1.1 200 OK');
    } finally {
      for (const socket of sockets) socket.destroy();
      await t.app.close();
    }
  });
});

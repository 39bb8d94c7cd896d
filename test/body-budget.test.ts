/**
 * Request bodies a worker holds while they arrive (http/body-budget.ts), over real sockets: a cost audit had one
 * address open 1,000 connections that each sent most of a 64 KiB body and then nothing (70 MiB held for 30 s).
 */
import assert from 'node:assert/strict';
import { request as httpRequest, type ClientRequest } from 'node:http';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../src/app.js';
import { announcedBodyBytes, BodyBudget } from '../src/http/body-budget.js';
import { MemoryStore } from '../src/store/memory.js';
import { basic, cookieJar, form, hiddenInput, SECRET, testConfig, webappAuthorizeUrl } from './helpers/app.js';
import { loadSigningKeys } from './helpers/keys.js';

describe('what a request body weighs before it is read', () => {
  test('its Content-Length up to the limit; the limit when chunked or unreadable; nothing without a body', () => {
    assert.equal(announcedBodyBytes({ 'content-length': '120' }, 65536), 120);
    assert.equal(announcedBodyBytes({ 'content-length': '9999999' }, 65536), 65536);
    assert.equal(announcedBodyBytes({ 'content-length': 'x' }, 65536), 65536);
    assert.equal(announcedBodyBytes({ 'transfer-encoding': 'chunked' }, 65536), 65536);
    assert.equal(announcedBodyBytes({}, 65536), 0);
  });

  test('the budget holds per address group and in all, takes nothing it refuses, and forgets groups that hold nothing', () => {
    const budget = new BodyBudget(100, 150);
    assert.equal(budget.take('a', 60), undefined);
    assert.equal(budget.take('a', 50), 'address', 'over the address bound');
    assert.equal(budget.take('b', 80), undefined);
    assert.equal(budget.take('c', 20), 'all', 'over the bound in all');
    assert.equal(budget.held(), 140);
    budget.give('a', 60);
    assert.equal(budget.held('a'), 0);
    assert.equal(budget.take('c', 20), undefined);
    assert.equal(budget.held(), 100);
  });
});

describe('bodies that arrive slowly, over real sockets', () => {
  let app: FastifyInstance;
  let port = 0;
  const budget = new BodyBudget(3_000, 1_000_000);
  const slow: ClientRequest[] = [];

  before(async () => {
    const store = new MemoryStore();
    ({ app } = await buildApp({ config: await testConfig(), store, keys: await loadSigningKeys(store), bodyBudget: budget }));
    await app.listen({ host: '127.0.0.1', port: 0 });
    port = (app.server.address() as AddressInfo).port;
  });
  after(async () => {
    for (const request of slow) request.destroy();
    await app.close();
  });

  /** A /token request that announces 1,000 bytes and sends 10 of them, then nothing. */
  const trickle = (): ClientRequest => {
    const request = httpRequest({ host: '127.0.0.1', port, method: 'POST', path: '/token', agent: false, headers: { 'content-type': 'application/x-www-form-urlencoded', 'content-length': 1000 } });
    request.on('error', () => undefined);
    request.write('grant_type');
    slow.push(request);
    return request;
  };

  /** A whole client_credentials request from `localAddress`: its status and body. */
  const clientCredentials = (localAddress: string): Promise<{ status: number; body: string }> =>
    new Promise((resolve, reject) => {
      const body = 'grant_type=client_credentials';
      const request = httpRequest(
        { host: '127.0.0.1', port, localAddress, method: 'POST', path: '/token', agent: false, headers: { authorization: basic('service', SECRET), 'content-type': 'application/x-www-form-urlencoded', 'content-length': body.length } },
        (response) => {
          let text = '';
          response.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
          response.on('end', () => resolve({ status: response.statusCode ?? 0, body: text }));
        },
      );
      request.on('error', reject);
      request.end(body);
    });

  const eventually = async (condition: () => boolean): Promise<void> => {
    for (let attempt = 0; attempt < 200 && !condition(); attempt += 1) await sleep(10);
    assert.ok(condition());
  };

  test('an address holding its share gets 503 for one more body, before it is read; another address is served; the share comes back when those end', async () => {
    for (let i = 0; i < 3; i += 1) trickle();
    await eventually(() => budget.held('127.0.0.1') === 3_000);
    const refused = await clientCredentials('127.0.0.1');
    assert.equal(refused.status, 503, refused.body);
    assert.deepEqual(JSON.parse(refused.body), { error: 'temporarily_unavailable', error_description: 'too many request bodies are arriving from this address at once; try again shortly' });
    assert.equal((await clientCredentials('127.0.0.2')).status, 200, 'another address is not held back');
    const health = await app.inject({ url: '/healthz', remoteAddress: '127.0.0.1' });
    assert.equal(health.statusCode, 200, 'a request without a body is weighed at nothing');
    for (const request of slow.splice(0)) request.destroy();
    await eventually(() => budget.held() === 0);
    assert.equal((await clientCredentials('127.0.0.1')).status, 200);
  });
});

describe('pipelined bodies behind an answer that never goes out', () => {
  test('a socket that dies while the first answer is pending gives back what its queued requests took (a review: Node closes no queued reply)', async () => {
    const budget = new BodyBudget();
    const store = new MemoryStore();
    const { app } = await buildApp({ config: await testConfig(), store, keys: await loadSigningKeys(store), bodyBudget: budget });
    await app.listen({ host: '127.0.0.1', port: 0 });
    try {
      const port = (app.server.address() as AddressInfo).port;
      // A slow first request: a wrong password (one password check), then three 60 KB bodies pipelined behind it.
      const start = await app.inject({ url: webappAuthorizeUrl() });
      const page = await app.inject({ url: String(start.headers.location), headers: { cookie: cookieJar('', start) } });
      const login = form([['csrf', hiddenInput(page.body, 'csrf')], ['login', hiddenInput(page.body, 'login')], ['username', 'alice'], ['password', 'wrong']]);
      const slow = `POST /login HTTP/1.1\r\nHost: x\r\nCookie: ${cookieJar(cookieJar('', start), page)}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: ${login.length}\r\n\r\n${login}`;
      const big = `grant_type=client_credentials&x=${'a'.repeat(60_000)}`;
      const heavy = `POST /token HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: ${big.length}\r\n\r\n${big}`;
      const socket = connect(port, '127.0.0.1');
      socket.on('error', () => undefined);
      await new Promise((resolve) => socket.once('connect', resolve));
      socket.write(slow + heavy + heavy + heavy);
      await sleep(100);
      socket.destroy();
      for (let attempt = 0; attempt < 300 && budget.held() > 0; attempt += 1) await sleep(10);
      assert.equal(budget.held(), 0);
    } finally {
      await app.close();
    }
  });
});

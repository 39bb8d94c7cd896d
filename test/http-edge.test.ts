/** DESIGN.md §4, §7 at the HTTP edge: requests Node's parser refuses, unknown paths, NUL bytes. Real sockets where it matters. */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { STORE_KINDS } from './helpers/databases.js';
import { exchange } from './helpers/raw-http.js';
import { appPerSuite, basic, cookieJar, form, hiddenInput, postToken, SECRET, testApp, testConfig, type TestApp, webappAuthorizeUrl } from './helpers/app.js';

const raw = (...parts: (string | number[])[]): Buffer => Buffer.concat(parts.map((part) => (typeof part === 'string' ? Buffer.from(part, 'latin1') : Buffer.from(part))));

describe('requests Node\'s HTTP parser refuses', () => {
  let t: TestApp;
  let port: number;
  before(async () => {
    t = await testApp();
    await t.app.listen({ host: '127.0.0.1', port: 0 });
    port = (t.app.server.address() as { port: number }).port;
  });
  after(async () => t.app.close());

  test('raw non-ASCII bytes in an API path: 400 JSON in the contract shape, Connection: close, no reset', async () => {
    const answer = await exchange(port, raw('POST /token?x=', [0xff, 0xfe], ' HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n'));
    assert.match(answer, /^HTTP\/1\.1 400 Bad Request\r\n/);
    assert.match(answer, /\r\nConnection: close\r\n/i);
    const body = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as { error: string; error_description: string };
    assert.equal(body.error, 'invalid_request');
    assert.equal(typeof body.error_description, 'string');
  });

  test('a malformed header on a page path: the HTML error page, Connection: close', async () => {
    const answer = await exchange(port, raw('GET /authorize HTTP/1.1\r\nHost: 127.0.0.1\r\nthis line is no header\r\n\r\n'));
    assert.match(answer, /^HTTP\/1\.1 400 Bad Request\r\n/);
    assert.match(answer, /\r\nContent-Type: text\/html/i);
    assert.match(answer, /\r\nConnection: close\r\n/i);
    assert.match(answer, /frame-ancestors 'none'/);
    assert.match(answer, /<!doctype html>[\s\S]*invalid_request/);
  });

  test('a refused request is named like every answer: X-Request-Id, and one access line with that id', async () => {
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
    const logged = await testApp({ logger });
    try {
      await logged.app.listen({ host: '127.0.0.1', port: 0 });
      const loggedPort = (logged.app.server.address() as { port: number }).port;
      const answer = await exchange(loggedPort, raw('GET /authorize?secret=hunter2 HTTP/1.1\r\nHost: 127.0.0.1\r\nthis line is no header\r\n\r\n'));
      const requestId = /\r\nX-Request-Id: ([0-9a-f-]{36})\r\n/i.exec(answer)?.[1];
      assert.ok(requestId, answer);
      const line = lines.find((record) => record.reqId === requestId);
      assert.ok(line, JSON.stringify(lines));
      assert.equal(line.msg, 'request');
      assert.equal(line.method, 'GET');
      assert.equal(line.path, '/authorize');
      assert.equal(line.status, 400);
      assert.equal(line.outcome, 'malformed_request');
      assert.ok(!JSON.stringify(lines).includes('hunter2'), 'never the query');
    } finally {
      await logged.app.close();
    }
  });

  test('an https issuer: HSTS on these answers too, pages and JSON alike; a page also says no-referrer (DESIGN.md §7)', async () => {
    const page = await exchange(port, raw('GET /authorize HTTP/1.1\r\nHost: 127.0.0.1\r\nthis line is no header\r\n\r\n'));
    assert.doesNotMatch(page, /Strict-Transport-Security/i, 'no HSTS over plain http');
    assert.match(page, /\r\nReferrer-Policy: no-referrer\r\n/i);
    const https = await testApp({ config: await testConfig({ baseUrl: 'https://auth.example.org' }) });
    try {
      await https.app.listen({ host: '127.0.0.1', port: 0 });
      const httpsPort = (https.app.server.address() as { port: number }).port;
      for (const path of ['/authorize', '/token']) {
        const answer = await exchange(httpsPort, raw(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nthis line is no header\r\n\r\n`));
        assert.match(answer, /^HTTP\/1\.1 400 Bad Request\r\n/, answer);
        assert.match(answer, /\r\nStrict-Transport-Security: max-age=31536000\r\n/i, `${path}: ${answer}`);
      }
    } finally {
      await https.app.close();
    }
  });

  test('a refused request followed by more pipelined data: the answer is read whole, not reset', async () => {
    const garbage = 'x'.repeat(64 * 1024);
    const answers = await Promise.all(
      Array.from({ length: 20 }, () => exchange(port, raw('GET /jwks HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header Line\r\n\r\n', garbage))),
    );
    for (const answer of answers) assert.match(answer, /^HTTP\/1\.1 400 [\s\S]*"error":"invalid_request"/);
  });

  test('the server keeps serving afterwards', async () => {
    const response = await fetch(`http://127.0.0.1:${port}/healthz`);
    assert.equal(response.status, 200);
  });
});

describe('a request that arrives too slowly: 408 and the connection closed, so a stranger cannot hold it open', () => {
  // Long enough that a loaded machine's pauses stay well inside it (the piecewise test keeps a third of it spare).
  const TIMEOUT_MS = 1200;
  const lines: Record<string, unknown>[] = [];
  let t: TestApp;
  let port: number;
  const body = form([['grant_type', 'client_credentials'], ['client_id', 'service'], ['client_secret', SECRET], ['scope', 'read']]);
  const tokenHead = `POST /token HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: ${body.length}\r\n\r\n`;
  before(async () => {
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
    t = await testApp({ logger, limits: { requestTimeoutMs: TIMEOUT_MS } });
    await t.app.listen({ host: '127.0.0.1', port: 0 });
    port = (t.app.server.address() as { port: number }).port;
  });
  after(async () => t.app.close());

  test('the default: headers and body within 30 s', async () => {
    const { app } = await testApp();
    try {
      assert.equal(app.server.requestTimeout, 30_000);
      assert.equal(app.server.headersTimeout, 30_000);
    } finally {
      await app.close();
    }
  });

  test('a body that stops coming: the JSON contract answer at an API path, and one access line naming the request', async () => {
    const answer = await exchange(port, raw(tokenHead, body.slice(0, 10)));
    assert.match(answer, /^HTTP\/1\.1 408 Request Timeout\r\n/);
    assert.match(answer, /\r\nConnection: close\r\n/i);
    assert.match(answer, /\r\nContent-Type: application\/json/i);
    const json = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as Record<string, unknown>;
    assert.deepEqual(json, { error: 'invalid_request', error_description: 'the request took too long to arrive' });
    const requestId = /\r\nX-Request-Id: ([0-9a-f-]{36})\r\n/i.exec(answer)?.[1];
    const logged = lines.filter((line) => line.reqId === requestId);
    assert.equal(logged.length, 1, JSON.stringify(lines));
    assert.deepEqual([logged[0]?.method, logged[0]?.path, logged[0]?.status, logged[0]?.outcome], ['POST', '/token', 408, 'request_timeout']);
    // The client closing after the answer is no second request: no more lines.
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(lines.filter((line) => line.status === 400).length, 0, JSON.stringify(lines));
  });

  test('a refusal that goes out before the body (415): no second answer when the body then stops coming, just the close', async () => {
    const before = lines.length;
    const answer = await exchange(port, raw('POST /token HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 50\r\n\r\ngrant'));
    assert.deepEqual([...answer.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((match) => match[1]), ['415'], answer);
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.deepEqual(lines.slice(before).map((line) => line.status), [415], 'one access line, the 415 one');
  });

  test('headers that never end, and a connection that sends nothing: 408, closed', async () => {
    for (const bytes of ['POST /token HTTP/1.1\r\nHost: 127.0.0.1\r\n', '']) {
      const answer = await exchange(port, raw(bytes));
      assert.match(answer, /^HTTP\/1\.1 408 Request Timeout\r\n[\s\S]*\r\nConnection: close\r\n/i, JSON.stringify(bytes));
    }
  });

  test('a body sent in pieces within the time, then a keep-alive pause longer than it: both requests answered', async () => {
    const answers = await new Promise<string>((resolve, reject) => {
      const socket = connect(port, '127.0.0.1');
      let received = '';
      socket.on('error', reject);
      // A connection the server closes (a 408 after a stall) ends the test with what came, instead of a hang.
      socket.on('close', () => resolve(received));
      socket.on('data', (chunk) => {
        received += chunk.toString('utf8');
        if ((received.match(/HTTP\/1\.1 /g) ?? []).length === 2 && received.endsWith('}')) {
          socket.destroy();
          resolve(received);
        }
      });
      socket.write(tokenHead);
      setTimeout(() => socket.write(body.slice(0, 20)), TIMEOUT_MS / 3);
      setTimeout(() => socket.write(body.slice(20)), (2 * TIMEOUT_MS) / 3);
      // Idle keep-alive time is keepAliveTimeout's, not the request's.
      setTimeout(() => socket.write(tokenHead + body), TIMEOUT_MS * 3);
    });
    const statuses = [...answers.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((match) => match[1]);
    assert.deepEqual(statuses, ['200', '200'], answers);
  });
});

describe('unknown paths', () => {
  let t: TestApp;
  before(async () => {
    t = await testApp();
  });
  after(async () => t.app.close());

  test('a browser (Accept: text/html) gets the HTML error page; others get JSON', async () => {
    const page = await t.app.inject({ url: '/nowhere', headers: { accept: 'text/html,application/xhtml+xml;q=0.9,*/*;q=0.8' } });
    assert.equal(page.statusCode, 404);
    assert.match(String(page.headers['content-type']), /^text\/html/);
    assert.match(page.body, /not_found/);
    assert.match(String(page.headers['content-security-policy']), /frame-ancestors 'none'/);
    const json = await t.app.inject({ url: '/nowhere' });
    assert.equal(json.statusCode, 404);
    assert.deepEqual(json.json(), { error: 'not_found', error_description: 'no such endpoint' });
    const api = await t.app.inject({ url: '/.well-known/nothing', headers: { accept: 'text/html' } });
    assert.match(String(api.headers['content-type']), /^application\/json/, 'an API path stays JSON');
  });
});

for (const kind of STORE_KINDS) describe(`a NUL byte in any parameter is invalid_request (DESIGN.md §7), ${kind.name} store`, { skip: kind.skip }, () => {
  let t: TestApp;
  appPerSuite(kind, async () => ({}), (opened) => {
    t = opened;
  });

  test('/authorize: the error page, HTTP 400, no redirect', async () => {
    for (const extra of [[['state', 'a\0b']], [['nonce', '\0']], [['resource', 'https://api.example.org/\0']]] as [string, string][][]) {
      const response = await t.app.inject({ url: webappAuthorizeUrl(extra) });
      assert.equal(response.statusCode, 400, JSON.stringify(extra));
      assert.equal(response.headers.location, undefined);
      assert.match(response.body, /NUL byte/);
    }
  });

  test('/token: JSON invalid_request', async () => {
    const response = await postToken(t.app, [['grant_type', 'client_credentials'], ['scope', 'read\0']], basic('service', SECRET));
    assert.equal(response.statusCode, 400);
    assert.deepEqual(response.json(), { error: 'invalid_request', error_description: 'a parameter contains a NUL byte' });
  });

  test('the sign-in form: the error page, nobody signed in', async () => {
    const start = await t.app.inject({ url: webappAuthorizeUrl() });
    let cookies = cookieJar('', start);
    const page = await t.app.inject({ url: String(start.headers.location), headers: { cookie: cookies } });
    cookies = cookieJar(cookies, page);
    const response = await t.app.inject({
      method: 'POST',
      url: '/login',
      headers: { cookie: cookies, 'content-type': 'application/x-www-form-urlencoded' },
      payload: form([['csrf', hiddenInput(page.body, 'csrf')], ['login', hiddenInput(page.body, 'login')], ['username', 'ali\0ce'], ['password', 'x']]),
    });
    assert.equal(response.statusCode, 400);
    assert.match(String(response.headers['content-type']), /^text\/html/);
    assert.ok(!String(response.headers['set-cookie'] ?? '').includes('pinpoint_session='));
  });
});

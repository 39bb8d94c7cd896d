/**
 * DESIGN.md §7: no log line, at any level, holds a token, code, secret, password or session cookie. Fed through a
 * real socket at level trace, including requests Node's HTTP parser refuses (whose raw bytes Fastify hands to the
 * logger as `err.rawPacket`).
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { createLogger } from '../src/log.js';
import { basic, form, PASSWORD, SECRET, testApp, type TestApp } from './helpers/app.js';

/** Sends raw bytes on a fresh connection and resolves with whatever comes back before the server closes it. */
function sendRaw(port: number, bytes: Buffer | string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.setTimeout(3000, () => socket.destroy());
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
    socket.end(bytes);
  });
}

describe('logs hold no secret, at level trace, through a real socket', () => {
  const lines: string[] = [];
  let t: TestApp;
  let port: number;
  before(async () => {
    t = await testApp({ logger: createLogger('trace', { write: (line: string) => void lines.push(line) }) });
    await t.app.listen({ host: '127.0.0.1', port: 0 });
    port = (t.app.server.address() as { port: number }).port;
  });
  after(async () => t.app.close());

  test('Basic header, session cookie, code, password and client secret appear in no line', async () => {
    const session = 'sessioncookievalue-4d9f0a7c1b2e';
    const code = 'authorizationcode-77aa19e0c3d4';
    const wrongSecret = 'wrong-client-secret-5e1f';
    const authorization = basic('webapp', SECRET);
    const body = form([
      ['grant_type', 'authorization_code'],
      ['code', code],
      ['redirect_uri', 'http://127.0.0.1:9000/callback'],
      ['code_verifier', 'v'.repeat(43)],
      ['password', PASSWORD],
      ['client_secret', wrongSecret],
    ]);
    const headers = [`Authorization: ${authorization}`, `Cookie: pinpoint_session=${session}`, 'Content-Type: application/x-www-form-urlencoded'];

    // A well-formed request the server refuses (unknown code) and a sign-in post with the password.
    const refused = await sendRaw(port, `POST /token HTTP/1.1\r\nHost: 127.0.0.1\r\n${headers.join('\r\n')}\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`);
    assert.match(refused, /^HTTP\/1\.1 40\d/);
    const login = form([['login', 'A'.repeat(24)], ['username', 'alice'], ['password', PASSWORD], ['csrf', 'c'.repeat(43)]]);
    const signIn = await sendRaw(port, `POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\n${headers.join('\r\n')}\r\nContent-Length: ${login.length}\r\nConnection: close\r\n\r\n${login}`);
    assert.match(signIn, /^HTTP\/1\.1 400/);
    // Requests Node's parser refuses: a header line without a colon, and raw non-ASCII bytes in the URL.
    await sendRaw(port, `POST /token HTTP/1.1\r\nHost: 127.0.0.1\r\n${headers.join('\r\n')}\r\nthis line is no header\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    await sendRaw(
      port,
      Buffer.concat([Buffer.from('GET /authorize?x='), Buffer.from([0xff, 0xfe]), Buffer.from(` HTTP/1.1\r\nHost: 127.0.0.1\r\n${headers.join('\r\n')}\r\n\r\n`)]),
    );

    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.ok(lines.some((line) => line.includes('"path":"/token"')), 'the access log saw the token request');
    const forbidden = {
      basic: authorization.slice('Basic '.length),
      session,
      code,
      password: PASSWORD,
      passwordForm: encodeURIComponent(PASSWORD).replace(/%20/g, '+'),
      clientSecret: SECRET,
      wrongSecret,
    };
    for (const line of lines) {
      for (const [what, value] of Object.entries(forbidden)) {
        assert.ok(!line.includes(value), `a log line holds the ${what}: ${line}`);
        // A Buffer (e.g. err.rawPacket) reaches JSON as its bytes in decimal.
        assert.ok(!line.includes(Buffer.from(value).toJSON().data.join(',')), `a log line holds the ${what} as bytes: ${line.slice(0, 300)}`);
      }
    }
  });

  test('a secret or token sent where the client_id goes (fields swapped) is not logged as the client_id; a known client_id is', async () => {
    const refreshToken = 'a1b2c3d4-refresh.Zm9vYmFyYmF6cXV4';
    const before = lines.length;
    const statuses: number[] = [];
    for (const [headers, pairs] of [
      [{}, [['grant_type', 'refresh_token'], ['client_id', refreshToken], ['refresh_token', 'webapp']]],
      [{ authorization: basic(SECRET, 'webapp') }, [['grant_type', 'client_credentials']]],
      [{ authorization: basic('webapp', 'not-the-secret') }, [['grant_type', 'client_credentials']]],
    ] as const) {
      const response = await fetch(`http://127.0.0.1:${port}/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
        body: form(pairs as unknown as [string, string][]),
      });
      statuses.push(response.status);
    }
    assert.deepEqual(statuses, [401, 401, 401]);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const written = lines.slice(before);
    for (const line of written) {
      assert.ok(!line.includes(refreshToken), `a log line holds the refresh token: ${line}`);
      assert.ok(!line.includes(SECRET), `a log line holds the secret: ${line}`);
    }
    const clientIds = written.map((line) => JSON.parse(line) as Record<string, unknown>).filter((record) => record.msg === 'request').map((record) => record.client_id);
    assert.deepEqual(clientIds, [undefined, undefined, 'webapp']);
  });

  test('access lines: address and request id; X-Request-Id on every answer, never copied from the client; request values cut at 256 characters', async () => {
    const longClient = 'c'.repeat(10_000);
    const response = await fetch(`http://127.0.0.1:${port}/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-request-id': 'chosen-by-the-client' },
      body: form([['grant_type', 'client_credentials'], ['client_id', longClient]]),
    });
    assert.equal(response.status, 401);
    const requestId = response.headers.get('x-request-id');
    assert.match(requestId ?? '', /^[0-9a-f-]{36}$/);
    const notFound = await fetch(`http://127.0.0.1:${port}/${'p'.repeat(5000)}`);
    assert.match(notFound.headers.get('x-request-id') ?? '', /^[0-9a-f-]{36}$/);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const records = lines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((record) => record.msg === 'request');
    const line = records.find((record) => record.reqId === requestId);
    assert.ok(line, 'the access line carries the request id sent back');
    assert.equal(line.address, '127.0.0.1');
    assert.equal(line.path, '/token');
    assert.ok(String(line.client_id).length <= 257, 'the client_id is cut');
    assert.ok(!JSON.stringify(records).includes('chosen-by-the-client'));
    assert.ok(records.every((record) => String(record.path).length <= 257), 'paths are cut');
    assert.ok(lines.every((entry) => entry.length < 4096), 'no line grows with what the client sent');
  });
});

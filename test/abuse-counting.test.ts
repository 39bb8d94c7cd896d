/**
 * DESIGN.md §4, §6: malformed requests and kept login requests count against their address; a used code replayed
 * by its own client revokes its grant also after the code's 60 s.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { exchange } from './helpers/raw-http.js';
import { basic, exchangeCode, form, postToken, refresh, SECRET, signInForCode, testApp, testConfig, webappAuthorizeUrl } from './helpers/app.js';

const CLIENT_CREDENTIALS = form([['grant_type', 'client_credentials'], ['client_id', 'service'], ['client_secret', SECRET]]);

const authorizeRequest = (): string =>
  webappAuthorizeUrl();

describe('what counts against an address', () => {
  test('malformed requests (a NUL byte, a body that is not a form) count: then even a good request gets 429', async () => {
    const t = await testApp({ limits: { addressFailures: 3 } });
    try {
      assert.equal((await postToken(t.app, [['grant_type', 'client_credentials'], ['scope', '\0']], basic('service', SECRET))).statusCode, 400);
      assert.equal((await t.app.inject({ method: 'POST', url: '/token', headers: { 'content-type': 'application/json' }, payload: '{}' })).statusCode, 415);
      assert.equal((await t.app.inject({ url: `/authorize?client_id=webapp&state=${encodeURIComponent('a\0')}` })).statusCode, 400);
      const good = await postToken(t.app, [['grant_type', 'client_credentials']], basic('service', SECRET));
      assert.equal(good.statusCode, 429, good.body);
      assert.ok(Number(good.headers['retry-after']) > 0);
    } finally {
      await t.app.close();
    }
  });

  test('a body of thousands of parameters is refused at the 257th (an audit: 12,000 names in 64 KiB cost 8 ms each to index, uncounted at /userinfo) and counts at every endpoint', async () => {
    const t = await testApp({ limits: { addressFailures: 4 } });
    try {
      const many = Array.from({ length: 7_000 }, (_, i) => `k${i}=`).join('&');
      const most = `grant_type=client_credentials&${Array.from({ length: 255 }, (_, i) => `k${i}=`).join('&')}`;
      assert.equal((await t.app.inject({ method: 'POST', url: '/token', headers: { authorization: basic('service', SECRET), 'content-type': 'application/x-www-form-urlencoded' }, payload: most })).statusCode, 200, '256 parameters are taken');
      for (const url of ['/userinfo', '/logout', '/device', '/token']) {
        const refused = await t.app.inject({ method: 'POST', url, headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: many });
        assert.equal(refused.statusCode, 400, `${url}: ${refused.body}`);
        if (url === '/token') assert.deepEqual(refused.json(), { error: 'invalid_request', error_description: 'more than 256 parameters' });
      }
      const good = await postToken(t.app, [['grant_type', 'client_credentials']], basic('service', SECRET));
      assert.equal(good.statusCode, 429, good.body);
      const other = await t.app.inject({ method: 'POST', url: '/token', remoteAddress: '10.3.3.3', headers: { authorization: basic('service', SECRET), 'content-type': 'application/x-www-form-urlencoded' }, payload: 'grant_type=client_credentials' });
      assert.equal(other.statusCode, 200, 'another address is not affected');
    } finally {
      await t.app.close();
    }
  });

  test('each /authorize that keeps a login request on the server counts: a loop of them is stopped', async () => {
    const t = await testApp({ limits: { addressFailures: 3 } });
    try {
      for (let i = 0; i < 3; i++) assert.equal((await t.app.inject({ url: authorizeRequest() })).statusCode, 303);
      const stopped = await t.app.inject({ url: authorizeRequest() });
      assert.equal(stopped.statusCode, 429);
      assert.equal(stopped.headers.location, undefined, 'no login request is kept for it');
      const other = await t.app.inject({ url: authorizeRequest(), remoteAddress: '10.2.2.2' });
      assert.equal(other.statusCode, 303, 'another address is not affected');
    } finally {
      await t.app.close();
    }
  });
});

describe('requests refused before Fastify sees them (Node\'s parser, a request too slow to arrive)', () => {
  test('count against the socket\'s address: then a good request from it gets 429', async () => {
    const t = await testApp({ limits: { addressFailures: 3, requestTimeoutMs: 500 } });
    try {
      await t.app.listen({ host: '127.0.0.1', port: 0 });
      const port = (t.app.server.address() as { port: number }).port;
      for (let i = 0; i < 2; i++) assert.match(await exchange(port, 'GET /jwks HTTP/1.1\r\nHost: x\r\nno header here\r\n\r\n'), /^HTTP\/1\.1 400 /);
      assert.match(await exchange(port, 'POST /token HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 50\r\n\r\ngrant'), /^HTTP\/1\.1 408 /);
      const good = await fetch(`http://127.0.0.1:${port}/token`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: CLIENT_CREDENTIALS });
      assert.equal(good.status, 429, await good.text());
    } finally {
      await t.app.close();
    }
  });

  test('from a trusted proxy they count against nobody: the proxy\'s other clients are not locked out', async () => {
    const config = await testConfig({ trustedProxies: ['127.0.0.1'] });
    const t = await testApp({ config, limits: { addressFailures: 3 } });
    try {
      await t.app.listen({ host: '127.0.0.1', port: 0 });
      const port = (t.app.server.address() as { port: number }).port;
      for (let i = 0; i < 5; i++) assert.match(await exchange(port, 'GET /jwks HTTP/1.1\r\nHost: x\r\nno header here\r\n\r\n'), /^HTTP\/1\.1 400 /);
      const good = await fetch(`http://127.0.0.1:${port}/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-forwarded-for': '203.0.113.7' },
        body: CLIENT_CREDENTIALS,
      });
      assert.equal(good.status, 200, await good.text());
    } finally {
      await t.app.close();
    }
  });
});

describe('a replayed code', () => {
  test('its own client replaying it after the 60 s still revokes its grant', async () => {
    let now = Date.now();
    const t = await testApp({ now: () => now });
    try {
      const grant = await signInForCode(t.app);
      const exchanged = await exchangeCode(t.app, grant);
      assert.equal(exchanged.statusCode, 200, exchanged.body);
      now += 120_000;
      assert.equal((await exchangeCode(t.app, grant)).json().error, 'invalid_grant');
      assert.equal((await refresh(t.app, exchanged.json().refresh_token as string)).json().error, 'invalid_grant', 'the grant is revoked');
    } finally {
      await t.app.close();
    }
  });
});

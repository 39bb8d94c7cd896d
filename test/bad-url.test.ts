/**
 * DESIGN.md §4, §10: a path Fastify's router cannot decode (`%ff`, a cut-off escape) or whose route parameter is too
 * long is answered by the app like any malformed request: the HTML error page (with the page headers) at page paths,
 * JSON in the contract shape at API paths, X-Request-Id, one access line, counted as a failure of its address, and
 * never an echo of what was sent. Found by an outside audit: Fastify's own FST_ERR_BAD_URL JSON answered instead.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import pino from 'pino';
import type { LightMyRequestResponse } from 'fastify';
import { basic, postToken, SECRET, testApp, testConfig } from './helpers/app.js';

const BAD_CALLBACK = '/federation/%ff/callback?state=abc-secret-state&code=upstream-code-1';

function assertErrorPage(response: LightMyRequestResponse, status: number): void {
  assert.equal(response.statusCode, status, response.body);
  assert.match(String(response.headers['content-type']), /^text\/html/);
  assert.match(String(response.headers['content-security-policy']), /frame-ancestors 'none'/);
  assert.equal(response.headers['x-frame-options'], 'DENY');
  assert.match(String(response.headers['x-request-id']), /^[0-9a-f-]{36}$/);
  assert.match(response.body, /<!doctype html>[\s\S]*invalid_request/);
  assert.doesNotMatch(response.body, /FST_ERR|abc-secret-state|upstream-code|%ff/);
}

describe('a badly encoded path', () => {
  test('at a page path: the HTML error page with the page headers and a request id, never an echo', async () => {
    const t = await testApp();
    try {
      assertErrorPage(await t.app.inject({ url: BAD_CALLBACK, headers: { accept: 'text/html' } }), 400);
      assertErrorPage(await t.app.inject({ url: BAD_CALLBACK }), 400);
      assertErrorPage(await t.app.inject({ url: '/authorize%E0%A4%A?client_id=webapp' }), 400);
      assertErrorPage(await t.app.inject({ method: 'POST', url: '/login%ff', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: 'a=b' }), 400);
    } finally {
      await t.app.close();
    }
  });

  test('at an API path: JSON in the contract shape, with a request id', async () => {
    const t = await testApp();
    try {
      const response = await t.app.inject({ url: '/.well-known/openid-configuration%ff?x=secret-query' });
      assert.equal(response.statusCode, 400);
      assert.match(String(response.headers['content-type']), /^application\/json/);
      assert.match(String(response.headers['x-request-id']), /^[0-9a-f-]{36}$/);
      assert.equal(response.headers['cache-control'], 'no-store');
      const body = response.json() as Record<string, unknown>;
      assert.deepEqual(Object.keys(body).sort(), ['error', 'error_description']);
      assert.equal(body.error, 'invalid_request');
      assert.doesNotMatch(response.body, /secret-query|%ff/);
    } finally {
      await t.app.close();
    }
  });

  test('a route parameter over Fastify\'s length limit gets the same treatment (414)', async () => {
    const t = await testApp();
    try {
      assertErrorPage(await t.app.inject({ url: `/federation/${'a'.repeat(200)}/callback?state=abc-secret-state` }), 414);
    } finally {
      await t.app.close();
    }
  });

  test('counts as a failure of its address: then a good request from it gets 429, another address none', async () => {
    const t = await testApp({ limits: { addressFailures: 3 } });
    try {
      for (let i = 0; i < 3; i += 1) assert.equal((await t.app.inject({ url: BAD_CALLBACK, remoteAddress: '198.51.100.7' })).statusCode, 400);
      const good = await t.app.inject({
        method: 'POST',
        url: '/token',
        remoteAddress: '198.51.100.7',
        headers: { authorization: basic('service', SECRET), 'content-type': 'application/x-www-form-urlencoded' },
        payload: 'grant_type=client_credentials',
      });
      assert.equal(good.statusCode, 429, good.body);
      assert.ok(Number(good.headers['retry-after']) > 0);
      assert.equal((await postToken(t.app, [['grant_type', 'client_credentials']], basic('service', SECRET))).statusCode, 200, 'another address is not affected');
    } finally {
      await t.app.close();
    }
  });

  test('one access line per request, with its request id and the client address after trusted_proxies, never the query', async () => {
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
    const t = await testApp({ logger, config: await testConfig({ trustedProxies: ['127.0.0.1'] }), limits: { addressFailures: 2 } });
    try {
      const response = await t.app.inject({ url: BAD_CALLBACK, headers: { 'x-forwarded-for': '203.0.113.9' } });
      assert.equal(response.statusCode, 400);
      const requestId = String(response.headers['x-request-id']);
      const line = lines.find((record) => record.reqId === requestId);
      assert.ok(line, JSON.stringify(lines));
      assert.equal(line.msg, 'request');
      assert.equal(line.method, 'GET');
      assert.equal(line.path, '/federation/%ff/callback');
      assert.equal(line.status, 400);
      assert.equal(line.address, '203.0.113.9');
      assert.equal(lines.filter((record) => record.reqId === requestId).length, 1);
      assert.ok(!JSON.stringify(lines).includes('abc-secret-state') && !JSON.stringify(lines).includes('upstream-code'), 'never the query');

      // Counted against the forwarded client, not the proxy: the proxy's other clients go on.
      await t.app.inject({ url: BAD_CALLBACK, headers: { 'x-forwarded-for': '203.0.113.9' } });
      const blocked = await postToken(t.app, [['grant_type', 'client_credentials']], basic('service', SECRET));
      assert.equal(blocked.statusCode, 200, 'the proxy itself (no X-Forwarded-For) is not blocked');
      const forwarded = await t.app.inject({
        method: 'POST',
        url: '/token',
        headers: { authorization: basic('service', SECRET), 'content-type': 'application/x-www-form-urlencoded', 'x-forwarded-for': '203.0.113.9' },
        payload: 'grant_type=client_credentials',
      });
      assert.equal(forwarded.statusCode, 429, forwarded.body);
    } finally {
      await t.app.close();
    }
  });
});

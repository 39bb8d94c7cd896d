/**
 * What a per-address limit counts as one address (an audit: limits were keyed per IPv6 address, so a host with a /64,
 * which every IPv6 subscriber gets, had 2^64 budgets): IPv4 as it is, IPv4-mapped IPv6 as its IPv4, IPv6 by its /64.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { limitedAddress } from '../src/http/failure-limit.js';
import { basic, cookieJar, form, hiddenInput, PASSWORD, testApp, webappAuthorizeUrl } from './helpers/app.js';

describe('limitedAddress', () => {
  test('IPv4 stays itself; IPv4-mapped IPv6 is its IPv4; IPv6 is its /64 however it is written', () => {
    assert.equal(limitedAddress('203.0.113.7'), '203.0.113.7');
    assert.equal(limitedAddress('::ffff:203.0.113.7'), '203.0.113.7');
    assert.equal(limitedAddress('::FFFF:203.0.113.7'), '203.0.113.7');
    for (const address of ['2001:db8:1:2::1', '2001:0db8:0001:0002:ffff:ffff:ffff:ffff', '2001:DB8:1:2:0:0:0:9', '2001:db8:1:2::1.2.3.4', '2001:db8:1:2::1%eth0']) {
      assert.equal(limitedAddress(address), '2001:db8:1:2::/64', address);
    }
    assert.equal(limitedAddress('2001:db8:1:3::1'), '2001:db8:1:3::/64');
    assert.equal(limitedAddress('::1'), '0:0:0:0::/64');
    assert.equal(limitedAddress('2001:db8::'), '2001:db8:0:0::/64');
    assert.equal(limitedAddress('64:ff9b::198.51.100.1'), '64:ff9b:0:0::/64');
  });
});

const wrongSecret = (app: FastifyInstance, remoteAddress: string): Promise<LightMyRequestResponse> =>
  app.inject({ method: 'POST', url: '/token', remoteAddress, headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic('webapp', 'wrong') }, payload: form([['grant_type', 'client_credentials']]) });

describe('per-address limits over IPv6', () => {
  test('failures from many addresses of one /64 share one budget; another /64 keeps its own', async () => {
    const t = await testApp({ limits: { addressFailures: 3, clientFailures: 1000 } });
    try {
      const statuses: number[] = [];
      for (let host = 1; host <= 8; host += 1) statuses.push((await wrongSecret(t.app, `2001:db8:1:2::${host.toString(16)}`)).statusCode);
      assert.deepEqual(statuses, [401, 401, 401, 429, 429, 429, 429, 429]);
      assert.equal((await wrongSecret(t.app, '2001:db8:1:3::1')).statusCode, 401, 'the neighbouring /64 is not held back');
    } finally {
      await t.app.close();
    }
  });

  test('wrong passwords for one user from addresses of one /64 count together', async () => {
    const t = await testApp({ limits: { loginFailures: 2, addressFailures: 1000 } });
    try {
      const start = await t.app.inject({ url: webappAuthorizeUrl() });
      const page = await t.app.inject({ url: String(start.headers.location), headers: { cookie: cookieJar('', start) } });
      const cookies = cookieJar(cookieJar('', start), page);
      const attempt = (remoteAddress: string, password: string): Promise<LightMyRequestResponse> =>
        t.app.inject({
          method: 'POST',
          url: '/login',
          remoteAddress,
          headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: cookies },
          payload: form([['csrf', hiddenInput(page.body, 'csrf')], ['login', hiddenInput(page.body, 'login')], ['username', 'alice'], ['password', password]]),
        });
      const statuses: number[] = [];
      for (let host = 1; host <= 4; host += 1) statuses.push((await attempt(`2001:db8:5:6::${host}`, `wrong-${host}`)).statusCode);
      assert.deepEqual(statuses, [401, 401, 429, 429]);
      assert.equal((await attempt('2001:db8:5:6::99', PASSWORD)).statusCode, 429, 'the right password too, from that /64');
    } finally {
      await t.app.close();
    }
  });
});

/** DESIGN.md §7 page headers: CSP form-action, HSTS for https issuers, `__Host-` cookies when the issuer has no path. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { LightMyRequestResponse } from 'fastify';
import { cookieJar, testApp, testConfig, webappAuthorizeUrl } from './helpers/app.js';


const setCookies = (response: LightMyRequestResponse): string[] => {
  const value = response.headers['set-cookie'];
  return Array.isArray(value) ? value : value === undefined ? [] : [value];
};

describe('page headers', () => {
  test('the sign-in page allows forms to post only to the server and, through redirects, to the client', async () => {
    const t = await testApp();
    try {
      const start = await t.app.inject({ url: webappAuthorizeUrl() });
      const page = await t.app.inject({ url: String(start.headers.location), headers: { cookie: cookieJar('', start) } });
      assert.equal(page.statusCode, 200);
      assert.match(String(page.headers['content-security-policy']), /form-action 'self' http:\/\/127\.0\.0\.1:9000;/);
      const error = await t.app.inject({ url: '/login?login=AAAAAAAAAAAAAAAAAAAAAAAA' });
      assert.match(String(error.headers['content-security-policy']), /form-action 'self';/);
      assert.equal(page.headers['strict-transport-security'], undefined, 'no HSTS over plain http');
    } finally {
      await t.app.close();
    }
  });

  test('an https issuer without a path: HSTS on every answer, Secure __Host- cookies', async () => {
    const t = await testApp({ config: await testConfig({ baseUrl: 'https://auth.example.org' }) });
    try {
      const start = await t.app.inject({ url: webappAuthorizeUrl() });
      assert.equal(start.headers['strict-transport-security'], 'max-age=31536000');
      const cookies = setCookies(start);
      assert.ok(cookies.length > 0 && cookies.every((line) => line.startsWith('__Host-pinpoint_') && /; Secure/.test(line) && /Path=\/;/.test(line)), cookies.join(' | '));
      const page = await t.app.inject({ url: String(start.headers.location), headers: { cookie: cookieJar('', start) } });
      assert.equal(page.statusCode, 200, 'the prefixed CSRF cookie is read back');
      const metadata = await t.app.inject({ url: '/.well-known/openid-configuration' });
      assert.equal(metadata.headers['strict-transport-security'], 'max-age=31536000');
    } finally {
      await t.app.close();
    }
  });

  test('an https issuer with a path: Secure cookies scoped to the path, without the __Host- prefix', async () => {
    const t = await testApp({ config: await testConfig({ baseUrl: 'https://example.org/auth', basePath: '/auth' }) });
    try {
      const start = await t.app.inject({ url: webappAuthorizeUrl([], '/auth') });
      const cookies = setCookies(start);
      assert.ok(cookies.length > 0 && cookies.every((line) => line.startsWith('pinpoint_') && /Path=\/auth;/.test(line) && /; Secure/.test(line)), cookies.join(' | '));
    } finally {
      await t.app.close();
    }
  });
});

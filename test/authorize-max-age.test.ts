/**
 * OpenID Connect Core §3.1.2.1 max_age: a session older than max_age seconds signs the person in again; a sign-in
 * made for the request satisfies any max_age, 0 included (an audit found max_age=0 sending the person back to the
 * sign-in page forever, as a millisecond always passes between sign-in and resume). The clock moves 1 ms per reading.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { LightMyRequestResponse } from 'fastify';
import { cookieJar, form, hiddenInput, PASSWORD, REDIRECT, testApp, webappAuthorizeUrl, type TestApp } from './helpers/app.js';

describe('max_age at /authorize', () => {
  let t: TestApp;
  let clock = Date.parse('2030-01-01T00:00:00Z');
  before(async () => {
    t = await testApp({ now: () => (clock += 1) });
  });
  after(async () => t.app.close());

  /** GET /authorize with max_age, then, if sent to sign in, the form posted and the resume followed: where the browser ends. */
  async function authorize(maxAge: string, cookies: string): Promise<{ location: string; signedIn: boolean; cookies: string }> {
    const start = await t.app.inject({ url: webappAuthorizeUrl([['max_age', maxAge], ['state', 's']]), headers: { cookie: cookies } });
    assert.equal(start.statusCode, 303, start.body);
    let jar = cookieJar(cookies, start);
    const first = String(start.headers.location);
    if (first.startsWith(REDIRECT)) return { location: first, signedIn: false, cookies: jar };
    const page = await t.app.inject({ url: first, headers: { cookie: jar } });
    jar = cookieJar(jar, page);
    const posted: LightMyRequestResponse = await t.app.inject({
      method: 'POST',
      url: '/login',
      headers: { cookie: jar, 'content-type': 'application/x-www-form-urlencoded' },
      payload: form([['csrf', hiddenInput(page.body, 'csrf')], ['login', hiddenInput(page.body, 'login')], ['username', 'alice'], ['password', PASSWORD]]),
    });
    assert.equal(posted.statusCode, 303, posted.body);
    jar = cookieJar(jar, posted);
    const resumed = await t.app.inject({ url: String(posted.headers.location), headers: { cookie: jar } });
    return { location: String(resumed.headers.location), signedIn: true, cookies: cookieJar(jar, resumed) };
  }

  test('max_age=0 signs the person in again, and that sign-in completes with a code', async () => {
    const first = await authorize('0', '');
    assert.ok(first.signedIn);
    assert.ok(first.location.startsWith(REDIRECT), first.location);
    assert.ok(new URL(first.location).searchParams.get('code'));
    // With that session, max_age=0 asks again (and completes again).
    const again = await authorize('0', first.cookies);
    assert.ok(again.signedIn, 'a session is never fresh enough for max_age=0');
    assert.ok(new URL(again.location).searchParams.get('code'), again.location);
  });

  test('a session younger than max_age is used as it is; an older one signs in again', async () => {
    const session = await authorize('0', '');
    const young = await authorize('60', session.cookies);
    assert.equal(young.signedIn, false);
    assert.ok(new URL(young.location).searchParams.get('code'));
    clock += 120_000;
    const old = await authorize('60', session.cookies);
    assert.ok(old.signedIn, 'two minutes old against max_age=60');
    assert.ok(new URL(old.location).searchParams.get('code'), old.location);
  });
});

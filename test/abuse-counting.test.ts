/**
 * DESIGN.md §4, §6: malformed requests and kept login requests count against their address; a used code replayed
 * by its own client revokes its grant also after the code's 60 s.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { basic, exchangeCode, postToken, refresh, SECRET, signInForCode, testApp, webappAuthorizeUrl } from './helpers/app.js';

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

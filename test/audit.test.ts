/** DESIGN.md §10 audit lines (`"audit": true`): sign-in, token issued, reuse, revocation, logout, registration, consent. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { createLogger } from '../src/log.js';
import { basic, cookieJar, exchangeCode, form, hiddenInput, PASSWORD, refresh, SECRET, signInForCode, testApp, testConfig, webappAuthorizeUrl } from './helpers/app.js';

describe('audit lines', () => {
  test('each event once, with who and what, never a secret', async () => {
    const lines: string[] = [];
    const config = await testConfig({
      dynamicClients: { audience: ['https://mcp.example.org/mcp'], metadataDocuments: false, registration: 'open', scopes: ['mcp'], refreshReuseGraceMs: 0, allowPrivateAddresses: false },
    });
    const t = await testApp({ config, logger: createLogger('info', { write: (line: string) => void lines.push(line) }) });
    try {
      // A wrong password, then a sign-in, a code exchange, a refresh, a reuse, a revocation, a logout.
      const start = await t.app.inject({
        url: webappAuthorizeUrl(),
      });
      const page = await t.app.inject({ url: String(start.headers.location), headers: { cookie: cookieJar('', start) } });
      await t.app.inject({
        method: 'POST',
        url: '/login',
        headers: { cookie: cookieJar(cookieJar('', start), page), 'content-type': 'application/x-www-form-urlencoded' },
        payload: form([['csrf', hiddenInput(page.body, 'csrf')], ['login', hiddenInput(page.body, 'login')], ['username', 'alice'], ['password', 'not-it']]),
      });
      const grant = await signInForCode(t.app);
      const tokens = (await exchangeCode(t.app, grant)).json();
      const next = (await refresh(t.app, tokens.refresh_token)).json();
      await refresh(t.app, tokens.refresh_token);
      const other = (await exchangeCode(t.app, await signInForCode(t.app))).json();
      await t.app.inject({ method: 'POST', url: '/revoke', headers: { authorization: basic('webapp', SECRET), 'content-type': 'application/x-www-form-urlencoded' }, payload: form([['token', other.refresh_token]]) });
      await t.app.inject({ url: `/logout?${new URLSearchParams({ id_token_hint: other.id_token })}`, headers: { cookie: grant.cookies } });
      await t.app.inject({ method: 'POST', url: '/register', headers: { 'content-type': 'application/json' }, payload: JSON.stringify({ redirect_uris: ['http://127.0.0.1/cb'] }) });
      await new Promise((resolve) => setImmediate(resolve));

      const audit = lines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((record) => record.audit === true);
      const events = (event: string): Record<string, unknown>[] => audit.filter((record) => record.event === event);
      const failed = events('sign_in').find((record) => record.outcome === 'failure');
      assert.ok(failed && failed.user === 'alice' && failed.method === 'password' && typeof failed.address === 'string', JSON.stringify(failed));
      assert.ok(events('sign_in').some((record) => record.outcome === 'success' && record.user === 'alice'));
      const issued = events('token_issued');
      assert.ok(issued.some((record) => record.grant_type === 'authorization_code' && record.client_id === 'webapp' && typeof record.grant_id === 'string' && record.scope === 'openid profile email'));
      assert.ok(issued.some((record) => record.grant_type === 'refresh_token'));
      assert.ok(issued.every((record) => record.msg === 'request'), 'a token request has one line: its access line is its audit line');
      assert.equal(events('reuse_detected').length, 1);
      assert.equal(events('revocation').length, 1);
      assert.equal(events('logout').length, 1);
      assert.equal(events('registration').length, 1);
      for (const secret of [tokens.access_token, tokens.refresh_token, next.refresh_token, other.id_token, PASSWORD, 'not-it', SECRET, grant.code]) {
        assert.ok(!lines.some((line) => line.includes(secret as string)), 'no secret in any line');
      }
    } finally {
      await t.app.close();
    }
  });
});

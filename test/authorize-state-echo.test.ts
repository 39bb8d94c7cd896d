/**
 * RFC 6749 §4.1.2 and §4.1.2.1, DESIGN.md §7 (rules added after the third outside review): /authorize sends `state`
 * back exactly as sent, an empty one too (`state=`), on every redirect — errors and codes, before and after sign-in;
 * a `state` refused for its length gets the error page (HTTP 400), not a redirect without it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { LightMyRequestResponse } from 'fastify';
import type { Store } from '../src/store/types.js';
import { STORE_KINDS } from './helpers/databases.js';
import { authorizeSilently, authorizeUrl, pkce, REDIRECT, signInForCode, testApp, webappAuthorizeUrl, type TestApp } from './helpers/app.js';

const LONGEST = 'x'.repeat(2048);
const TOO_LONG = 'x'.repeat(2049);

/** The redirect back to the client, with its query as sent (not only as URLSearchParams reads it). */
function redirectBack(response: LightMyRequestResponse): { url: URL; query: string } {
  assert.equal(response.statusCode, 303, response.body.slice(0, 300));
  const location = String(response.headers.location);
  assert.ok(location.startsWith(`${REDIRECT}?`), location);
  return { url: new URL(location), query: location.slice(location.indexOf('?') + 1) };
}

function assertStatePage(response: LightMyRequestResponse): void {
  assert.equal(response.statusCode, 400, response.body.slice(0, 300));
  assert.equal(response.headers.location, undefined, 'no redirect');
  assert.match(String(response.headers['content-type']), /^text\/html/);
  assert.match(response.body, /state is longer than 2048 characters/);
}

for (const kind of STORE_KINDS) {
  describe(`state at /authorize on the ${kind.name} store`, { skip: kind.skip }, () => {
    let store: Store;
    let cleanup: () => Promise<void>;
    let t: TestApp;
    before(async () => {
      ({ store, cleanup } = await kind.open());
      t = await testApp({ store });
    });
    after(async () => {
      await t.app.close();
      await store.close();
      await cleanup();
    });

    test('an error redirect carries an empty state as state=', async () => {
      const unsupported = redirectBack(await t.app.inject({ url: webappAuthorizeUrl([['state', ''], ['response_mode', 'fragment']]) }));
      assert.equal(unsupported.url.searchParams.get('error'), 'invalid_request');
      assert.match(unsupported.query, /(^|&)state=(&|$)/);
      assert.equal(unsupported.url.searchParams.get('state'), '');
      const notSignedIn = redirectBack(await t.app.inject({ url: webappAuthorizeUrl([['state', ''], ['prompt', 'none']]) }));
      assert.equal(notSignedIn.url.searchParams.get('error'), 'login_required');
      assert.match(notSignedIn.query, /(^|&)state=(&|$)/);
      const noState = redirectBack(await t.app.inject({ url: webappAuthorizeUrl([['response_mode', 'fragment']]) }));
      assert.equal(noState.url.searchParams.has('state'), false, 'no state sent, none sent back');
    });

    test('the code redirect after sign-in carries an empty state, and a 2,048-character one exactly', async () => {
      const empty = await signInForCode(t.app, { state: '' });
      assert.match(empty.location.search, /[?&]state=(&|$)/);
      assert.equal(empty.location.searchParams.get('state'), '');
      // Signed in now: prompt=none answers with a code straight away, state= included.
      const silent = redirectBack(await t.app.inject({ url: webappAuthorizeUrl([['state', ''], ['prompt', 'none']]), headers: { cookie: empty.cookies } }));
      assert.ok(silent.url.searchParams.get('code'));
      assert.match(silent.query, /(^|&)state=(&|$)/);
      const longest = await signInForCode(t.app, { state: LONGEST });
      assert.equal(longest.location.searchParams.get('state'), LONGEST);
      assert.ok((await authorizeSilently(t.app, longest.cookies)).searchParams.get('code'));
    });

    test('a state over 2,048 characters is the error page, never a redirect without it', async () => {
      assertStatePage(await t.app.inject({ url: webappAuthorizeUrl([['state', TOO_LONG]]) }));
      // Refusals that would redirect, and a request that would go on to sign-in: all the page.
      assertStatePage(await t.app.inject({ url: webappAuthorizeUrl([['state', TOO_LONG], ['response_mode', 'fragment']]) }));
      assertStatePage(await t.app.inject({ url: webappAuthorizeUrl([['state', TOO_LONG], ['prompt', 'none']]) }));
      assertStatePage(await t.app.inject({ url: authorizeUrl([['client_id', 'webapp'], ['redirect_uri', REDIRECT], ['state', TOO_LONG], ['code_challenge', pkce().challenge]]) }));
      const form = new URLSearchParams(new URL(`http://x${webappAuthorizeUrl([['state', TOO_LONG]])}`).search).toString();
      assertStatePage(await t.app.inject({ method: 'POST', url: '/authorize', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: form }));
    });
  });
}

/**
 * DESIGN.md §7 (rules added after the third outside review): the address limit of a sign-in is taken before the
 * password is checked (count first; a right password gives it back), so parallel sign-ins with many user names from
 * one address cannot all reach the password check. Every 401 below is one password check; every 429 is none.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import type { Store } from '../src/store/types.js';
import { STORE_KINDS } from './helpers/databases.js';
import { cookieJar, form, hiddenInput, PASSWORD, testApp, webappAuthorizeUrl } from './helpers/app.js';

const FORM = { 'content-type': 'application/x-www-form-urlencoded' };
/** The address the sign-ins come from; the sign-in form itself is fetched from another, so it spends none of this one's budget. */
const ATTACKER = '10.7.7.7';

interface SignInForm {
  readonly login: string;
  readonly csrf: string;
  readonly cookies: string;
}

let browsers = 0;
/** Each form from an address of its own: starting a sign-in counts against its address too (DESIGN.md §4). */
async function signInForm(app: FastifyInstance): Promise<SignInForm> {
  const remoteAddress = `10.8.0.${(browsers += 1) % 250}`;
  const start = await app.inject({ url: webappAuthorizeUrl(), remoteAddress });
  const page = await app.inject({ url: String(start.headers.location), remoteAddress, headers: { cookie: cookieJar('', start) } });
  return { login: hiddenInput(page.body, 'login'), csrf: hiddenInput(page.body, 'csrf'), cookies: cookieJar(cookieJar('', start), page) };
}

const signIn = (app: FastifyInstance, signInForm: SignInForm, username: string, password: string): Promise<LightMyRequestResponse> =>
  app.inject({
    method: 'POST',
    url: '/login',
    remoteAddress: ATTACKER,
    headers: { ...FORM, cookie: signInForm.cookies },
    payload: form([['csrf', signInForm.csrf], ['login', signInForm.login], ['username', username], ['password', password]]),
  });

for (const kind of STORE_KINDS) {
  describe(`the sign-in address limit on the ${kind.name} store`, { skip: kind.skip }, () => {
    let store: Store;
    let cleanup: () => Promise<void>;
    before(async () => {
      ({ store, cleanup } = await kind.open());
    });
    after(async () => {
      await store.close();
      await cleanup();
    });

    test('40 parallel wrong sign-ins with 40 user names against address_failures = 5: 5 reach the password check, 35 get 429 with Retry-After', async () => {
      // Five hashes at once on a busy machine may wait past the default 5 s for a hashing slot; this test is about the address limit.
      const t = await testApp({ store, limits: { addressFailures: 5, loginFailures: 1000, passwordWaitMs: 120_000 } });
      try {
        const page = await signInForm(t.app);
        const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => signIn(t.app, page, `nobody-${i}`, `wrong-${i}`)));
        const statuses = answers.map((answer) => answer.statusCode);
        assert.equal(statuses.filter((status) => status === 401).length, 5, statuses.join(' '));
        const refused = answers.filter((answer) => answer.statusCode === 429);
        assert.equal(refused.length, 35, statuses.join(' '));
        for (const answer of refused) assert.match(String(answer.headers['retry-after']), /^[1-9]\d*$/);
        assert.equal((await signIn(t.app, page, 'alice', PASSWORD)).statusCode, 429, 'the address has no slot left, so not even the right password is checked');
      } finally {
        await t.app.close();
      }
    });

    test('a right password gives its slot back; a wrong one keeps it', async () => {
      const t = await testApp({ store, limits: { addressFailures: 3, loginFailures: 1000 } });
      try {
        for (let i = 0; i < 2; i++) assert.equal((await signIn(t.app, await signInForm(t.app), `nobody-${i}`, 'wrong')).statusCode, 401);
        for (let i = 0; i < 3; i++) assert.equal((await signIn(t.app, await signInForm(t.app), 'alice', PASSWORD)).statusCode, 303, `right password ${i + 1}`);
        assert.equal((await signIn(t.app, await signInForm(t.app), 'nobody-2', 'wrong')).statusCode, 401, 'the third failure still has its slot');
        assert.equal((await signIn(t.app, await signInForm(t.app), 'nobody-3', 'wrong')).statusCode, 429);
      } finally {
        await t.app.close();
      }
    });
  });
}

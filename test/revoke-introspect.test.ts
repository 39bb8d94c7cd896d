/** POST /revoke (RFC 7009) and POST /introspect (RFC 7662) as DESIGN.md §8 says, on every store. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { LightMyRequestResponse } from 'fastify';
import type { Config } from '../src/config/types.js';
import { STORE_KINDS } from './helpers/databases.js';
import {
  appPerSuite,
  AUDIENCE,
  basic,
  exchangeCode,
  form,
  ISSUER,
  postToken,
  refresh,
  SECRET,
  signInForCode,
  testApp,
  type TestApp,
  testConfig,
} from './helpers/app.js';

const API = AUDIENCE[0] as string;
const FILES = AUDIENCE[1] as string;
const RS_SECRET = 'api-resource-server-secret';

async function config(): Promise<Config> {
  return { ...(await testConfig()), resourceServers: new Map([[API, { label: API, secret: RS_SECRET }]]) };
}

for (const kind of STORE_KINDS) {
  describe(`/introspect and /revoke on the ${kind.name} store`, { skip: kind.skip }, () => {
    let t: TestApp;
    appPerSuite(kind, async () => ({ config: await config() }), (opened) => {
      t = opened;
    });

    const introspect = (token: string, auth: string | null, extra: [string, string][] = []): Promise<LightMyRequestResponse> =>
      t.app.inject({
        method: 'POST',
        url: '/introspect',
        headers: { 'content-type': 'application/x-www-form-urlencoded', ...(auth === null ? {} : { authorization: auth }) },
        payload: form([['token', token], ...extra]),
      });
    const revoke = (token: string | undefined, auth: string | null = basic('webapp', SECRET), extra: [string, string][] = []): Promise<LightMyRequestResponse> =>
      t.app.inject({
        method: 'POST',
        url: '/revoke',
        headers: { 'content-type': 'application/x-www-form-urlencoded', ...(auth === null ? {} : { authorization: auth }) },
        payload: form([...(token === undefined ? [] : [['token', token] as [string, string]]), ...extra]),
      });
    const asResourceServer = basic(API, RS_SECRET);

    /** Tokens of one grant of webapp: an access token for `resource` and the refresh token. */
    async function tokens(resource?: string): Promise<{ access: string; refresh: string }> {
      const response = await exchangeCode(t.app, await signInForCode(t.app), resource === undefined ? [] : [resource]);
      assert.equal(response.statusCode, 200, response.body);
      return { access: response.json().access_token as string, refresh: response.json().refresh_token as string };
    }

    test('a resource server learns about a token addressed to it, with every field; a token narrowed to another server is inactive', async () => {
      const forApi = await tokens(API);
      const answer = await introspect(forApi.access, asResourceServer);
      assert.equal(answer.statusCode, 200, answer.body);
      assert.equal(answer.headers['cache-control'], 'no-store');
      const body = answer.json();
      assert.equal(body.active, true);
      assert.equal(body.aud, API);
      assert.equal(body.client_id, 'webapp');
      assert.equal(body.sub, 'alice');
      assert.equal(body.iss, ISSUER);
      assert.equal(body.scope, 'openid profile email');
      assert.equal(body.token_type, 'Bearer');
      assert.equal(body.token_use, 'access_token');
      for (const claim of ['exp', 'iat']) assert.equal(typeof body[claim], 'number');
      assert.equal(typeof body.jti, 'string');
      const forFiles = await tokens(FILES);
      assert.deepEqual((await introspect(forFiles.access, asResourceServer)).json(), { active: false });
      // A resource server never learns about refresh tokens.
      assert.deepEqual((await introspect(forApi.refresh, asResourceServer)).json(), { active: false });
    });

    test('a client learns about its own tokens only; a refresh token answers token_use refresh_token', async () => {
      const own = await tokens(API);
      const refreshAnswer = (await introspect(own.refresh, basic('webapp', SECRET))).json();
      assert.equal(refreshAnswer.active, true);
      assert.equal(refreshAnswer.token_use, 'refresh_token');
      assert.equal(refreshAnswer.client_id, 'webapp');
      assert.deepEqual(refreshAnswer.aud, AUDIENCE);
      assert.equal((await introspect(own.access, basic('webapp', SECRET), [['token_type_hint', 'access_token']])).json().active, true);
      assert.deepEqual((await introspect(own.access, basic('norefresh', SECRET))).json(), { active: false });
      assert.deepEqual((await introspect('garbage', basic('webapp', SECRET))).json(), { active: false });
    });

    test('callers that fail authentication get 401 invalid_client with WWW-Authenticate; public clients may not introspect; no token is invalid_request', async () => {
      const { access } = await tokens(API);
      for (const auth of [basic(API, 'wrong'), basic('webapp', 'wrong'), null]) {
        const answer = await introspect(access, auth);
        assert.equal(answer.statusCode, 401, String(auth));
        assert.equal(answer.json().error, 'invalid_client');
        assert.match(String(answer.headers['www-authenticate']), /^Basic/);
      }
      const publicClient = await introspect(access, null, [['client_id', 'spa']]);
      assert.equal(publicClient.statusCode, 401);
      const missing = await t.app.inject({ method: 'POST', url: '/introspect', headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: asResourceServer }, payload: '' });
      assert.equal(missing.statusCode, 400);
      assert.equal(missing.json().error, 'invalid_request');
    });

    test('a resource server may also send its label and secret in the body (client_secret_post, as the metadata offers)', async () => {
      const { access } = await tokens(API);
      const posted = await introspect(access, null, [['client_id', API], ['client_secret', RS_SECRET]]);
      assert.equal(posted.statusCode, 200, posted.body);
      assert.equal(posted.json().active, true);
      const wrong = await introspect(access, null, [['client_id', API], ['client_secret', 'wrong']]);
      assert.equal(wrong.statusCode, 401);
      assert.equal(wrong.json().error, 'invalid_client');
      const noSecret = await introspect(access, null, [['client_id', API]]);
      assert.equal(noSecret.statusCode, 401);
      const both = await introspect(access, asResourceServer, [['client_secret', RS_SECRET]]);
      assert.equal(both.statusCode, 400);
      assert.equal(both.json().error, 'invalid_request');
      const mismatch = await introspect(access, asResourceServer, [['client_id', 'webapp']]);
      assert.equal(mismatch.statusCode, 401);
    });

    test('a resource server label sent in Basic without form-encoding (as curl -u sends it) is read as the label', async () => {
      const { access } = await tokens(API);
      const unencoded = (secret: string): string => `Basic ${Buffer.from(`${API}:${secret}`).toString('base64')}`;
      const answer = await introspect(access, unencoded(RS_SECRET));
      assert.equal(answer.statusCode, 200, answer.body);
      assert.equal(answer.json().active, true);
      assert.equal((await introspect(access, unencoded('wrong'))).statusCode, 401);
    });

    test('guessing a secret at /introspect or /revoke is limited per address: 429 with Retry-After there, the right secret still works from another address', async () => {
      const limited = await testApp({ store: t.store, config: await config(), limits: { clientFailures: 3, addressFailures: 100 } });
      try {
        const { access } = await tokens(API);
        const post = (url: string, auth: string, address: string): Promise<LightMyRequestResponse> =>
          limited.app.inject({ method: 'POST', url, remoteAddress: address, headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: auth }, payload: form([['token', access]]) });
        for (const [url, id, secret] of [['/introspect', API, RS_SECRET], ['/revoke', 'webapp', SECRET]] as const) {
          for (let i = 0; i < 3; i += 1) assert.equal((await post(url, basic(id, 'guess'), '192.0.2.7')).statusCode, 401, url);
          const blocked = await post(url, basic(id, secret), '192.0.2.7');
          assert.equal(blocked.statusCode, 429, `${url}: ${blocked.body}`);
          assert.ok(Number(blocked.headers['retry-after']) > 0, url);
          const elsewhere = await post(url, basic(id, secret), '198.51.100.9');
          assert.equal(elsewhere.statusCode, 200, `${url}: ${elsewhere.body}`);
        }
      } finally {
        await limited.app.close();
      }
    });

    test('revoking a refresh token revokes its grant: refresh tokens stop, access tokens turn inactive at once', async () => {
      const grant = await tokens(API);
      const rotated = await refresh(t.app, grant.refresh);
      const latest = rotated.json().refresh_token as string;
      const answer = await revoke(latest, basic('webapp', SECRET), [['token_type_hint', 'refresh_token']]);
      assert.equal(answer.statusCode, 200, answer.body);
      assert.equal(answer.headers['cache-control'], 'no-store');
      assert.equal((await refresh(t.app, latest)).json().error, 'invalid_grant');
      assert.deepEqual((await introspect(grant.access, asResourceServer)).json(), { active: false });
      assert.deepEqual((await introspect(rotated.json().access_token as string, asResourceServer)).json(), { active: false });
    });

    test('revoking an access token revokes its grant; a client_credentials token only itself', async () => {
      const grant = await tokens(API);
      assert.equal((await revoke(grant.access)).statusCode, 200);
      assert.equal((await refresh(t.app, grant.refresh)).json().error, 'invalid_grant');

      const first = (await postToken(t.app, [['grant_type', 'client_credentials']], basic('service', SECRET))).json().access_token as string;
      const second = (await postToken(t.app, [['grant_type', 'client_credentials']], basic('service', SECRET))).json().access_token as string;
      assert.equal((await revoke(first, basic('service', SECRET))).statusCode, 200);
      assert.deepEqual((await introspect(first, asResourceServer)).json(), { active: false });
      assert.equal((await introspect(second, asResourceServer)).json().active, true);
    });

    test('another client\'s token, an unknown or malformed one: 200 and nothing changes; no token: invalid_request', async () => {
      const grant = await tokens(API);
      for (const token of [grant.refresh, grant.access]) assert.equal((await revoke(token, basic('norefresh', SECRET))).statusCode, 200);
      assert.equal((await revoke(grant.refresh, null, [['client_id', 'spa']])).statusCode, 200);
      assert.equal((await introspect(grant.access, asResourceServer)).json().active, true, 'still active');
      for (const token of ['unknown', 'a.b.c', `${grant.refresh}x`]) assert.equal((await revoke(token)).statusCode, 200);
      const missing = await revoke(undefined);
      assert.equal(missing.statusCode, 400);
      assert.equal(missing.json().error, 'invalid_request');
      const wrongSecret = await revoke(grant.refresh, basic('webapp', 'wrong'));
      assert.equal(wrongSecret.statusCode, 401);
      assert.equal((await refresh(t.app, grant.refresh)).statusCode, 200, 'the refused revocations changed nothing');
    });
  });
}

describe('metadata for revocation and introspection', () => {
  test('endpoints and auth methods', async () => {
    const t = await testApp();
    try {
      const metadata = (await t.app.inject({ url: '/.well-known/oauth-authorization-server' })).json();
      assert.equal(metadata.revocation_endpoint, `${ISSUER}/revoke`);
      assert.equal(metadata.introspection_endpoint, `${ISSUER}/introspect`);
      assert.deepEqual(metadata.revocation_endpoint_auth_methods_supported, ['client_secret_basic', 'client_secret_post', 'none', 'private_key_jwt']);
      assert.deepEqual(metadata.introspection_endpoint_auth_methods_supported, ['client_secret_basic', 'client_secret_post', 'none', 'private_key_jwt']);
    } finally {
      await t.app.close();
    }
  });
});

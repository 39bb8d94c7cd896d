/**
 * A client gets only the grants it may have (DESIGN.md §7, rules after the third outside review), over HTTP on every
 * store: a registered client with a secret mints no client_credentials token, polls no device code, and gets refresh
 * tokens only when it registered refresh_token; configured clients keep the grants they had.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import type { Config } from '../src/config/types.js';
import { STORE_KINDS } from './helpers/databases.js';
import { appPerSuite, authorizeUrl, basic, cookieJar, form, hiddenInput, PASSWORD, pkce, postToken, registerClient, SECRET, type TestApp, testConfig } from './helpers/app.js';

const MCP = 'https://mcp.example.org/mcp';
const CALLBACK = 'http://127.0.0.1:33418/callback';
const DEVICE_CODE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code';

const dynamicConfig = (): Promise<Config> =>
  testConfig({
    dynamicClients: {
      audience: [MCP],
      metadataDocuments: false,
      registration: 'open',
      scopes: ['openid', 'profile', 'mcp'],
      defaultScope: ['mcp'],
      refreshLifetimeMs: 720 * 3600_000,
      refreshReuseGraceMs: 0,
      allowPrivateAddresses: false,
    },
  });

const register = (app: FastifyInstance, body: Record<string, unknown>): Promise<{ clientId: string; secret?: string }> =>
  registerClient(app, { redirect_uris: [CALLBACK], ...body });

/** /authorize -> sign-in -> consent (allow) -> the code at the client's redirect URI. */
async function codeFor(app: FastifyInstance, clientId: string): Promise<{ code: string; verifier: string }> {
  const { verifier, challenge } = pkce();
  let url = authorizeUrl([
    ['response_type', 'code'],
    ['client_id', clientId],
    ['redirect_uri', CALLBACK],
    ['scope', 'openid mcp'],
    ['code_challenge', challenge],
    ['code_challenge_method', 'S256'],
  ]);
  let cookies = '';
  for (let hop = 0; hop < 10; hop++) {
    const page = await app.inject({ url, headers: { cookie: cookies } });
    cookies = cookieJar(cookies, page);
    let answer = page;
    if (page.statusCode === 200) {
      const action = /<form method="post" action="([^"]+)"/.exec(page.body)?.[1];
      const fields: [string, string][] = [['csrf', hiddenInput(page.body, 'csrf')], ['login', hiddenInput(page.body, 'login')]];
      fields.push(...((action === '/login' ? [['username', 'alice'], ['password', PASSWORD]] : [['decision', 'allow']]) as [string, string][]));
      answer = await app.inject({ method: 'POST', url: String(action), headers: { cookie: cookies, 'content-type': 'application/x-www-form-urlencoded' }, payload: form(fields) });
      cookies = cookieJar(cookies, answer);
    }
    assert.equal(answer.statusCode, 303, answer.body);
    const next = String(answer.headers.location);
    if (next.startsWith(CALLBACK)) return { code: new URL(next).searchParams.get('code') ?? '', verifier };
    url = next;
  }
  throw new Error('no redirect to the client after 10 hops');
}

const exchange = (app: FastifyInstance, clientId: string, grant: { code: string; verifier: string }, auth: string | null): Promise<LightMyRequestResponse> =>
  postToken(
    app,
    [['grant_type', 'authorization_code'], ...(auth === null ? [['client_id', clientId] as [string, string]] : []), ['code', grant.code], ['redirect_uri', CALLBACK], ['code_verifier', grant.verifier]],
    auth,
  );

function assertUnauthorizedClient(response: LightMyRequestResponse): void {
  assert.equal(response.statusCode, 400, response.body);
  assert.equal(response.json().error, 'unauthorized_client', response.body);
  assert.equal(response.json().access_token, undefined);
}

for (const kind of STORE_KINDS) {
  describe(`grant eligibility over HTTP on the ${kind.name} store`, { skip: kind.skip }, () => {
    let t: TestApp;
    appPerSuite(kind, async () => ({ config: await dynamicConfig() }), (opened) => {
      t = opened;
    });

    test('a client registered with client_secret_basic and grant_types [authorization_code] gets unauthorized_client for client_credentials', async () => {
      const { clientId, secret } = await register(t.app, { token_endpoint_auth_method: 'client_secret_basic', grant_types: ['authorization_code'] });
      assertUnauthorizedClient(await postToken(t.app, [['grant_type', 'client_credentials']], basic(clientId, secret as string)));
      assertUnauthorizedClient(await postToken(t.app, [['grant_type', 'client_credentials'], ['scope', 'mcp']], basic(clientId, secret as string)));
    });

    test('so does one registered with client_secret_post, with refresh_token, or without grant_types', async () => {
      for (const body of [
        { token_endpoint_auth_method: 'client_secret_post', grant_types: ['authorization_code', 'refresh_token'] },
        { token_endpoint_auth_method: 'client_secret_basic' },
      ]) {
        const { clientId, secret } = await register(t.app, body);
        assertUnauthorizedClient(await postToken(t.app, [['grant_type', 'client_credentials'], ['client_id', clientId], ['client_secret', secret as string]], null));
      }
    });

    test('a configured confidential client still gets client_credentials', async () => {
      const response = await postToken(t.app, [['grant_type', 'client_credentials'], ['scope', 'read']], basic('service', SECRET));
      assert.equal(response.statusCode, 200, response.body);
    });

    test('a registered client gets unauthorized_client for the device grant and at /device_authorization', async () => {
      const { clientId, secret } = await register(t.app, { token_endpoint_auth_method: 'client_secret_basic', grant_types: ['authorization_code'] });
      assertUnauthorizedClient(await postToken(t.app, [['grant_type', DEVICE_CODE_GRANT], ['device_code', 'x'.repeat(43)]], basic(clientId, secret as string)));
      const { clientId: publicId } = await register(t.app, {});
      assertUnauthorizedClient(await postToken(t.app, [['grant_type', DEVICE_CODE_GRANT], ['client_id', publicId], ['device_code', 'x'.repeat(43)]], null));
      const started = await t.app.inject({
        method: 'POST',
        url: '/device_authorization',
        headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic(clientId, secret as string) },
        payload: form([['scope', 'mcp']]),
      });
      assertUnauthorizedClient(started);
    });

    test('a registered client that did not register refresh_token gets no refresh token, and refresh_token is unauthorized_client', async () => {
      const { clientId, secret } = await register(t.app, { token_endpoint_auth_method: 'client_secret_basic', grant_types: ['authorization_code'] });
      const auth = basic(clientId, secret as string);
      const tokens = await exchange(t.app, clientId, await codeFor(t.app, clientId), auth);
      assert.equal(tokens.statusCode, 200, tokens.body);
      assert.equal(typeof tokens.json().access_token, 'string');
      assert.equal(tokens.json().refresh_token, undefined);
      assertUnauthorizedClient(await postToken(t.app, [['grant_type', 'refresh_token'], ['refresh_token', 'anything']], auth));

      const { clientId: publicId } = await register(t.app, { grant_types: ['authorization_code'] });
      const publicTokens = await exchange(t.app, publicId, await codeFor(t.app, publicId), null);
      assert.equal(publicTokens.statusCode, 200, publicTokens.body);
      assert.equal(publicTokens.json().refresh_token, undefined);
      assertUnauthorizedClient(await postToken(t.app, [['grant_type', 'refresh_token'], ['client_id', publicId], ['refresh_token', 'anything']], null));
    });

    test('a registered client that registered refresh_token gets and uses refresh tokens', async () => {
      const { clientId, secret } = await register(t.app, { token_endpoint_auth_method: 'client_secret_basic', grant_types: ['authorization_code', 'refresh_token'] });
      const auth = basic(clientId, secret as string);
      const tokens = await exchange(t.app, clientId, await codeFor(t.app, clientId), auth);
      assert.equal(tokens.statusCode, 200, tokens.body);
      const refreshed = await postToken(t.app, [['grant_type', 'refresh_token'], ['refresh_token', tokens.json().refresh_token as string]], auth);
      assert.equal(refreshed.statusCode, 200, refreshed.body);
      assert.equal(typeof refreshed.json().refresh_token, 'string');
    });
  });
}

/**
 * DESIGN.md §3, §6: changes to the config reach live grants on their next refresh. The store outlives the app,
 * as it outlives a restart with an edited config file.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { decodeJwt } from 'jose';
import type { Config } from '../src/config/types.js';
import { MemoryStore } from '../src/store/memory.js';
import type { FastifyInstance } from 'fastify';
import { AUDIENCE, authorizeSilently, basic, cookieJar, exchangeCode, form, postToken, refresh, SECRET, signInForCode, testApp, testConfig } from './helpers/app.js';

const API = AUDIENCE[0] as string;
const FILES = AUDIENCE[1] as string;
const RS_SECRET = 'api-resource-server-secret';

/** The test config with a resource server for API, so /introspect has a caller. */
async function withResourceServer(overrides: Partial<Config> = {}): Promise<Config> {
  return testConfig({ resourceServers: new Map([[API, { label: API, secret: RS_SECRET }]]), ...overrides });
}

/** Whether API's resource server hears `token` is active. */
async function activeForApi(app: FastifyInstance, token: string): Promise<boolean> {
  const response = await app.inject({
    method: 'POST',
    url: '/introspect',
    headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic(API, RS_SECRET) },
    payload: form([['token', token]]),
  });
  assert.equal(response.statusCode, 200, response.body);
  return response.json().active as boolean;
}

/** The status of GET /userinfo with `token`. */
async function userinfoStatus(app: FastifyInstance, token: string): Promise<number> {
  return (await app.inject({ url: '/userinfo', headers: { authorization: `Bearer ${token}` } })).statusCode;
}

/** A refresh token of webapp (scope openid profile email) issued under the test config, and the store holding it. */
async function liveGrant(resources: readonly string[] = [], scope?: string): Promise<{ store: MemoryStore; refreshToken: string; cookies: string }> {
  const store = new MemoryStore();
  const before = await testApp({ store });
  try {
    const grant = await signInForCode(before.app, { resources, ...(scope !== undefined && { scope }) });
    const response = await exchangeCode(before.app, grant);
    assert.equal(response.statusCode, 200, response.body);
    return { store, refreshToken: response.json().refresh_token as string, cookies: grant.cookies };
  } finally {
    await before.app.close();
  }
}

/** What /introspect tells webapp itself about `token`. */
async function introspectedByWebapp(app: FastifyInstance, token: string): Promise<Record<string, unknown>> {
  const response = await app.inject({
    method: 'POST',
    url: '/introspect',
    headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic('webapp', SECRET) },
    payload: form([['token', token]]),
  });
  assert.equal(response.statusCode, 200, response.body);
  return response.json() as Record<string, unknown>;
}

/** The test config with webapp changed by `change`. */
async function withWebapp(change: (webapp: NonNullable<ReturnType<Config['clients']['get']>>) => object, extra: Partial<Config> = {}): Promise<Config> {
  const config = await testConfig(extra);
  const webapp = config.clients.get('webapp');
  assert.ok(webapp);
  return { ...config, clients: new Map([...config.clients, ['webapp', { ...webapp, ...change(webapp) } as typeof webapp]]) };
}

describe('config changes reach live grants (DESIGN.md §6)', () => {
  test('a removed user: the refresh is invalid_grant, and their session no longer counts', async () => {
    const { store, refreshToken, cookies } = await liveGrant();
    const after = await testApp({ store, config: await testConfig({ users: new Map() , federations: new Map([['x', { name: 'x', issuer: 'https://idp.example', clientId: 'p', clientSecret: 's', scopes: ['openid'] }]]) }) });
    try {
      const response = await refresh(after.app, refreshToken);
      assert.equal(response.statusCode, 400);
      assert.equal(response.json().error, 'invalid_grant');
      const authorize = await authorizeSilently(after.app, cookieJar(cookies, await after.app.inject({ url: '/healthz' })));
      assert.equal(authorize.searchParams.get('error'), 'login_required');
    } finally {
      await after.app.close();
    }
  });

  test('a removed client: its access tokens, of a grant and of client_credentials, are inactive at /introspect and refused at /userinfo', async () => {
    const store = new MemoryStore();
    const before = await testApp({ store, config: await withResourceServer() });
    let personal: string;
    let machine: string;
    try {
      const exchanged = await exchangeCode(before.app, await signInForCode(before.app));
      assert.equal(exchanged.statusCode, 200, exchanged.body);
      personal = exchanged.json().access_token as string;
      const issued = await postToken(before.app, [['grant_type', 'client_credentials']], basic('service', SECRET));
      assert.equal(issued.statusCode, 200, issued.body);
      machine = issued.json().access_token as string;
      assert.equal(await activeForApi(before.app, personal), true);
      assert.equal(await activeForApi(before.app, machine), true);
      assert.equal(await userinfoStatus(before.app, personal), 200);
    } finally {
      await before.app.close();
    }
    const clients = new Map([...(await testConfig()).clients].filter(([id]) => id !== 'webapp' && id !== 'service'));
    const after = await testApp({ store, config: await withResourceServer({ clients }) });
    try {
      assert.equal(await activeForApi(after.app, personal), false, 'a token of a removed client is inactive');
      assert.equal(await activeForApi(after.app, machine), false, 'a client_credentials token of a removed client is inactive');
      assert.equal(await userinfoStatus(after.app, personal), 401);
    } finally {
      await after.app.close();
    }
  });

  test('a removed user: their access tokens are inactive at /introspect and refused at /userinfo', async () => {
    const store = new MemoryStore();
    const before = await testApp({ store, config: await withResourceServer() });
    let token: string;
    try {
      const exchanged = await exchangeCode(before.app, await signInForCode(before.app));
      token = exchanged.json().access_token as string;
      assert.equal(await userinfoStatus(before.app, token), 200);
    } finally {
      await before.app.close();
    }
    const after = await testApp({ store, config: await withResourceServer({ users: new Map() }) });
    try {
      assert.equal(await activeForApi(after.app, token), false);
      const response = await after.app.inject({ url: '/userinfo', headers: { authorization: `Bearer ${token}` } });
      assert.equal(response.statusCode, 401);
      assert.match(response.headers['www-authenticate'] as string, /error="invalid_token"/);
      assert.equal(response.json().error_description, 'the access token is no longer valid');
    } finally {
      await after.app.close();
    }
  });

  test('a narrowed audience: aud never names a server the client no longer holds; a grant left with none is invalid_grant', async () => {
    const whole = await liveGrant();
    const narrowed = await testApp({ store: whole.store, config: await withWebapp((webapp) => ({ audience: webapp.audience.filter((entry) => entry !== FILES) })) });
    try {
      const response = await refresh(narrowed.app, whole.refreshToken);
      assert.equal(response.statusCode, 200, response.body);
      const aud = decodeJwt(response.json().access_token as string).aud as string[];
      assert.ok(!aud.includes(FILES) && aud.includes(API), JSON.stringify(aud));
      const named = await refresh(narrowed.app, response.json().refresh_token as string, [FILES]);
      assert.equal(named.json().error, 'invalid_target');
    } finally {
      await narrowed.app.close();
    }

    const bound = await liveGrant([FILES]);
    const without = await testApp({ store: bound.store, config: await withWebapp((webapp) => ({ audience: webapp.audience.filter((entry) => entry !== FILES) })) });
    try {
      const response = await refresh(without.app, bound.refreshToken);
      assert.equal(response.statusCode, 400);
      assert.equal(response.json().error, 'invalid_grant');
    } finally {
      await without.app.close();
    }
  });

  test('/introspect of a refresh token tells what a refresh would use now: the narrowed aud and scope, or inactive', async () => {
    const whole = await liveGrant();
    const bound = await liveGrant([FILES]);
    const narrowed = await testApp({
      store: whole.store,
      config: await withWebapp((webapp) => ({ audience: webapp.audience.filter((entry) => entry !== FILES), scopes: ['openid', 'profile'] })),
    });
    try {
      const answer = await introspectedByWebapp(narrowed.app, whole.refreshToken);
      assert.equal(answer.active, true, JSON.stringify(answer));
      const aud = typeof answer.aud === 'string' ? [answer.aud] : (answer.aud as string[]);
      assert.ok(!aud.includes(FILES) && aud.includes(API), JSON.stringify(aud));
      assert.equal(answer.scope, 'openid profile');
    } finally {
      await narrowed.app.close();
    }
    const without = await testApp({ store: bound.store, config: await withWebapp((webapp) => ({ audience: webapp.audience.filter((entry) => entry !== FILES) })) });
    try {
      // A refresh of this grant is invalid_grant, so its token is not active.
      assert.deepEqual(await introspectedByWebapp(without.app, bound.refreshToken), { active: false });
      assert.equal((await refresh(without.app, bound.refreshToken)).json().error, 'invalid_grant');
    } finally {
      await without.app.close();
    }
  });

  test('a grant for the provider alone that loses its provider scope is invalid_grant, never widened to the whole audience', async () => {
    const provider = await liveGrant([], 'openid ssh');
    const before = await testApp({ store: provider.store });
    try {
      const first = await refresh(before.app, provider.refreshToken);
      assert.equal(first.statusCode, 200, first.body);
      assert.equal(decodeJwt(first.json().access_token as string).aud, (await testConfig()).baseUrl);
      provider.refreshToken = first.json().refresh_token as string;
    } finally {
      await before.app.close();
    }
    const after = await testApp({ store: provider.store, config: await withWebapp(() => ({ scopes: ['openid', 'profile', 'email'] })) });
    try {
      assert.deepEqual(await introspectedByWebapp(after.app, provider.refreshToken), { active: false });
      const response = await refresh(after.app, provider.refreshToken);
      assert.equal(response.statusCode, 400, response.body);
      assert.deepEqual(response.json(), { error: 'invalid_grant', error_description: 'none of the resources of this grant may still be asked for by this client' });
    } finally {
      await after.app.close();
    }
  });

  test('narrowed scopes are dropped from the tokens of a live grant', async () => {
    const { store, refreshToken } = await liveGrant();
    const after = await testApp({ store, config: await withWebapp(() => ({ scopes: ['openid', 'profile'] })) });
    try {
      const response = await refresh(after.app, refreshToken);
      assert.equal(response.statusCode, 200, response.body);
      assert.equal(response.json().scope, 'openid profile');
      assert.equal(decodeJwt(response.json().access_token as string).scope, 'openid profile');
      const asked = await refresh(after.app, response.json().refresh_token as string, [], [['scope', 'email']]);
      assert.equal(asked.json().error, 'invalid_scope');
    } finally {
      await after.app.close();
    }
  });
});

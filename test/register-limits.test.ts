/**
 * POST /register's limits (DESIGN.md §7, rules after the third outside review), on every store: an over-size body
 * gets 413 stating the real limit (16 KiB, not the form endpoints' 64 KiB), and a NUL in any JSON string of the
 * body is 400 invalid_client_metadata, never a 500 and never stored.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import type { Config } from '../src/config/types.js';
import { STORE_KINDS, type OpenedStore } from './helpers/databases.js';
import { basic, postToken, SECRET, testApp, testConfig, type TestApp } from './helpers/app.js';

const CALLBACK = 'http://127.0.0.1:33418/callback';

const dynamicConfig = (): Promise<Config> =>
  testConfig({
    dynamicClients: {
      audience: ['https://mcp.example.org/mcp'],
      metadataDocuments: false,
      registration: 'open',
      scopes: ['openid', 'profile', 'mcp'],
      defaultScope: ['mcp'],
      refreshReuseGraceMs: 0,
      allowPrivateAddresses: false,
    },
  });

const registerRaw = (app: FastifyInstance, payload: string): Promise<LightMyRequestResponse> =>
  app.inject({ method: 'POST', url: '/register', headers: { 'content-type': 'application/json' }, payload });

const register = (app: FastifyInstance, body: unknown): Promise<LightMyRequestResponse> => registerRaw(app, JSON.stringify(body));


for (const kind of STORE_KINDS) {
  describe(`POST /register limits on the ${kind.name} store`, { skip: kind.skip }, () => {
    let t: TestApp;
    let opened: OpenedStore;
    const registeredRows = async (): Promise<number | undefined> => opened.inspector?.rows('registered_clients');

    before(async () => {
      opened = await kind.open();
      t = await testApp({ store: opened.store, config: await dynamicConfig() });
    });
    after(async () => {
      await t.app.close();
      await opened.store.close();
      await opened.cleanup();
    });

    test('a 20 KB body gets 413 whose description states the 16 KiB limit', async () => {
      const before = await registeredRows();
      const response = await register(t.app, { redirect_uris: [CALLBACK], client_name: 'x', padding: 'p'.repeat(20_000) });
      assert.equal(response.statusCode, 413, response.body);
      assert.equal(response.json().error, 'invalid_request');
      assert.match(response.json().error_description, /16 KiB/);
      assert.doesNotMatch(response.json().error_description, /64 KiB/);
      assert.equal(await registeredRows(), before, 'nothing stored');
    });

    test('a body just under 16 KiB is read (and judged on its fields)', async () => {
      const response = await register(t.app, { redirect_uris: [CALLBACK], padding: 'p'.repeat(16 * 1024 - 100) });
      assert.equal(response.statusCode, 201, response.body);
    });

    test('the form endpoints keep stating their own 64 KiB', async () => {
      const response = await postToken(t.app, [['grant_type', 'client_credentials'], ['scope', 'r'.repeat(70_000)]], basic('service', SECRET));
      assert.equal(response.statusCode, 413, response.body);
      assert.match(response.json().error_description, /64 KiB/);
    });

    test('a NUL in any JSON string of the body is 400 invalid_client_metadata, and nothing is stored', async () => {
      const bodies: Record<string, unknown>[] = [
        { redirect_uris: [CALLBACK], client_name: 'Evil\u0000Host' },
        { redirect_uris: [`${CALLBACK}\u0000`] },
        { redirect_uris: [CALLBACK, 'https://app.example.org/cb\u0000x'] },
        { redirect_uris: [CALLBACK], scope: 'mcp\u0000' },
        { redirect_uris: [CALLBACK], client_uri: 'https://app.example.org/\u0000' },
        { redirect_uris: [CALLBACK], logo_uri: 'https://app.example.org/logo\u0000.png' },
        { redirect_uris: [CALLBACK], token_endpoint_auth_method: 'none\u0000' },
        { redirect_uris: [CALLBACK], grant_types: ['authorization_code\u0000'] },
        { redirect_uris: [CALLBACK], software_id: '\u0000' },
        { redirect_uris: [CALLBACK], contacts: [{ deep: ['ok', 'n\u0000o'] }] },
        { redirect_uris: [CALLBACK], 'na\u0000me': 'x' },
      ];
      const before = await registeredRows();
      for (const body of bodies) {
        const response = await register(t.app, body);
        assert.equal(response.statusCode, 400, `${JSON.stringify(body)}: ${response.body}`);
        assert.equal(response.json().error, 'invalid_client_metadata', JSON.stringify(body));
        assert.match(response.json().error_description, /NUL/);
      }
      assert.equal(await registeredRows(), before, 'nothing stored');
      const named = (await register(t.app, { redirect_uris: [CALLBACK], client_name: 'Evil\u0000Host' })).json().error_description as string;
      assert.match(named, /^client_name /, 'the description names the field');
    });

    test('a NUL deep inside nested arrays is found too (the walk does not recurse), never a 500', async () => {
      const deep = `{"redirect_uris":["${CALLBACK}"],"x":${'['.repeat(7000)}"\\u0000"${']'.repeat(7000)}}`;
      const response = await registerRaw(t.app, deep);
      assert.equal(response.statusCode, 400, response.body);
      assert.equal(response.json().error, 'invalid_client_metadata');
    });
  });
}

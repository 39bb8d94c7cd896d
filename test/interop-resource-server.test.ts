/**
 * A real resource-server library in its default settings: express-oauth2-jwt-bearer reads Pinpoint's discovery
 * (id_token_signing_alg_values_supported must list the access tokens' ES256) and JWKS, and protects an Express route.
 */
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { after, before, describe, test } from 'node:test';
import express from 'express';
import { auth } from 'express-oauth2-jwt-bearer';
import { AUDIENCE, exchangeCode, signInForCode, testApp, testConfig, type TestApp } from './helpers/app.js';
import { freePort } from './helpers/upstream.js';

const API = AUDIENCE[0] as string;
const FILES = AUDIENCE[1] as string;

describe('express-oauth2-jwt-bearer protecting a route with Pinpoint as issuer', () => {
  let pinpoint: TestApp;
  let resourceServer: Server;
  let resourceUrl: string;

  before(async () => {
    const port = await freePort();
    const issuer = `http://127.0.0.1:${port}`;
    pinpoint = await testApp({ config: await testConfig({ baseUrl: issuer, listen: { host: '127.0.0.1', port } }) });
    await pinpoint.app.listen({ host: '127.0.0.1', port });
    const app = express();
    // Defaults only: the issuer's discovery document, its JWKS, and this server's audience.
    app.get('/data', auth({ issuerBaseURL: issuer, audience: API }), (_request, response) => {
      response.json({ ok: true });
    });
    resourceServer = await new Promise<Server>((resolve) => {
      const server = app.listen(0, '127.0.0.1', () => resolve(server));
    });
    resourceUrl = `http://127.0.0.1:${(resourceServer.address() as AddressInfo).port}/data`;
  });
  after(async () => {
    await new Promise<void>((resolve) => resourceServer.close(() => resolve()));
    await pinpoint.app.close();
  });

  async function tokenFor(resource: string): Promise<string> {
    const grant = await signInForCode(pinpoint.app, { resources: [API, FILES] });
    const response = await exchangeCode(pinpoint.app, grant, [resource]);
    assert.equal(response.statusCode, 200, response.body);
    return response.json().access_token as string;
  }

  test('a token for its audience passes; one narrowed to another server gets 401', async () => {
    const good = await fetch(resourceUrl, { headers: { authorization: `Bearer ${await tokenFor(API)}` } });
    assert.equal(good.status, 200, await good.clone().text());
    assert.deepEqual(await good.json(), { ok: true });
    const other = await fetch(resourceUrl, { headers: { authorization: `Bearer ${await tokenFor(FILES)}` } });
    assert.equal(other.status, 401);
    const none = await fetch(resourceUrl);
    assert.equal(none.status, 401);
  });
});

/**
 * DESIGN.md §7 (rules added after the third outside review): a redirect URI whose port is not 1–65535 or that does not
 * parse is the /authorize error page (HTTP 400), never a 500 — also where a loopback URI matches on any port (§3, §9).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { isUsableRedirectUri, redirectUriMatches } from '../src/policy/redirect-uri.js';
import { authorizeUrl, client, pkce, testApp, testConfig, type TestApp } from './helpers/app.js';

/** Ports no browser can be sent to, written as a client could send them. */
const BAD_PORTS = ['99999', '65536', '0', '00', '4294967297'];

function authorize(app: FastifyInstance, clientId: string, redirectUri: string, extra: readonly (readonly [string, string])[] = []): Promise<LightMyRequestResponse> {
  return app.inject({
    url: authorizeUrl([
      ['response_type', 'code'],
      ['client_id', clientId],
      ['redirect_uri', redirectUri],
      ['scope', 'openid'],
      ['state', 'st'],
      ['code_challenge', pkce().challenge],
      ['code_challenge_method', 'S256'],
      ...extra,
    ]),
  });
}

function assertErrorPage(response: LightMyRequestResponse, what: string): void {
  assert.equal(response.statusCode, 400, `${what}: ${response.statusCode} ${response.body.slice(0, 300)}`);
  assert.equal(response.headers.location, undefined, `${what}: no redirect`);
  assert.match(String(response.headers['content-type']), /^text\/html/, what);
  assert.match(response.body, /invalid_request/, what);
}

describe('/authorize with a loopback redirect URI on a port that does not exist', () => {
  let t: TestApp;
  let registered = '';
  before(async () => {
    const base = await testConfig();
    const native = client({ clientId: 'native', redirectUris: ['http://127.0.0.1/cb', 'http://[::1]/cb', 'http://localhost/cb'] });
    t = await testApp({
      config: {
        ...base,
        clients: new Map([...base.clients, ['native', native]]),
        dynamicClients: {
          audience: ['https://mcp.example.org/mcp'],
          metadataDocuments: false,
          registration: 'open',
          scopes: ['openid', 'profile', 'mcp'],
          refreshReuseGraceMs: 0,
          allowPrivateAddresses: false,
        },
      },
    });
    const registration = await t.app.inject({
      method: 'POST',
      url: '/register',
      headers: { 'content-type': 'application/json' },
      payload: JSON.stringify({ redirect_uris: ['http://127.0.0.1:33418/cb', 'http://localhost/cb'], client_name: 'Native host' }),
    });
    assert.equal(registration.statusCode, 201, registration.body);
    registered = registration.json().client_id as string;
  });
  after(async () => t.app.close());

  test('a configured client (loopback URI registered without a port): the error page, HTTP 400, for every bad port and loopback host', async () => {
    for (const host of ['127.0.0.1', '[::1]', 'localhost']) {
      for (const port of BAD_PORTS) assertErrorPage(await authorize(t.app, 'native', `http://${host}:${port}/cb`), `${host}:${port}`);
    }
    // A request that would be refused by a redirect (no response_type) gets the page too: there is nowhere to redirect.
    assertErrorPage(await authorize(t.app, 'native', 'http://127.0.0.1:99999/cb', [['prompt', 'none']]), 'prompt=none');
    const missingType = await t.app.inject({ url: authorizeUrl([['client_id', 'native'], ['redirect_uri', 'http://127.0.0.1:99999/cb'], ['state', 'st']]) });
    assertErrorPage(missingType, 'no response_type');
  });

  test('a registered dynamic client (loopback URIs match on any port): the error page, HTTP 400, for every bad port', async () => {
    for (const uri of ['http://127.0.0.1:%/cb', 'http://localhost:%/cb']) {
      for (const port of BAD_PORTS) assertErrorPage(await authorize(t.app, registered, uri.replace('%', port)), uri.replace('%', port));
    }
  });

  test('ports 1 and 65535 still work: on to sign-in', async () => {
    for (const port of ['1', '65535']) {
      const configured = await authorize(t.app, 'native', `http://127.0.0.1:${port}/cb`);
      assert.equal(configured.statusCode, 303, configured.body);
      assert.match(String(configured.headers.location), /^\/login\?login=/);
      const dynamic = await authorize(t.app, registered, `http://127.0.0.1:${port}/cb`);
      assert.equal(dynamic.statusCode, 303, dynamic.body);
      assert.match(String(dynamic.headers.location), /^\/login\?login=/);
    }
  });

  test('registration refuses a redirect URI on port 0', async () => {
    const response = await t.app.inject({
      method: 'POST',
      url: '/register',
      headers: { 'content-type': 'application/json' },
      payload: JSON.stringify({ redirect_uris: ['http://127.0.0.1:0/cb'] }),
    });
    assert.equal(response.statusCode, 400, response.body);
    assert.equal(response.json().error, 'invalid_redirect_uri');
  });
});

describe('redirect URI matching never accepts a URI no browser can be sent to', () => {
  test('out-of-range, zero and unparsable ports do not match, even where any port would', () => {
    for (const port of BAD_PORTS) {
      assert.equal(redirectUriMatches(['http://127.0.0.1/cb'], `http://127.0.0.1:${port}/cb`, 'when-registered-without-port'), false, port);
      assert.equal(redirectUriMatches(['http://127.0.0.1:5000/cb'], `http://127.0.0.1:${port}/cb`, 'always'), false, port);
    }
    assert.equal(redirectUriMatches(['http://127.0.0.1:0/cb'], 'http://127.0.0.1:0/cb', 'always'), false, 'not even registered exactly');
    assert.equal(isUsableRedirectUri('http://127.0.0.1:65535/cb'), true);
    assert.equal(isUsableRedirectUri('com.example.app:/cb'), true);
    assert.equal(isUsableRedirectUri('http://[::1:99/cb'), false);
  });
});

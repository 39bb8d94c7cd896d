/** `trusted_proxies` (DESIGN.md §3): X-Forwarded-For and X-Request-Id are believed from those hops only, in every tls mode. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { Config } from '../src/config/types.js';
import { basic, postToken, testApp, testConfig } from './helpers/app.js';

/** Four failing requests claiming the forwarded addresses given; inject's socket address is 127.0.0.1. */
async function failuresUntilLimited(overrides: Partial<Config>, forwarded: readonly string[]): Promise<number[]> {
  const t = await testApp({ config: await testConfig(overrides), limits: { addressFailures: 2 } });
  try {
    const statuses: number[] = [];
    for (const address of forwarded) {
      const response = await t.app.inject({
        method: 'POST',
        url: '/token',
        headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-forwarded-for': address, authorization: basic(`nobody-${statuses.length}`, 'wrong') },
        payload: 'grant_type=client_credentials',
      });
      statuses.push(response.statusCode);
    }
    return statuses;
  } finally {
    await t.app.close();
  }
}

const ADDRESSES = ['203.0.113.7', '203.0.113.7', '203.0.113.7', '198.51.100.9'];

describe('behind a reverse proxy', () => {
  test('a trusted proxy: failures are counted per forwarded address, so another address is not limited', async () => {
    assert.deepEqual(await failuresUntilLimited({ tls: { mode: 'proxy' }, trustedProxies: ['127.0.0.0/8'] }, ADDRESSES), [401, 401, 429, 401]);
  });

  test('mode proxy without trusted_proxies: X-Forwarded-For is ignored, every request counts against the socket address', async () => {
    assert.deepEqual(await failuresUntilLimited({ tls: { mode: 'proxy' } }, ADDRESSES), [401, 401, 429, 429]);
  });

  test('mode off with a trusted proxy: forwarded headers are believed in every tls mode', async () => {
    assert.deepEqual(await failuresUntilLimited({ trustedProxies: ['127.0.0.1'] }, ADDRESSES), [401, 401, 429, 401]);
  });

  test('a client cannot pick its address by writing the left-most hop: the right-most untrusted hop counts', async () => {
    const forged = ['10.9.9.1, 203.0.113.7', '10.9.9.2, 203.0.113.7', '10.9.9.3, 203.0.113.7', '10.9.9.4, 198.51.100.9'];
    assert.deepEqual(await failuresUntilLimited({ tls: { mode: 'proxy' }, trustedProxies: ['127.0.0.1'] }, forged), [401, 401, 429, 401]);
  });

  test('a proxy that is not trusted is one hop like any client', async () => {
    // The socket peer (127.0.0.1) is not in the list, so nothing it forwards is believed.
    assert.deepEqual(await failuresUntilLimited({ tls: { mode: 'proxy' }, trustedProxies: ['10.0.0.0/8'] }, ADDRESSES), [401, 401, 429, 429]);
  });

  test('X-Request-Id: kept from a trusted proxy, replaced when a client sends it', async () => {
    for (const [trustedProxies, kept] of [[['127.0.0.1'], true], [[], false]] as const) {
      const t = await testApp({ config: await testConfig({ trustedProxies }) });
      try {
        const response = await t.app.inject({ url: '/healthz', headers: { 'x-request-id': 'proxy-id-123' } });
        assert.equal(response.headers['x-request-id'] === 'proxy-id-123', kept, String(trustedProxies));
      } finally {
        await t.app.close();
      }
    }
  });

  test('mode proxy: a token request and metadata through a trusted proxy work as usual', async () => {
    const t = await testApp({ config: await testConfig({ baseUrl: 'https://auth.example.org', tls: { mode: 'proxy' }, trustedProxies: ['127.0.0.1'] }) });
    try {
      const response = await postToken(t.app, [['grant_type', 'client_credentials']], basic('service', 'webapp-secret'));
      assert.equal(response.statusCode, 200, response.body);
      const metadata = await t.app.inject({ url: '/.well-known/openid-configuration', headers: { 'x-forwarded-proto': 'https', 'x-forwarded-host': 'auth.example.org' } });
      assert.equal(metadata.json().issuer, 'https://auth.example.org');
    } finally {
      await t.app.close();
    }
  });
});

/** tls mode "proxy": the proxy's X-Forwarded-For is the client address (rate limits); with mode "off" it is ignored. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { basic, postToken, testApp, testConfig } from './helpers/app.js';

async function failuresUntilLimited(mode: 'off' | 'proxy'): Promise<{ limitedFor: string[]; statuses: number[] }> {
  const t = await testApp({ config: await testConfig({ tls: { mode } }), limits: { failuresPerWindow: 2 } });
  try {
    const statuses: number[] = [];
    const limitedFor: string[] = [];
    for (const address of ['203.0.113.7', '203.0.113.7', '203.0.113.7', '198.51.100.9']) {
      const response = await t.app.inject({
        method: 'POST',
        url: '/token',
        headers: {
          'content-type': 'application/x-www-form-urlencoded',
          'x-forwarded-for': address,
          authorization: basic(`nobody-${statuses.length}`, 'wrong'),
        },
        payload: 'grant_type=client_credentials',
      });
      statuses.push(response.statusCode);
      if (response.statusCode === 429) limitedFor.push(address);
    }
    return { limitedFor, statuses };
  } finally {
    await t.app.close();
  }
}

describe('behind a reverse proxy', () => {
  test('mode proxy: failures are counted per forwarded address, so another address is not limited', async () => {
    const { statuses } = await failuresUntilLimited('proxy');
    assert.deepEqual(statuses, [401, 401, 429, 401]);
  });

  test('mode off: X-Forwarded-For is not trusted, so every request counts against the socket address', async () => {
    const { statuses } = await failuresUntilLimited('off');
    assert.deepEqual(statuses, [401, 401, 429, 429]);
  });

  test('mode proxy: a token request through the proxy works as usual', async () => {
    const t = await testApp({ config: await testConfig({ baseUrl: 'https://auth.example.org', tls: { mode: 'proxy' } }) });
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

/** policy/grant-eligibility.ts row by row (DESIGN.md §7 "A client gets only the grants it may have"), and each grant's check asking it. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import {
  askableScopes,
  DEVICE_CODE_GRANT,
  TOKEN_EXCHANGE_GRANT,
  grantRefusal,
  mayUseGrant,
  refreshLifetimeOf,
  type GrantEligibleClient,
  type TokenGrantType,
} from '../src/policy/grant-eligibility.js';
import { checkCodeExchangeRequest, checkDevicePollRequest, checkRefreshRequest, decideClientCredentials, narrowGrant, type PolicyClient } from '../src/policy/token-requests.js';

const ALL_GRANTS: readonly TokenGrantType[] = ['authorization_code', 'refresh_token', 'client_credentials', DEVICE_CODE_GRANT, TOKEN_EXCHANGE_GRANT];
const HOUR = 3_600_000;
const CALLBACK = ['https://app.example.org/cb'];

/** The grants `client` may use, in ALL_GRANTS order. */
const allowed = (client: GrantEligibleClient): TokenGrantType[] => ALL_GRANTS.filter((grantType) => mayUseGrant(client, grantType));

describe('configured clients', () => {
  test('confidential with redirect URIs and refresh_lifetime: code, refresh, client_credentials', () => {
    assert.deepEqual(allowed({ kind: 'confidential', redirectUris: CALLBACK, refreshLifetimeMs: HOUR }), ['authorization_code', 'refresh_token', 'client_credentials']);
  });
  test('confidential without refresh_lifetime: no refresh_token', () => {
    assert.deepEqual(allowed({ kind: 'confidential', redirectUris: CALLBACK }), ['authorization_code', 'client_credentials']);
  });
  test('confidential without redirect URIs (a service): client_credentials only', () => {
    assert.deepEqual(allowed({ kind: 'confidential', redirectUris: [] }), ['client_credentials']);
  });
  test('public: code and, with refresh_lifetime, refresh; never client_credentials', () => {
    assert.deepEqual(allowed({ kind: 'public', redirectUris: CALLBACK, refreshLifetimeMs: HOUR }), ['authorization_code', 'refresh_token']);
    assert.deepEqual(allowed({ kind: 'public', redirectUris: CALLBACK }), ['authorization_code']);
  });
  test('device: the device grant and, with refresh_lifetime, refresh', () => {
    assert.deepEqual(allowed({ kind: 'device', redirectUris: [], refreshLifetimeMs: HOUR }), ['refresh_token', DEVICE_CODE_GRANT]);
    assert.deepEqual(allowed({ kind: 'device', redirectUris: [] }), [DEVICE_CODE_GRANT]);
  });
  test('token exchange: nobody yet (no client has a token_exchange block)', () => {
    for (const kind of ['confidential', 'public', 'device'] as const) {
      assert.equal(grantRefusal({ kind, redirectUris: CALLBACK, refreshLifetimeMs: HOUR }, TOKEN_EXCHANGE_GRANT)?.code, 'unauthorized_client');
    }
  });
});

describe('dynamic clients (registered or by metadata document)', () => {
  test('registered with a secret and grant_types [authorization_code]: the code grant only', () => {
    assert.deepEqual(allowed({ kind: 'confidential', redirectUris: CALLBACK, refreshLifetimeMs: HOUR, dynamic: { grantTypes: ['authorization_code'] } }), ['authorization_code']);
  });
  test('registered with a secret and refresh_token: code and refresh, never client_credentials', () => {
    const client: GrantEligibleClient = { kind: 'confidential', redirectUris: CALLBACK, refreshLifetimeMs: HOUR, dynamic: { grantTypes: ['authorization_code', 'refresh_token'] } };
    assert.deepEqual(allowed(client), ['authorization_code', 'refresh_token']);
    const refusal = grantRefusal(client, 'client_credentials');
    assert.equal(refusal?.code, 'unauthorized_client');
    assert.equal(refusal?.status, 400);
  });
  test('public, no grant_types given (a metadata document): code and refresh', () => {
    assert.deepEqual(allowed({ kind: 'public', redirectUris: CALLBACK, refreshLifetimeMs: HOUR, dynamic: {} }), ['authorization_code', 'refresh_token']);
  });
  test('refresh_token declared but the block has no refresh_lifetime: no refresh', () => {
    assert.deepEqual(allowed({ kind: 'public', redirectUris: CALLBACK, dynamic: { grantTypes: ['authorization_code', 'refresh_token'] } }), ['authorization_code']);
  });
  test('a document listing client_credentials, the device grant and token exchange gets none of them', () => {
    const grantTypes = ['authorization_code', 'client_credentials', DEVICE_CODE_GRANT, TOKEN_EXCHANGE_GRANT];
    for (const kind of ['confidential', 'public', 'device'] as const) {
      const client: GrantEligibleClient = { kind, redirectUris: CALLBACK, refreshLifetimeMs: HOUR, dynamic: { grantTypes } };
      for (const grantType of ['client_credentials', DEVICE_CODE_GRANT, TOKEN_EXCHANGE_GRANT] as const) {
        assert.equal(grantRefusal(client, grantType)?.code, 'unauthorized_client', `${kind} ${grantType}`);
      }
    }
  });
  test('every combination: a dynamic client never gets more than code and refresh', () => {
    const lists = [undefined, [], ['authorization_code'], ['refresh_token'], ['authorization_code', 'refresh_token'], ['client_credentials', DEVICE_CODE_GRANT]];
    for (const kind of ['confidential', 'public', 'device'] as const) {
      for (const grantTypes of lists) {
        for (const refreshLifetimeMs of [undefined, HOUR]) {
          const client: GrantEligibleClient = { kind, redirectUris: CALLBACK, ...(refreshLifetimeMs !== undefined && { refreshLifetimeMs }), dynamic: grantTypes === undefined ? {} : { grantTypes } };
          const got = allowed(client).filter((grantType) => grantType !== 'authorization_code' && grantType !== 'refresh_token');
          assert.deepEqual(got, [], JSON.stringify(client));
        }
      }
    }
  });
});

describe('refreshLifetimeOf: whoever issues a refresh token asks the same rule', () => {
  test('the lifetime when refresh_token is allowed, else none', () => {
    assert.equal(refreshLifetimeOf({ kind: 'public', redirectUris: CALLBACK, refreshLifetimeMs: HOUR }), HOUR);
    assert.equal(refreshLifetimeOf({ kind: 'public', redirectUris: CALLBACK }), undefined);
    assert.equal(refreshLifetimeOf({ kind: 'public', redirectUris: CALLBACK, refreshLifetimeMs: HOUR, dynamic: { grantTypes: ['authorization_code'] } }), undefined);
    assert.equal(refreshLifetimeOf({ kind: 'public', redirectUris: CALLBACK, refreshLifetimeMs: HOUR, dynamic: { grantTypes: ['authorization_code', 'refresh_token'] } }), HOUR);
  });
});

describe("each grant's check asks grant eligibility", () => {
  const registered: PolicyClient = {
    clientId: 'dyn_x',
    kind: 'confidential',
    audience: ['https://mcp.example.org/mcp'],
    redirectUris: CALLBACK,
    scopes: ['mcp'],
    refreshLifetimeMs: HOUR,
    dynamic: { grantTypes: ['authorization_code'] },
  };
  const issuer = 'https://auth.example.org';

  test('client_credentials of a registered client: unauthorized_client, before its scope is looked at', () => {
    const decision = decideClientCredentials({ client: registered, issuer, requestedScope: ['mcp'], requested: [] });
    assert.equal(decision.ok ? 'ok' : decision.error.code, 'unauthorized_client');
  });
  test('refresh of a client that did not register refresh_token: unauthorized_client', () => {
    const decision = checkRefreshRequest(registered, [], 'token', []);
    assert.equal(decision.ok ? 'ok' : decision.error.code, 'unauthorized_client');
  });
  test('a device poll by a registered client: unauthorized_client', () => {
    const decision = checkDevicePollRequest(registered, [], 'device-code');
    assert.equal(decision.ok ? 'ok' : decision.error.code, 'unauthorized_client');
  });
  test('the code exchange of a registered client passes the eligibility check', () => {
    const decision = checkCodeExchangeRequest(registered, [], { code: 'c', redirectUri: CALLBACK[0] as string, verifier: 'v'.repeat(43) });
    assert.equal(decision.ok, true);
  });
});

describe('offline_access (DESIGN.md §9): askable by clients that get refresh tokens, and kept only while they do', () => {
  const webapp: PolicyClient = { clientId: 'webapp', kind: 'confidential', audience: ['https://api.example.org/'], redirectUris: CALLBACK, scopes: ['openid', 'profile'], refreshLifetimeMs: HOUR };
  const issuer = 'https://auth.example.org';
  const grant = { id: 'g1', clientId: 'webapp', scope: ['openid', 'offline_access'], resources: ['https://api.example.org/'] };

  test('askable: the client\'s scopes, plus offline_access only with refresh tokens (a dynamic one that did not register refresh_token gets none)', () => {
    assert.deepEqual(askableScopes(webapp), ['openid', 'profile', 'offline_access']);
    assert.deepEqual(askableScopes({ ...webapp, refreshLifetimeMs: undefined }), ['openid', 'profile']);
    assert.deepEqual(askableScopes({ ...webapp, dynamic: { grantTypes: ['authorization_code'] } }), ['openid', 'profile']);
  });
  test('a refresh keeps offline_access in the grant while the client gets refresh tokens', () => {
    const kept = narrowGrant(grant, webapp, issuer, true);
    assert.ok(kept.ok);
    assert.deepEqual(kept.value.scope, ['openid', 'offline_access']);
    assert.equal(kept.value, grant, 'nothing dropped: the grant itself');
  });
  test('a client whose refresh_lifetime was removed from the config loses offline_access from the grant', () => {
    const narrowed = narrowGrant(grant, { ...webapp, refreshLifetimeMs: undefined }, issuer, true);
    assert.ok(narrowed.ok);
    assert.deepEqual(narrowed.value.scope, ['openid']);
  });
});

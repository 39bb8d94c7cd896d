/** One named test per row of DESIGN.md §5 (rule table, error texts, order of checks, provider scopes) and the §4 /userinfo row. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { OAuthError } from '../src/policy/oauth-error.js';
import {
  PROVIDER_SCOPES,
  audienceClaim,
  decideAuthorizeResources,
  decideTokenAudience,
  firstAppearances,
  isAddressedToProvider,
  isNameable,
  providerScopeOf,
  resourceRefusedByGrant,
  type Audience,
  type GrantType,
  type ResourceClient,
} from '../src/policy/resource.js';
import type { Decision } from '../src/policy/decision.js';
import { decideRefreshScope, decideRequestedScope, parseScope } from '../src/policy/scope.js';

const ISSUER = 'https://auth.example.org';
const API = 'https://api.example.org/';
const FILES = 'https://files.example.org';
const LOGICAL = 'billing';
const FRAGMENT = 'https://docs.example.org/#v2';
const QUERY = 'https://reports.example.org/q?tenant=7';

const webapp: ResourceClient = { clientId: 'webapp', audience: [API, FILES, LOGICAL, FRAGMENT, QUERY] };
const tv: ResourceClient = { clientId: 'tv', audience: [API] };

// The exact texts of DESIGN.md §5, written out here so the module's own constants are checked, not trusted.
const notRequestableText = (resource: string): string => `resource "${resource}" is not one this client may ask a token for`;
const notInAuthorizationText = (resource: string): string => `resource "${resource}" was not part of the authorization`;
const refusedByGrantText = 'resource indicators are taken with the authorization_code and refresh_token grants';
const repeatedText = 'resource appears more than once';
const providerOnlyText = (resource: string, scope: string): string =>
  `resource "${resource}" cannot be named with scope "${scope}": its tokens are for the provider alone`;

function assertAccepted<T>(decision: Decision<T>, expected: T): void {
  if (!decision.ok) assert.fail(`expected acceptance, got ${decision.error.code}: ${decision.error.description}`);
  assert.deepEqual(decision.value, expected);
}

function assertRefused<T>(decision: Decision<T>, code: string, description: string): void {
  if (decision.ok) assert.fail(`expected ${code} "${description}", got acceptance of ${JSON.stringify(decision.value)}`);
  assert.ok(decision.error instanceof OAuthError, 'a refusal is an OAuthError');
  assert.equal(decision.error.code, code);
  assert.equal(decision.error.description, description);
  assert.equal(decision.error.status, 400);
}

function authorize(resources: readonly string[], options: { client?: ResourceClient; scope?: readonly string[] } = {}) {
  return decideAuthorizeResources({
    client: options.client ?? webapp,
    issuer: ISSUER,
    scope: options.scope ?? ['openid', 'profile'],
    resources,
  });
}

function token(
  grantType: GrantType,
  requested: readonly string[],
  options: {
    client?: ResourceClient;
    grantScope?: readonly string[];
    tokenScope?: readonly string[];
    grantResources?: readonly string[];
  } = {},
): Decision<Audience> {
  const grantScope = options.grantScope ?? ['openid', 'profile'];
  return decideTokenAudience({
    grantType,
    client: options.client ?? webapp,
    issuer: ISSUER,
    grantScope,
    tokenScope: options.tokenScope ?? grantScope,
    grantResources: options.grantResources ?? [],
    requested,
  });
}

const RESOURCE_GRANTS: readonly GrantType[] = ['authorization_code', 'refresh_token'];
const NO_RESOURCE_GRANTS: readonly GrantType[] = ['client_credentials', 'device_code'];

describe('DESIGN.md §5 rule table', () => {
  test('/authorize: several resource values are each checked and all accepted', () => {
    assertAccepted(authorize([API, FILES, QUERY]), [API, FILES, QUERY]);
  });

  test('/authorize: one refused value fails the whole request', () => {
    assertRefused(authorize([API, 'https://evil.example.org/', FILES]), 'invalid_target', notRequestableText('https://evil.example.org/'));
    assertRefused(authorize([API, FILES, LOGICAL]), 'invalid_target', notRequestableText(LOGICAL));
  });

  test('/authorize: a value given twice counts once', () => {
    assertAccepted(authorize([API, API]), [API]);
    assertAccepted(authorize([FILES, API, FILES, API, FILES]), [FILES, API]);
  });

  test('/authorize: order of first appearance kept', () => {
    assertAccepted(authorize([QUERY, API, QUERY, FILES, API]), [QUERY, API, FILES]);
    assert.deepEqual(firstAppearances(['c', 'a', 'c', 'b', 'a']), ['c', 'a', 'b']);
  });

  test('/authorize: every value is checked with the first text', () => {
    assertRefused(authorize([FRAGMENT]), 'invalid_target', notRequestableText(FRAGMENT));
    assertRefused(authorize([API, 'https://api.example.org']), 'invalid_target', notRequestableText('https://api.example.org'));
  });

  test('/authorize: no resource named binds nothing', () => {
    assertAccepted(authorize([]), []);
  });

  test('/token (authorization_code, refresh_token): at most one resource is accepted', () => {
    for (const grantType of RESOURCE_GRANTS) assertAccepted(token(grantType, [API]), API);
  });

  test('/token (authorization_code, refresh_token): a second resource gives invalid_request', () => {
    for (const grantType of RESOURCE_GRANTS) {
      assertRefused(token(grantType, [API, FILES]), 'invalid_request', repeatedText);
      assertRefused(token(grantType, [API, FILES, QUERY]), 'invalid_request', repeatedText);
    }
  });

  test('/token (authorization_code, refresh_token): a second equal resource gives invalid_request', () => {
    for (const grantType of RESOURCE_GRANTS) {
      assertRefused(token(grantType, [API, API], { grantResources: [API] }), 'invalid_request', repeatedText);
    }
  });

  test('/token client_credentials: any resource gives invalid_target', () => {
    for (const resource of [API, FILES, QUERY, LOGICAL, FRAGMENT, ISSUER, '', 'https://evil.example.org/']) {
      assertRefused(token('client_credentials', [resource], { grantScope: [] }), 'invalid_target', refusedByGrantText);
    }
  });

  test('/token client_credentials: two resources still give invalid_target (grant type checked before repeats)', () => {
    assertRefused(token('client_credentials', [API, FILES], { grantScope: [] }), 'invalid_target', refusedByGrantText);
    assertRefused(token('client_credentials', [API, API], { grantScope: [] }), 'invalid_target', refusedByGrantText);
  });

  test('/token client_credentials: without resource the token is for the whole audience', () => {
    assertAccepted(token('client_credentials', [], { grantScope: [] }), [API, FILES, LOGICAL, FRAGMENT, QUERY]);
  });

  test('device_code polling: any resource gives invalid_target', () => {
    assertRefused(token('device_code', [API], { client: tv }), 'invalid_target', refusedByGrantText);
    assertRefused(token('device_code', [''], { client: tv }), 'invalid_target', refusedByGrantText);
  });

  test('device_code polling: two resources still give invalid_target (grant type checked before repeats)', () => {
    assertRefused(token('device_code', [API, API], { client: tv }), 'invalid_target', refusedByGrantText);
  });

  test('/device_authorization: a resource is refused with the grant text', () => {
    const error = resourceRefusedByGrant();
    assert.ok(error instanceof OAuthError);
    assert.equal(error.code, 'invalid_target');
    assert.equal(error.description, refusedByGrantText);
  });

  test('what may be named: an audience entry, character for character', () => {
    assert.equal(isNameable(webapp, API), true);
    assert.equal(isNameable(webapp, FILES), true);
    assertAccepted(authorize([FILES]), [FILES]);
    assertAccepted(token('authorization_code', [FILES]), FILES);
  });

  test('what may be named: a missing trailing slash is another resource', () => {
    assert.equal(isNameable(webapp, 'https://api.example.org'), false);
    assertRefused(authorize(['https://api.example.org']), 'invalid_target', notRequestableText('https://api.example.org'));
    assertRefused(token('authorization_code', ['https://api.example.org']), 'invalid_target', notRequestableText('https://api.example.org'));
  });

  test('what may be named: an added trailing slash is another resource', () => {
    assert.equal(isNameable(webapp, 'https://files.example.org/'), false);
    assertRefused(authorize(['https://files.example.org/']), 'invalid_target', notRequestableText('https://files.example.org/'));
    assertRefused(token('refresh_token', ['https://files.example.org/']), 'invalid_target', notRequestableText('https://files.example.org/'));
  });

  test('what may be named: no case normalisation', () => {
    assertRefused(authorize(['https://API.example.org/']), 'invalid_target', notRequestableText('https://API.example.org/'));
    assertRefused(token('authorization_code', ['HTTPS://api.example.org/']), 'invalid_target', notRequestableText('HTTPS://api.example.org/'));
  });

  test('what may be named: a query is accepted when exactly an audience entry', () => {
    assert.equal(isNameable(webapp, QUERY), true);
    assertAccepted(authorize([QUERY]), [QUERY]);
    assertAccepted(token('authorization_code', [QUERY]), QUERY);
    assertRefused(authorize(['https://reports.example.org/q?tenant=8']), 'invalid_target', notRequestableText('https://reports.example.org/q?tenant=8'));
    assertRefused(authorize(['https://reports.example.org/q']), 'invalid_target', notRequestableText('https://reports.example.org/q'));
  });

  test('what may be named: a logical-name audience entry is refused', () => {
    assert.equal(isNameable(webapp, LOGICAL), false);
    assertRefused(authorize([LOGICAL]), 'invalid_target', notRequestableText(LOGICAL));
    for (const grantType of RESOURCE_GRANTS) assertRefused(token(grantType, [LOGICAL]), 'invalid_target', notRequestableText(LOGICAL));
  });

  test('what may be named: a fragment-URI audience entry is refused', () => {
    assert.equal(isNameable(webapp, FRAGMENT), false);
    assertRefused(authorize([FRAGMENT]), 'invalid_target', notRequestableText(FRAGMENT));
    for (const grantType of RESOURCE_GRANTS) assertRefused(token(grantType, [FRAGMENT]), 'invalid_target', notRequestableText(FRAGMENT));
  });

  test('what may be named: an absolute URI outside the audience is refused', () => {
    assertRefused(authorize(['https://evil.example.org/']), 'invalid_target', notRequestableText('https://evil.example.org/'));
    assertRefused(token('refresh_token', ['urn:example:other']), 'invalid_target', notRequestableText('urn:example:other'));
  });

  test('what may be named: a non-HTTP absolute URI in the audience may be named', () => {
    const client: ResourceClient = { clientId: 'svc', audience: ['urn:example:api'] };
    assertAccepted(authorize(['urn:example:api'], { client }), ['urn:example:api']);
    assertAccepted(token('authorization_code', ['urn:example:api'], { client }), 'urn:example:api');
  });

  test('what may be named: logical names and fragment URIs appear in aud when nothing is named', () => {
    const decision = token('authorization_code', []);
    assertAccepted(decision, [API, FILES, LOGICAL, FRAGMENT, QUERY]);
    assert.ok(decision.ok && Array.isArray(decision.value) && decision.value.includes(LOGICAL) && decision.value.includes(FRAGMENT));
  });

  test('grant bound: the code exchange may name one of the authorization\'s resources', () => {
    assertAccepted(token('authorization_code', [FILES], { grantResources: [API, FILES] }), FILES);
  });

  test('grant bound: the code exchange naming another entry gives the second text', () => {
    assertRefused(token('authorization_code', [QUERY], { grantResources: [API, FILES] }), 'invalid_target', notInAuthorizationText(QUERY));
  });

  test('grant bound: every refresh naming another entry gives the second text', () => {
    assertAccepted(token('refresh_token', [API], { grantResources: [API] }), API);
    assertRefused(token('refresh_token', [FILES], { grantResources: [API] }), 'invalid_target', notInAuthorizationText(FILES));
  });

  test('grant bound: if none were named at /authorize, any requestable entry of the audience', () => {
    for (const grantType of RESOURCE_GRANTS) {
      for (const resource of [API, FILES, QUERY]) assertAccepted(token(grantType, [resource], { grantResources: [] }), resource);
    }
  });

  test('grant bound: if none were named at /authorize, a non-requestable entry is still refused with the first text', () => {
    assertRefused(token('refresh_token', [LOGICAL], { grantResources: [] }), 'invalid_target', notRequestableText(LOGICAL));
  });

  test('aud rule 1: the resource named at /token, exactly as sent', () => {
    assertAccepted(token('authorization_code', [QUERY], { grantResources: [API, QUERY] }), QUERY);
    assertAccepted(token('refresh_token', [API], { grantResources: [] }), API);
  });

  test('aud rule 2: else the resources of the authorization request, in order', () => {
    assertAccepted(token('authorization_code', [], { grantResources: [QUERY, API] }), [QUERY, API]);
    assertAccepted(token('refresh_token', [], { grantResources: [FILES, API] }), [FILES, API]);
  });

  test('aud rule 2: one authorization resource gives a string aud', () => {
    const decision = token('refresh_token', [], { grantResources: [FILES] });
    assertAccepted(decision, FILES);
    assert.equal(decision.ok && typeof decision.value, 'string');
  });

  test('aud rule 3: else the client\'s whole audience, in config order', () => {
    assertAccepted(token('authorization_code', []), [API, FILES, LOGICAL, FRAGMENT, QUERY]);
    const reordered: ResourceClient = { clientId: 'webapp', audience: [QUERY, LOGICAL, API] };
    assertAccepted(token('refresh_token', [], { client: reordered }), [QUERY, LOGICAL, API]);
  });

  test('aud rule 3: a one-entry audience gives a string aud', () => {
    const decision = token('authorization_code', [], { client: tv });
    assertAccepted(decision, API);
    assert.equal(decision.ok && typeof decision.value, 'string');
  });

  test('aud: a string when it has one value, an array otherwise', () => {
    assert.equal(audienceClaim([API]), API);
    assert.deepEqual(audienceClaim([API, FILES]), [API, FILES]);
  });

  test('refresh: a refused request is a returned value, checked before anything is touched', () => {
    const grantResources = Object.freeze([API]);
    const requested = Object.freeze([FILES, FILES]);
    let decision: Decision<Audience> | undefined;
    assert.doesNotThrow(() => {
      decision = token('refresh_token', requested, { grantResources });
    });
    assertRefused(decision as Decision<Audience>, 'invalid_request', repeatedText);
    assert.deepEqual(grantResources, [API]);
  });

  test('device flow: tokens always for the whole audience', () => {
    assertAccepted(token('device_code', [], { client: tv }), API);
    assertAccepted(token('device_code', []), [API, FILES, LOGICAL, FRAGMENT, QUERY]);
  });

  test('device flow: a later refresh follows the refresh rule', () => {
    assertAccepted(token('refresh_token', [FILES], { grantResources: [] }), FILES);
    assertAccepted(token('refresh_token', [], { grantResources: [] }), [API, FILES, LOGICAL, FRAGMENT, QUERY]);
    assertRefused(token('refresh_token', [FILES, FILES], { grantResources: [] }), 'invalid_request', repeatedText);
  });

  test('scope: never reduced according to the resource', () => {
    const granted = ['openid', 'profile', 'email'];
    assertAccepted(decideRefreshScope(undefined, granted), granted);
    assertAccepted(token('refresh_token', [API], { grantScope: granted }), API);
  });

  test('scope: a refresh scope within the grant\'s scope is accepted and carried', () => {
    assertAccepted(decideRefreshScope(['openid'], ['openid', 'profile', 'email']), ['openid']);
    assertAccepted(decideRefreshScope(['openid', 'profile', 'email'], ['openid', 'profile', 'email']), ['openid', 'profile', 'email']);
  });

  test('scope: a refresh scope beyond the grant\'s scope gives invalid_scope', () => {
    const decision = decideRefreshScope(['openid', 'ssh'], ['openid', 'profile']);
    assert.ok(!decision.ok);
    assert.ok(decision.error instanceof OAuthError);
    assert.equal(decision.error.code, 'invalid_scope');
    assert.match(decision.error.description, /"ssh"/);
  });

  test('scope: a refresh without scope gets the whole grant\'s scope', () => {
    assertAccepted(decideRefreshScope(undefined, ['openid', 'email']), ['openid', 'email']);
    assertAccepted(decideRefreshScope([], ['openid', 'email']), ['openid', 'email']);
  });

  test('persistence: the grant\'s stored resources, not a later audience, bound a refresh', () => {
    const widened: ResourceClient = { clientId: 'webapp', audience: [...webapp.audience, 'https://new.example.org/'] };
    assertRefused(
      token('refresh_token', ['https://new.example.org/'], { client: widened, grantResources: [API] }),
      'invalid_target',
      notInAuthorizationText('https://new.example.org/'),
    );
    assertAccepted(token('refresh_token', [], { client: widened, grantResources: [API] }), API);
  });
});

describe('DESIGN.md §5 error texts', () => {
  test('error text invalid_target: not absolute', () => {
    assertRefused(token('authorization_code', ['billing']), 'invalid_target', 'resource "billing" is not one this client may ask a token for');
  });

  test('error text invalid_target: has fragment', () => {
    assertRefused(
      authorize(['https://docs.example.org/#v2']),
      'invalid_target',
      'resource "https://docs.example.org/#v2" is not one this client may ask a token for',
    );
  });

  test('error text invalid_target: not in audience', () => {
    assertRefused(
      token('refresh_token', ['https://other.example.org/']),
      'invalid_target',
      'resource "https://other.example.org/" is not one this client may ask a token for',
    );
  });

  test('error text invalid_target: refresh or code exchange naming an entry outside the authorization\'s resources', () => {
    for (const grantType of RESOURCE_GRANTS) {
      assertRefused(
        token(grantType, ['https://files.example.org'], { grantResources: ['https://api.example.org/'] }),
        'invalid_target',
        'resource "https://files.example.org" was not part of the authorization',
      );
    }
  });

  test('error text invalid_target: resource at client_credentials, device authorization, device polling', () => {
    for (const grantType of NO_RESOURCE_GRANTS) {
      assertRefused(token(grantType, [API]), 'invalid_target', 'resource indicators are taken with the authorization_code and refresh_token grants');
    }
    assert.equal(resourceRefusedByGrant().description, 'resource indicators are taken with the authorization_code and refresh_token grants');
  });

  test('error text invalid_request: resource more than once at /token', () => {
    assertRefused(token('authorization_code', [API, API]), 'invalid_request', 'resource appears more than once');
  });

  test('error text: an empty resource= is a value like any other', () => {
    assertRefused(authorize(['']), 'invalid_target', 'resource "" is not one this client may ask a token for');
    for (const grantType of RESOURCE_GRANTS) {
      assertRefused(token(grantType, ['']), 'invalid_target', 'resource "" is not one this client may ask a token for');
    }
    assertRefused(token('authorization_code', ['', '']), 'invalid_request', 'resource appears more than once');
  });

  test('error text: the value is quoted exactly as sent', () => {
    const odd = 'https://api.example.org/ "x"';
    assertRefused(authorize([odd]), 'invalid_target', `resource "${odd}" is not one this client may ask a token for`);
  });

  test('error text invalid_target: provider scopes', () => {
    assertRefused(
      token('authorization_code', [API], { grantScope: ['openid', 'ssh'] }),
      'invalid_target',
      'resource "https://api.example.org/" cannot be named with scope "ssh": its tokens are for the provider alone',
    );
  });
});

describe('DESIGN.md §5 order of checks at /token', () => {
  test('order of checks: grant type that refuses it before more than one value', () => {
    assertRefused(token('client_credentials', ['', 'x'], { grantScope: [] }), 'invalid_target', refusedByGrantText);
  });

  test('order of checks: more than one value before not requestable', () => {
    assertRefused(token('authorization_code', [LOGICAL, 'https://evil.example.org/']), 'invalid_request', repeatedText);
  });

  test('order of checks: not requestable before not in the authorization', () => {
    assertRefused(token('authorization_code', [LOGICAL], { grantResources: [API] }), 'invalid_target', notRequestableText(LOGICAL));
    assertRefused(
      token('refresh_token', ['https://evil.example.org/'], { grantResources: [API] }),
      'invalid_target',
      notRequestableText('https://evil.example.org/'),
    );
    assertRefused(token('refresh_token', [FRAGMENT], { grantResources: [API] }), 'invalid_target', notRequestableText(FRAGMENT));
  });

  test('order of checks: at /authorize every value is checked with the first text', () => {
    assertRefused(authorize(['https://evil.example.org/', LOGICAL]), 'invalid_target', notRequestableText('https://evil.example.org/'));
  });
});

describe('DESIGN.md §5 provider scopes', () => {
  test('provider scopes: the list is ssh, nfs, app_password, wireguard, wireguard_peers', () => {
    assert.deepEqual([...PROVIDER_SCOPES].sort(), ['app_password', 'nfs', 'ssh', 'wireguard', 'wireguard_peers']);
    assert.equal(providerScopeOf(['openid', 'profile', 'email']), undefined);
  });

  test('provider scopes: aud is the issuer', () => {
    for (const scope of PROVIDER_SCOPES) {
      for (const grantType of ['authorization_code', 'refresh_token', 'client_credentials', 'device_code'] as const) {
        assertAccepted(token(grantType, [], { grantScope: ['openid', scope] }), ISSUER);
        assertAccepted(token(grantType, [], { grantScope: ['openid', scope], grantResources: grantType === 'refresh_token' ? [ISSUER] : [] }), ISSUER);
      }
    }
  });

  test('provider scopes: the issuer can be named with a provider scope at /authorize and /token', () => {
    for (const scope of PROVIDER_SCOPES) {
      assertAccepted(authorize([ISSUER], { scope: ['openid', scope] }), [ISSUER]);
      assertAccepted(authorize([ISSUER, ISSUER], { scope: [scope] }), [ISSUER]);
      for (const grantType of RESOURCE_GRANTS) assertAccepted(token(grantType, [ISSUER], { grantScope: [scope] }), ISSUER);
    }
  });

  test('provider scopes: naming anything but the issuer at /authorize gives the provider text', () => {
    for (const scope of PROVIDER_SCOPES) {
      for (const resource of [API, FILES, QUERY, LOGICAL, FRAGMENT, '', `${ISSUER}/`, 'https://evil.example.org/']) {
        assertRefused(authorize([resource], { scope: ['openid', scope] }), 'invalid_target', providerOnlyText(resource, scope));
      }
      assertRefused(authorize([ISSUER, API], { scope: [scope] }), 'invalid_target', providerOnlyText(API, scope));
    }
  });

  test('provider scopes: naming anything but the issuer at /token gives the provider text', () => {
    for (const scope of PROVIDER_SCOPES) {
      for (const grantType of RESOURCE_GRANTS) {
        for (const resource of [API, LOGICAL, FRAGMENT, '', `${ISSUER}/`]) {
          assertRefused(token(grantType, [resource], { grantScope: ['openid', scope] }), 'invalid_target', providerOnlyText(resource, scope));
        }
      }
    }
  });

  test('provider scopes: the text names the first provider scope', () => {
    assertRefused(authorize([API], { scope: ['openid', 'nfs', 'ssh'] }), 'invalid_target', providerOnlyText(API, 'nfs'));
    assertRefused(authorize([API], { scope: ['wireguard_peers', 'wireguard'] }), 'invalid_target', providerOnlyText(API, 'wireguard_peers'));
    assertRefused(token('authorization_code', [API], { grantScope: ['app_password', 'ssh'] }), 'invalid_target', providerOnlyText(API, 'app_password'));
  });

  test('provider scopes: also when the provider scope is only in the grant\'s scope', () => {
    const grantScope = ['openid', 'ssh'];
    assertAccepted(token('refresh_token', [], { grantScope, tokenScope: ['openid'] }), ISSUER);
    assertAccepted(token('refresh_token', [ISSUER], { grantScope, tokenScope: ['openid'] }), ISSUER);
    assertRefused(token('refresh_token', [API], { grantScope, tokenScope: ['openid'] }), 'invalid_target', providerOnlyText(API, 'ssh'));
  });

  test('provider scopes: the provider check takes the place of the authorization check', () => {
    assertAccepted(token('refresh_token', [ISSUER], { grantScope: ['ssh'], grantResources: [ISSUER] }), ISSUER);
    assertAccepted(token('refresh_token', [ISSUER], { grantScope: ['ssh'], grantResources: [] }), ISSUER);
  });

  test('provider scopes: grant type and repeat checks still come first', () => {
    assertRefused(token('client_credentials', [ISSUER], { grantScope: ['ssh'] }), 'invalid_target', refusedByGrantText);
    assertRefused(token('device_code', [API], { grantScope: ['nfs'] }), 'invalid_target', refusedByGrantText);
    assertRefused(token('authorization_code', [ISSUER, ISSUER], { grantScope: ['ssh'] }), 'invalid_request', repeatedText);
    assertRefused(token('refresh_token', [API, ISSUER], { grantScope: ['ssh'] }), 'invalid_request', repeatedText);
  });

  test('provider scopes: the issuer named without a provider scope is refused unless it is an audience entry', () => {
    assertRefused(authorize([ISSUER]), 'invalid_target', notRequestableText(ISSUER));
    for (const grantType of RESOURCE_GRANTS) assertRefused(token(grantType, [ISSUER]), 'invalid_target', notRequestableText(ISSUER));

    const withIssuer: ResourceClient = { clientId: 'portal', audience: [ISSUER, API] };
    assertAccepted(authorize([ISSUER], { client: withIssuer }), [ISSUER]);
    assertAccepted(token('authorization_code', [ISSUER], { client: withIssuer }), ISSUER);
    assertRefused(
      token('refresh_token', [ISSUER], { client: withIssuer, grantResources: [API] }),
      'invalid_target',
      notInAuthorizationText(ISSUER),
    );
  });
});

describe('DESIGN.md §4 /userinfo row', () => {
  test('/userinfo: an aud holding the issuer is addressed to the provider', () => {
    assert.equal(isAddressedToProvider(ISSUER, ISSUER, webapp.audience), true);
    assert.equal(isAddressedToProvider([API, ISSUER], ISSUER, webapp.audience), true);
  });

  test('/userinfo: the client\'s whole audience is addressed to the provider', () => {
    assert.equal(isAddressedToProvider([API, FILES, LOGICAL, FRAGMENT, QUERY], ISSUER, webapp.audience), true);
    assert.equal(isAddressedToProvider(API, ISSUER, tv.audience), true);
  });

  test('/userinfo: a token narrowed to another server is not', () => {
    assert.equal(isAddressedToProvider(API, ISSUER, webapp.audience), false);
    assert.equal(isAddressedToProvider([API, FILES], ISSUER, webapp.audience), false);
    assert.equal(isAddressedToProvider(`${ISSUER}/`, ISSUER, webapp.audience), false);
  });

  test('/userinfo: every aud the policy issues without a resource is accepted', () => {
    for (const client of [webapp, tv]) {
      const decision = token('authorization_code', [], { client });
      assert.ok(decision.ok);
      assert.equal(isAddressedToProvider(decision.value, ISSUER, client.audience), true);
    }
    const provider = token('refresh_token', [], { grantScope: ['openid', 'ssh'] });
    assert.ok(provider.ok);
    assert.equal(isAddressedToProvider(provider.value, ISSUER, webapp.audience), true);
  });
});

describe('scope.ts', () => {
  test('parseScope: splits on spaces, drops repeats, keeps order', () => {
    assert.deepEqual(parseScope('openid profile openid email'), ['openid', 'profile', 'email']);
    assert.deepEqual(parseScope('  openid   ssh '), ['openid', 'ssh']);
  });

  test('parseScope: absent or empty is no scope', () => {
    assert.deepEqual(parseScope(undefined), []);
    assert.deepEqual(parseScope(''), []);
  });

  test('parseScope: a malformed value is undefined (RFC 6749 §3.3)', () => {
    assert.equal(parseScope('openid "x"'), undefined);
    assert.equal(parseScope('openid back\\slash'), undefined);
    assert.equal(parseScope('openid\tprofile'), undefined);
    assert.equal(parseScope('opénid'), undefined);
  });

  test('decideRequestedScope: scopes the client may ask are accepted', () => {
    assertAccepted(decideRequestedScope(['openid', 'email'], ['openid', 'profile', 'email']), ['openid', 'email']);
    assertAccepted(decideRequestedScope([], ['openid']), []);
  });

  test('decideRequestedScope: a scope the client may not ask gives invalid_scope', () => {
    const decision = decideRequestedScope(['openid', 'ssh'], ['openid', 'profile', 'email']);
    assert.ok(!decision.ok);
    assert.ok(decision.error instanceof OAuthError);
    assert.equal(decision.error.code, 'invalid_scope');
    assert.match(decision.error.description, /"ssh"/);
  });

  test('decideRefreshScope: within the grant accepted, beyond invalid_scope, absent the whole grant', () => {
    const granted = ['openid', 'profile', 'ssh'];
    assertAccepted(decideRefreshScope(['ssh'], granted), ['ssh']);
    const beyond = decideRefreshScope(['openid', 'email'], granted);
    assert.ok(!beyond.ok && beyond.error.code === 'invalid_scope');
    assertAccepted(decideRefreshScope(undefined, granted), granted);
  });
});

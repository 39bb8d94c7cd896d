/** policy/token-exchange.ts and policy/act-chain.ts, row by row (DESIGN.md §12): pure functions, values in, decisions out. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { MAX_ACT_DEPTH, actDepth, nestAct } from '../src/policy/act-chain.js';
import type { OAuthError } from '../src/policy/oauth-error.js';
import {
  ACCESS_TOKEN_TYPE,
  checkSubjectToken,
  checkTokenExchangeRequest,
  decideExchangeScope,
  decideTokenExchange,
  type ExchangeClient,
  type ExchangeParameters,
  type SubjectToken,
} from '../src/policy/token-exchange.js';
import type { Decision } from '../src/policy/decision.js';

const ISSUER = 'https://auth.example.org';
const ORDERS = 'https://orders.example.org/';
const INVENTORY = 'https://inventory.example.org/';
const BILLING = 'https://billing.example.org/';
const BAD_SUBJECT = 'the subject token is not one this client may exchange';

const caller: ExchangeClient = {
  clientId: 'orders-api',
  kind: 'confidential',
  audience: [INVENTORY, BILLING, 'stock-logical', 'https://ledger.example.org/#v1'],
  redirectUris: [],
  scopes: ['openid', 'profile', 'read', 'ssh'],
  tokenExchange: { subjectAudience: [ORDERS] },
};

const sent = (overrides: Partial<ExchangeParameters> = {}): ExchangeParameters => ({
  subjectToken: 'eyJ.subject.token',
  subjectTokenType: ACCESS_TOKEN_TYPE,
  resources: [],
  requestedScope: [],
  actorToken: false,
  actorTokenType: false,
  audience: false,
  ...overrides,
});

function refusal<T>(decision: Decision<T>): OAuthError {
  assert.equal(decision.ok, false, 'expected a refusal');
  return (decision as { error: OAuthError }).error;
}

function assertRefused<T>(decision: Decision<T>, code: string, description: string | RegExp): void {
  const error = refusal(decision);
  assert.equal(error.code, code);
  if (typeof description === 'string') assert.equal(error.description, description);
  else assert.match(error.description, description);
}

function value<T>(decision: Decision<T>): T {
  if (!decision.ok) assert.fail(`refused: ${decision.error.code}: ${decision.error.description}`);
  return decision.value;
}

/** Verified claims of an access token webapp got for alice, addressed to the orders server. */
const claims = (overrides: Record<string, unknown> = {}): Record<string, unknown> => ({
  iss: ISSUER,
  sub: 'alice',
  aud: [ORDERS, 'https://files.example.org'],
  exp: 2_000_000_000,
  iat: 1_999_996_400,
  jti: 'grant-1.random',
  client_id: 'webapp',
  scope: 'openid profile email read ssh',
  auth_time: 1_999_990_000,
  ...overrides,
});

const subject = (overrides: Partial<SubjectToken> = {}): SubjectToken => ({
  ...value(checkSubjectToken({ client: caller, issuer: ISSUER, claims: claims(), grantId: 'grant-1' })),
  ...overrides,
});

describe('token exchange, row 1: who may exchange', () => {
  test('a configured confidential client with a token_exchange block may; the answer is its request', () => {
    assert.deepEqual(value(checkTokenExchangeRequest(caller, sent({ resources: [INVENTORY], requestedScope: ['read'] }))), {
      subjectToken: 'eyJ.subject.token',
      resource: INVENTORY,
      requestedScope: ['read'],
    });
  });

  test('a public client, a device client, a confidential client without the block, a dynamic client: unauthorized_client, before anything else', () => {
    const { tokenExchange: _dropped, ...withoutBlock } = caller;
    const others: ExchangeClient[] = [
      { ...caller, kind: 'public' },
      { ...caller, kind: 'device' },
      withoutBlock,
      { ...caller, dynamic: { grantTypes: ['authorization_code'] } },
    ];
    for (const client of others) {
      // Even a request with every other fault gets this first.
      assertRefused(checkTokenExchangeRequest(client, sent({ resources: [INVENTORY, INVENTORY], actorToken: true, subjectToken: undefined })), 'unauthorized_client', /token exchange/);
    }
  });
});

describe('token exchange, rows 2-6: the request alone', () => {
  test('row 2: resource twice (even the same value) is invalid_request, before the other checks', () => {
    assertRefused(checkTokenExchangeRequest(caller, sent({ resources: [INVENTORY, INVENTORY], actorToken: true })), 'invalid_request', 'resource appears more than once');
    assertRefused(checkTokenExchangeRequest(caller, sent({ resources: [INVENTORY, BILLING] })), 'invalid_request', 'resource appears more than once');
  });

  test('row 3: actor_token, actor_token_type and audience are invalid_request, each with its own text', () => {
    const texts = new Set<string>();
    for (const overrides of [{ actorToken: true }, { actorTokenType: true }, { audience: true }]) {
      const error = refusal(checkTokenExchangeRequest(caller, sent(overrides)));
      assert.equal(error.code, 'invalid_request');
      texts.add(error.description);
    }
    assert.equal(texts.size, 3);
    assertRefused(checkTokenExchangeRequest(caller, sent({ actorToken: true })), 'invalid_request', /^actor_token is not supported/);
    assertRefused(checkTokenExchangeRequest(caller, sent({ audience: true })), 'invalid_request', /^audience is not taken: name the server .* with resource/);
  });

  test('row 4: subject_token and subject_token_type are required; the type is access_token only', () => {
    assertRefused(checkTokenExchangeRequest(caller, sent({ subjectToken: undefined })), 'invalid_request', 'subject_token is required');
    assertRefused(checkTokenExchangeRequest(caller, sent({ subjectTokenType: undefined })), 'invalid_request', 'subject_token_type is required');
    for (const other of ['urn:ietf:params:oauth:token-type:refresh_token', 'urn:ietf:params:oauth:token-type:id_token', 'urn:ietf:params:oauth:token-type:jwt', 'access_token']) {
      assertRefused(checkTokenExchangeRequest(caller, sent({ subjectTokenType: other })), 'invalid_request', `subject_token_type must be ${ACCESS_TOKEN_TYPE}`);
    }
  });

  test('row 5: requested_token_type may be absent or access_token; anything else is invalid_request', () => {
    assert.ok(checkTokenExchangeRequest(caller, sent({ requestedTokenType: ACCESS_TOKEN_TYPE })).ok);
    for (const other of ['urn:ietf:params:oauth:token-type:refresh_token', 'urn:ietf:params:oauth:token-type:id_token']) {
      assertRefused(checkTokenExchangeRequest(caller, sent({ requestedTokenType: other })), 'invalid_request', /^requested_token_type must be urn:ietf:params:oauth:token-type:access_token/);
    }
  });

  test('row 6: a malformed scope is invalid_scope', () => {
    assertRefused(checkTokenExchangeRequest(caller, sent({ requestedScope: undefined })), 'invalid_scope', 'scope is malformed');
  });
});

describe('token exchange, rows 7-11: the subject token', () => {
  const check = (overrides: Record<string, unknown>, client: ExchangeClient = caller): Decision<SubjectToken> =>
    checkSubjectToken({ client, issuer: ISSUER, claims: claims(overrides), grantId: 'grant-1' });

  test('a verified token of a grant addressed to the caller gives what the exchange takes from it', () => {
    assert.deepEqual(value(check({})), {
      subject: 'alice',
      clientId: 'webapp',
      jti: 'grant-1.random',
      grantId: 'grant-1',
      audience: [ORDERS, 'https://files.example.org'],
      scope: ['openid', 'profile', 'email', 'read', 'ssh'],
      expiresAt: 2_000_000_000,
      authTime: 1_999_990_000,
    });
    assert.deepEqual(value(check({ aud: ORDERS })).audience, [ORDERS]);
  });

  test('row 7: what jose refused, or claims of the wrong shape, is invalid_grant', () => {
    assertRefused(checkSubjectToken({ client: caller, issuer: ISSUER, claims: undefined, grantId: undefined }), 'invalid_grant', BAD_SUBJECT);
    for (const broken of [{ sub: undefined }, { client_id: 7 }, { jti: undefined }, { scope: undefined }, { exp: '2000000000' }, { aud: undefined }, { aud: [ORDERS, 3] }]) {
      assertRefused(check(broken), 'invalid_grant', BAD_SUBJECT);
    }
  });

  test('row 8: a token addressed to the issuer (provider scopes) is never a subject token, even for a caller listing it', () => {
    const listingIssuer: ExchangeClient = { ...caller, tokenExchange: { subjectAudience: [ORDERS, ISSUER] } };
    assertRefused(check({ aud: ISSUER, scope: 'ssh' }, listingIssuer), 'invalid_grant', BAD_SUBJECT);
  });

  test('row 9: a token without a grant (client_credentials) is refused: exchange is on a person\'s behalf', () => {
    const clientCredentials = claims({ sub: 'service', client_id: 'service', jti: 'random-only' });
    assertRefused(checkSubjectToken({ client: caller, issuer: ISSUER, claims: clientCredentials, grantId: undefined }), 'invalid_grant', BAD_SUBJECT);
  });

  test('row 10: aud must hold one of the caller\'s subject_audience values, exactly', () => {
    assertRefused(check({ aud: 'https://files.example.org' }), 'invalid_grant', BAD_SUBJECT);
    assertRefused(check({ aud: 'https://orders.example.org' }), 'invalid_grant', BAD_SUBJECT);
    assertRefused(check({ aud: [INVENTORY, BILLING] }), 'invalid_grant', BAD_SUBJECT);
  });

  test('row 11: at most three nested act; a fourth exchange is invalid_grant; an act this server never writes is refused', () => {
    const three = { sub: 'c', act: { sub: 'b', act: { sub: 'a' } } };
    assert.deepEqual(value(check({ act: { sub: 'b', act: { sub: 'a' } } })).act, { sub: 'b', act: { sub: 'a' } });
    assertRefused(check({ act: three }), 'invalid_grant', 'the subject token has been exchanged 3 times already, the most a token may be');
    for (const odd of [null, 'a', [], { sub: 1 }, { sub: 'a', extra: true }, { sub: 'a', act: 'b' }]) {
      assertRefused(check({ act: odd }), 'invalid_grant', BAD_SUBJECT);
    }
  });
});

describe('token exchange, rows 12-14: the decision', () => {
  const decide = (request: { resource?: string; requestedScope?: readonly string[] } = {}, grantStands = true, subjectToken: SubjectToken = subject()) =>
    decideTokenExchange({ client: caller, issuer: ISSUER, request: { subjectToken: 'x', requestedScope: [], ...request }, subject: subjectToken, grantStands });

  test('row 12: a subject token whose grant no longer stands is invalid_grant', () => {
    assertRefused(decide({}, false), 'invalid_grant', BAD_SUBJECT);
  });

  test('row 13: resource follows §5 against the caller\'s audience, with the same invalid_target text', () => {
    for (const resource of ['stock-logical', 'https://ledger.example.org/#v1', 'https://inventory.example.org', ORDERS, ISSUER, '']) {
      assertRefused(decide({ resource }), 'invalid_target', `resource "${resource}" is not one this client may ask a token for`);
    }
    assert.equal(value(decide({ resource: BILLING })).audience, BILLING);
  });

  test('row 13: without resource the token is for the caller\'s whole audience, in config order', () => {
    assert.deepEqual(value(decide()).audience, caller.audience);
    const single = decideTokenExchange({ client: { ...caller, audience: [INVENTORY] }, issuer: ISSUER, request: { subjectToken: 'x', requestedScope: [] }, subject: subject(), grantStands: true });
    assert.equal(value(single).audience, INVENTORY);
  });

  test('row 14: scope is the intersection without provider scopes; a request within it is taken; beyond it, a provider scope, or nothing left is invalid_scope', () => {
    assert.deepEqual(value(decide()).scope, ['openid', 'profile', 'read']);
    assert.deepEqual(value(decide({ requestedScope: ['read'] })).scope, ['read']);
    assertRefused(decide({ requestedScope: ['email'] }), 'invalid_scope', 'scope "email" is not in both the subject token\'s scope and this client\'s scopes');
    assertRefused(decide({ requestedScope: ['write'] }), 'invalid_scope', /scope "write"/);
    assertRefused(decide({ requestedScope: ['read', 'ssh'] }), 'invalid_scope', 'scope "ssh" is for the provider alone and never crosses an exchange');
    assertRefused(decideExchangeScope([], ['email', 'ssh'], ['read', 'ssh']), 'invalid_scope', 'no scope of the subject token is one this client may have');
  });

  test('the act claim names the caller and nests the subject token\'s own act (RFC 8693 §4.1)', () => {
    assert.deepEqual(value(decide()).act, { sub: 'orders-api' });
    assert.deepEqual(value(decide({}, true, subject({ act: { sub: 'gateway' } }))).act, { sub: 'orders-api', act: { sub: 'gateway' } });
  });

  test('checks run in the table\'s order: grant state before resource before scope', () => {
    assertRefused(decide({ resource: 'nope', requestedScope: ['ssh'] }, false), 'invalid_grant', BAD_SUBJECT);
    assertRefused(decide({ resource: 'nope', requestedScope: ['ssh'] }), 'invalid_target', /resource "nope"/);
  });
});

describe('act chain', () => {
  test('actDepth counts actors, 0 without act, undefined for a shape this server never writes or a chain too deep', () => {
    assert.equal(actDepth(undefined), 0);
    assert.equal(actDepth({ sub: 'a' }), 1);
    assert.equal(actDepth({ sub: 'b', act: { sub: 'a' } }), 2);
    assert.equal(actDepth({ sub: 'c', act: { sub: 'b', act: { sub: 'a' } } }), MAX_ACT_DEPTH);
    assert.equal(actDepth({ sub: 'd', act: { sub: 'c', act: { sub: 'b', act: { sub: 'a' } } } }), undefined);
    assert.equal(actDepth({ act: { sub: 'a' } }), undefined);
  });

  test('nestAct puts the new actor outermost', () => {
    assert.deepEqual(nestAct('a', undefined), { sub: 'a' });
    assert.deepEqual(nestAct('c', nestAct('b', nestAct('a', undefined))), { sub: 'c', act: { sub: 'b', act: { sub: 'a' } } });
  });
});

/**
 * Token exchange over HTTP (RFC 8693, DESIGN.md §12) on every store: every refusal, a chain of exchanges with nested
 * `act`, revocation of the person's grant reaching exchanged tokens at /introspect, `exp` within the subject token's,
 * refusals that write nothing; and interop: openid-client's genericGrantRequest as the caller, and a resource server
 * verifying the exchanged token with jose against /jwks.
 */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { LightMyRequestResponse } from 'fastify';
import { createRemoteJWKSet, decodeProtectedHeader, generateKeyPair, jwtVerify, SignJWT } from 'jose';
import * as oidc from 'openid-client';
import type { ClientRecord, Config } from '../src/config/types.js';
import { createLogger } from '../src/log.js';
import { ACCESS_TOKEN_TYPE, TOKEN_EXCHANGE_GRANT } from '../src/policy/token-exchange.js';
import type { Store } from '../src/store/types.js';
import { STORE_KINDS } from './helpers/databases.js';
import { AUDIENCE, basic, claimsOf, client, exchangeCode, form, ISSUER, postToken, refresh, SECRET, signInForCode, testApp, testConfig, type TestApp } from './helpers/app.js';
import { freePort } from './helpers/upstream.js';

/** webapp's first audience entry: the orders server, which receives people's tokens and exchanges them. */
const ORDERS = AUDIENCE[0] as string;
const FILES = AUDIENCE[1] as string;
const INVENTORY = 'https://inventory.example.org/';
const BILLING = 'https://billing.example.org/';
const STOCK = 'https://stock.example.org/';
const RELAY = 'https://relay.example.org/';
const ORDERS_AUDIENCE = [INVENTORY, BILLING, 'inventory-logical', 'https://ledger.example.org/#v1'];
const CALLER_SECRET = 'exchanger-secret';
const RS_SECRET = 'resource-server-secret';
const BAD_SUBJECT = 'the subject token is not one this client may exchange';
const HOUR_MS = 3600_000;

const exchanger = (clientId: string, audience: readonly string[], subjectAudience: readonly string[], scopes: readonly string[]): ClientRecord =>
  client({ clientId, kind: 'confidential', secret: CALLER_SECRET, redirectUris: [], audience, scopes, tokenExchange: { subjectAudience } });

async function config(overrides: Partial<Config> = {}): Promise<Config> {
  const base = await testConfig(overrides);
  const callers = [
    // The orders server calls inventory or billing for the person who called it.
    exchanger('orders-api', ORDERS_AUDIENCE, [ORDERS], ['openid', 'profile', 'read', 'ssh']),
    // The inventory server, one hop further, calls the stock server.
    exchanger('inventory-api', [STOCK], [INVENTORY], ['openid', 'profile', 'read']),
    // A relay whose own address is among the tokens it may exchange: hop after hop, until the chain is full.
    exchanger('relay', [RELAY], [ORDERS, RELAY], ['openid', 'profile']),
  ];
  return {
    ...base,
    clients: new Map([...base.clients, ...callers.map((record) => [record.clientId, record] as const)]),
    resourceServers: new Map([INVENTORY, STOCK].map((label) => [label, { label, secret: RS_SECRET }])),
    dynamicClients: { audience: ['https://mcp.example.org/mcp'], metadataDocuments: false, registration: 'open', scopes: ['openid'], refreshReuseGraceMs: 0, allowPrivateAddresses: false },
  };
}

/** The store, recording the name of every method the app calls on it. */
function recording(store: Store): { store: Store; calls: string[] } {
  const calls: string[] = [];
  const proxy = new Proxy(store, {
    get(target, property, receiver) {
      const member = Reflect.get(target, property, receiver) as unknown;
      if (typeof member !== 'function') return member;
      return (...args: unknown[]) => {
        calls.push(String(property));
        return (member as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { store: proxy, calls };
}

/** Store methods that only read. */
const READS = /^(find|is|list|peek|ping)/;

const exchangePairs = (subjectToken: string, extra: readonly (readonly [string, string])[] = []): [string, string][] => [
  ['grant_type', TOKEN_EXCHANGE_GRANT],
  ['subject_token', subjectToken],
  ['subject_token_type', ACCESS_TOKEN_TYPE],
  ...extra.map(([name, value]) => [name, value] as [string, string]),
];

function assertError(response: LightMyRequestResponse, error: string, description: string | RegExp, status = 400): void {
  assert.equal(response.statusCode, status, response.body);
  assert.equal(response.headers['cache-control'], 'no-store');
  const body = response.json();
  assert.equal(body.error, error, response.body);
  if (typeof description === 'string') assert.equal(body.error_description, description);
  else assert.match(body.error_description, description);
  assert.equal(body.access_token, undefined);
}

for (const kind of STORE_KINDS) {
  describe(`token exchange on the ${kind.name} store`, { skip: kind.skip }, () => {
    let t: TestApp;
    let calls: string[];
    let cleanup: () => Promise<void>;
    let clock = Date.now();
    const lines: string[] = [];

    before(async () => {
      const opened = await kind.open();
      cleanup = opened.cleanup;
      const recorded = recording(opened.store);
      calls = recorded.calls;
      t = await testApp({
        store: recorded.store,
        config: await config(),
        now: () => clock,
        logger: createLogger('info', { write: (line: string) => void lines.push(line) }),
      });
    });
    after(async () => {
      await t.app.close();
      await t.store.close();
      await cleanup();
    });

    const exchange = (subjectToken: string, extra: readonly (readonly [string, string])[] = [], auth: string | null = basic('orders-api', CALLER_SECRET)) =>
      postToken(t.app, exchangePairs(subjectToken, extra), auth);
    const introspect = (token: string, auth: string): Promise<LightMyRequestResponse> =>
      t.app.inject({ method: 'POST', url: '/introspect', headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: auth }, payload: form([['token', token]]) });

    /** A person's tokens from webapp: the access token (for `resource`, else the whole audience), refresh and ID token. */
    async function personTokens(options: { resource?: string; scope?: string } = {}): Promise<{ access: string; refresh: string; id: string }> {
      const grant = await signInForCode(t.app, options.scope === undefined ? {} : { scope: options.scope });
      const response = await exchangeCode(t.app, grant, options.resource === undefined ? [] : [options.resource]);
      assert.equal(response.statusCode, 200, response.body);
      const body = response.json();
      return { access: body.access_token, refresh: body.refresh_token, id: body.id_token };
    }

    test('metadata lists the token-exchange grant', async () => {
      const metadata = (await t.app.inject({ url: '/.well-known/oauth-authorization-server' })).json();
      assert.ok(metadata.grant_types_supported.includes(TOKEN_EXCHANGE_GRANT));
    });

    test('an exchange: a token for the named server only, of the same person, acted for by the caller, never a refresh token', async () => {
      const subject = await personTokens({ resource: ORDERS });
      const response = await exchange(subject.access, [['resource', INVENTORY]]);
      assert.equal(response.statusCode, 200, response.body);
      assert.equal(response.headers['cache-control'], 'no-store');
      const body = response.json();
      assert.deepEqual(Object.keys(body).sort(), ['access_token', 'expires_in', 'issued_token_type', 'scope', 'token_type']);
      assert.equal(body.issued_token_type, ACCESS_TOKEN_TYPE);
      assert.equal(body.token_type, 'Bearer');
      // The intersection of webapp's token (openid profile email) and orders-api's scopes (openid profile read ssh).
      assert.equal(body.scope, 'openid profile');
      const claims = claimsOf(body.access_token);
      assert.equal(decodeProtectedHeader(body.access_token).typ, 'at+jwt');
      assert.equal(claims.aud, INVENTORY);
      assert.equal(claims.sub, 'alice');
      assert.equal(claims.client_id, 'orders-api');
      assert.equal(claims.iss, ISSUER);
      assert.deepEqual(claims.act, { sub: 'orders-api' });
      assert.equal(claims.scope, 'openid profile');
      assert.equal(body.expires_in, (claims.exp as number) - (claims.iat as number));

      // Without resource: the caller's whole audience, in config order; requested_token_type access_token is fine.
      const whole = await exchange(subject.access, [['scope', 'profile'], ['requested_token_type', ACCESS_TOKEN_TYPE]]);
      assert.equal(whole.statusCode, 200, whole.body);
      assert.deepEqual(claimsOf(whole.json().access_token).aud, ORDERS_AUDIENCE);
      assert.equal(whole.json().scope, 'profile');
      // A token of the whole audience that names the orders server among others is a subject token too.
      const fromWhole = await exchange((await personTokens()).access, [['resource', BILLING]]);
      assert.equal(fromWhole.statusCode, 200, fromWhole.body);
    });

    test('the audit line names the caller, the subject token\'s client, the person and both auds; no token is logged', async () => {
      const subject = await personTokens({ resource: ORDERS });
      const response = await exchange(subject.access, [['resource', INVENTORY]]);
      assert.equal(response.statusCode, 200, response.body);
      await new Promise((resolve) => setImmediate(resolve));
      const audit = lines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((record) => record.audit === true && record.grant_type === TOKEN_EXCHANGE_GRANT);
      const line = audit.at(-1);
      assert.ok(line, 'an audit line for the exchange');
      assert.equal(line.event, 'token_issued');
      assert.equal(line.client_id, 'orders-api');
      assert.equal(line.subject_client_id, 'webapp');
      assert.equal(line.sub, 'alice');
      assert.equal(line.aud, INVENTORY);
      assert.equal(line.subject_aud, ORDERS);
      assert.equal(typeof line.grant_id, 'string');
      for (const token of [subject.access, response.json().access_token as string]) assert.ok(!lines.some((text) => text.includes(token)), 'no token in any line');
    });

    test('clients that may not exchange get unauthorized_client: no token_exchange block, public, dynamic', async () => {
      const { access } = await personTokens({ resource: ORDERS });
      for (const auth of [basic('webapp', SECRET), basic('service', SECRET)]) {
        assertError(await exchange(access, [], auth), 'unauthorized_client', /may not use token exchange/);
      }
      assertError(await postToken(t.app, [...exchangePairs(access), ['client_id', 'spa']], null), 'unauthorized_client', /may not use token exchange/);
      const registered = await t.app.inject({
        method: 'POST',
        url: '/register',
        headers: { 'content-type': 'application/json' },
        payload: JSON.stringify({ redirect_uris: ['http://127.0.0.1/cb'], token_endpoint_auth_method: 'client_secret_basic' }),
      });
      assert.equal(registered.statusCode, 201, registered.body);
      const { client_id: dynamicId, client_secret: dynamicSecret } = registered.json();
      assertError(await exchange(access, [], basic(dynamicId, dynamicSecret)), 'unauthorized_client', /may not use token exchange/);
      // A wrong secret is still invalid_client, before the grant is looked at.
      assertError(await exchange(access, [], basic('orders-api', 'wrong')), 'invalid_client', /.+/, 401);
    });

    test('request refusals: token types, actor_token, audience, resource twice or outside the caller\'s audience (§5 texts)', async () => {
      const { access } = await personTokens({ resource: ORDERS });
      const send = (pairs: [string, string][]) => postToken(t.app, [['grant_type', TOKEN_EXCHANGE_GRANT], ...pairs], basic('orders-api', CALLER_SECRET));
      assertError(await send([['subject_token', access]]), 'invalid_request', 'subject_token_type is required');
      assertError(await send([['subject_token_type', ACCESS_TOKEN_TYPE]]), 'invalid_request', 'subject_token is required');
      for (const type of ['urn:ietf:params:oauth:token-type:refresh_token', 'urn:ietf:params:oauth:token-type:id_token', 'urn:ietf:params:oauth:token-type:jwt']) {
        assertError(await send([['subject_token', access], ['subject_token_type', type]]), 'invalid_request', `subject_token_type must be ${ACCESS_TOKEN_TYPE}`);
      }
      assertError(await exchange(access, [['requested_token_type', 'urn:ietf:params:oauth:token-type:refresh_token']]), 'invalid_request', /^requested_token_type must be urn:ietf:params:oauth:token-type:access_token/);
      assertError(await exchange(access, [['actor_token', access], ['actor_token_type', ACCESS_TOKEN_TYPE]]), 'invalid_request', /^actor_token is not supported/);
      assertError(await exchange(access, [['actor_token_type', ACCESS_TOKEN_TYPE]]), 'invalid_request', /^actor_token_type is not supported/);
      assertError(await exchange(access, [['audience', 'inventory']]), 'invalid_request', /^audience is not taken/);
      assertError(await exchange(access, [['resource', INVENTORY], ['resource', INVENTORY]]), 'invalid_request', 'resource appears more than once');
      assertError(await exchange(access, [['resource', INVENTORY], ['resource', BILLING]]), 'invalid_request', 'resource appears more than once');
      for (const resource of ['inventory-logical', 'https://ledger.example.org/#v1', 'https://inventory.example.org', ORDERS, FILES, '']) {
        assertError(await exchange(access, [['resource', resource]]), 'invalid_target', `resource "${resource}" is not one this client may ask a token for`);
      }
      assertError(await exchange(access, [['scope', 'openid "x"']]), 'invalid_scope', 'scope is malformed');
      assertError(await postToken(t.app, [...exchangePairs(access), ['subject_token', access]], basic('orders-api', CALLER_SECRET)), 'invalid_request', 'subject_token appears more than once');
    });

    test('subject tokens that are not the caller\'s to exchange: another audience, expired, forged, an ID token, client_credentials, provider-scoped, revoked', async () => {
      const forFiles = await personTokens({ resource: FILES });
      assertError(await exchange(forFiles.access), 'invalid_grant', BAD_SUBJECT);
      // An exchanged token is for the caller's servers, not for the caller itself.
      const exchanged = (await exchange((await personTokens({ resource: ORDERS })).access, [['resource', INVENTORY]])).json().access_token as string;
      assertError(await exchange(exchanged), 'invalid_grant', BAD_SUBJECT);

      const good = await personTokens({ resource: ORDERS });
      // Forged: our kid and claims, another key's signature; and a token whose payload was altered.
      const { privateKey } = await generateKeyPair('ES256');
      const forged = await new SignJWT(claimsOf(good.access)).setProtectedHeader({ alg: 'ES256', typ: 'at+jwt', kid: decodeProtectedHeader(good.access).kid as string }).sign(privateKey);
      assertError(await exchange(forged), 'invalid_grant', BAD_SUBJECT);
      const [header, , signature] = good.access.split('.');
      const altered = `${header}.${Buffer.from(JSON.stringify({ ...claimsOf(good.access), scope: 'openid profile read' })).toString('base64url')}.${signature}`;
      assertError(await exchange(altered), 'invalid_grant', BAD_SUBJECT);
      assertError(await exchange('not-a-token'), 'invalid_grant', BAD_SUBJECT);
      // The ID token of the same sign-in (typ JWT, aud webapp).
      assertError(await exchange(good.id), 'invalid_grant', BAD_SUBJECT);

      // client_credentials: service's token names the orders server in its aud, but no person: refused.
      const service = await postToken(t.app, [['grant_type', 'client_credentials'], ['scope', 'read']], basic('service', SECRET));
      assert.equal(service.statusCode, 200, service.body);
      assert.ok((claimsOf(service.json().access_token).aud as string[]).includes(ORDERS));
      assertError(await exchange(service.json().access_token), 'invalid_grant', BAD_SUBJECT);

      // Provider scopes: a token with ssh is for the issuer alone, never a subject token.
      const ssh = await personTokens({ scope: 'openid ssh' });
      assert.equal(claimsOf(ssh.access).aud, ISSUER);
      assertError(await exchange(ssh.access), 'invalid_grant', BAD_SUBJECT);

      // A revoked grant: the person's client revoked it, so its tokens are no subject tokens any more.
      const revoked = await personTokens({ resource: ORDERS });
      const revocation = await t.app.inject({ method: 'POST', url: '/revoke', headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic('webapp', SECRET) }, payload: form([['token', revoked.refresh]]) });
      assert.equal(revocation.statusCode, 200);
      assertError(await exchange(revoked.access), 'invalid_grant', BAD_SUBJECT);

      // Expired: an hour later the subject token is refused (the good one, unused so far).
      clock += HOUR_MS + 1000;
      assertError(await exchange(good.access), 'invalid_grant', BAD_SUBJECT);
    });

    test('scope: within both the subject token\'s and the caller\'s; provider scopes never cross; nothing left is invalid_scope', async () => {
      const { access } = await personTokens({ resource: ORDERS });
      assertError(await exchange(access, [['scope', 'openid email']]), 'invalid_scope', 'scope "email" is not in both the subject token\'s scope and this client\'s scopes');
      assertError(await exchange(access, [['scope', 'read']]), 'invalid_scope', 'scope "read" is not in both the subject token\'s scope and this client\'s scopes');
      assertError(await exchange(access, [['scope', 'ssh']]), 'invalid_scope', 'scope "ssh" is for the provider alone and never crosses an exchange');
      // webapp's email-only token shares nothing with orders-api's scopes.
      const emailOnly = await personTokens({ resource: ORDERS, scope: 'email' });
      assertError(await exchange(emailOnly.access), 'invalid_scope', 'no scope of the subject token is one this client may have');
    });

    test('a two-hop chain nests act; /introspect returns act; revoking the person\'s grant ends every exchanged token', async () => {
      const person = await personTokens({ resource: ORDERS });
      const first = await exchange(person.access, [['resource', INVENTORY]]);
      assert.equal(first.statusCode, 200, first.body);
      const hop1 = first.json().access_token as string;
      const second = await exchange(hop1, [], basic('inventory-api', CALLER_SECRET));
      assert.equal(second.statusCode, 200, second.body);
      const hop2 = second.json().access_token as string;
      const claims = claimsOf(hop2);
      assert.equal(claims.aud, STOCK);
      assert.equal(claims.sub, 'alice');
      assert.equal(claims.client_id, 'inventory-api');
      assert.deepEqual(claims.act, { sub: 'inventory-api', act: { sub: 'orders-api' } });
      assert.ok((claims.exp as number) <= (claimsOf(hop1).exp as number));

      const atStock = (await introspect(hop2, basic(STOCK, RS_SECRET))).json();
      assert.equal(atStock.active, true);
      assert.deepEqual(atStock.act, { sub: 'inventory-api', act: { sub: 'orders-api' } });
      assert.equal(atStock.client_id, 'inventory-api');
      assert.equal(atStock.sub, 'alice');
      assert.equal(atStock.aud, STOCK);
      const atInventory = (await introspect(hop1, basic(INVENTORY, RS_SECRET))).json();
      assert.equal(atInventory.active, true);
      assert.deepEqual(atInventory.act, { sub: 'orders-api' });
      // The caller may introspect its own exchanged token; the person's client's token has no act.
      assert.equal((await introspect(hop1, basic('orders-api', CALLER_SECRET))).json().active, true);
      assert.equal((await introspect(person.access, basic('webapp', SECRET))).json().act, undefined);

      const revocation = await t.app.inject({ method: 'POST', url: '/revoke', headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic('webapp', SECRET) }, payload: form([['token', person.refresh]]) });
      assert.equal(revocation.statusCode, 200);
      assert.deepEqual((await introspect(hop1, basic(INVENTORY, RS_SECRET))).json(), { active: false });
      assert.deepEqual((await introspect(hop2, basic(STOCK, RS_SECRET))).json(), { active: false });
      assert.deepEqual((await introspect(hop1, basic('orders-api', CALLER_SECRET))).json(), { active: false });
      assertError(await exchange(hop1, [], basic('inventory-api', CALLER_SECRET)), 'invalid_grant', BAD_SUBJECT);
    });

    test('the caller revoking its exchanged token ends that token only, not the person\'s grant', async () => {
      const person = await personTokens({ resource: ORDERS });
      const hop = (await exchange(person.access, [['resource', INVENTORY]])).json().access_token as string;
      const revocation = await t.app.inject({ method: 'POST', url: '/revoke', headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic('orders-api', CALLER_SECRET) }, payload: form([['token', hop]]) });
      assert.equal(revocation.statusCode, 200);
      assert.deepEqual((await introspect(hop, basic(INVENTORY, RS_SECRET))).json(), { active: false });
      assert.equal((await introspect(person.access, basic('webapp', SECRET))).json().active, true);
      assert.equal((await refresh(t.app, person.refresh)).statusCode, 200);
      // And a fresh exchange of the same subject token still works.
      assert.equal((await exchange(person.access, [['resource', INVENTORY]])).statusCode, 200);
    });

    test('/userinfo does not take an exchanged token: it is addressed to the caller\'s servers', async () => {
      const person = await personTokens({ resource: ORDERS });
      const hop = (await exchange(person.access)).json().access_token as string;
      assert.match(String(claimsOf(hop).scope), /openid/);
      const answer = await t.app.inject({ url: '/userinfo', headers: { authorization: `Bearer ${hop}` } });
      assert.equal(answer.statusCode, 401);
    });

    test('a token carries at most three nested act: the fourth exchange is invalid_grant', async () => {
      let token = (await personTokens({ resource: ORDERS })).access;
      for (let hop = 1; hop <= 3; hop += 1) {
        const response = await exchange(token, [], basic('relay', CALLER_SECRET));
        assert.equal(response.statusCode, 200, `hop ${hop}: ${response.body}`);
        token = response.json().access_token as string;
      }
      assert.deepEqual(claimsOf(token).act, { sub: 'relay', act: { sub: 'relay', act: { sub: 'relay' } } });
      assertError(await exchange(token, [], basic('relay', CALLER_SECRET)), 'invalid_grant', 'the subject token has been exchanged 3 times already, the most a token may be');
    });

    test('exp is never later than the subject token\'s', async () => {
      const subject = await personTokens({ resource: ORDERS });
      const subjectExp = claimsOf(subject.access).exp as number;
      clock += 30 * 60_000;
      const response = await exchange(subject.access, [['resource', INVENTORY]]);
      assert.equal(response.statusCode, 200, response.body);
      const claims = claimsOf(response.json().access_token);
      assert.equal(claims.exp, subjectExp);
      assert.equal(response.json().expires_in, subjectExp - (claims.iat as number));
      assert.ok(response.json().expires_in <= 30 * 60 + 1);
      // One hop further, still the first subject token's exp.
      const further = await exchange(response.json().access_token, [], basic('inventory-api', CALLER_SECRET));
      assert.equal(claimsOf(further.json().access_token).exp, subjectExp);
    });

    test('a refused exchange writes nothing, and neither does a granted one: the store is only read', async () => {
      const person = await personTokens({ resource: ORDERS });
      const service = (await postToken(t.app, [['grant_type', 'client_credentials'], ['scope', 'read']], basic('service', SECRET))).json().access_token as string;
      calls.length = 0;
      const refused = [
        await exchange(person.access, [], basic('webapp', SECRET)),
        await exchange(person.access, [['actor_token', 'x']]),
        await exchange(person.access, [['resource', 'https://nowhere.example/']]),
        await exchange(person.access, [['scope', 'email']]),
        await exchange(service),
        await exchange(person.access, [['resource', INVENTORY], ['resource', BILLING]]),
      ];
      for (const response of refused) assert.equal(response.statusCode, 400, response.body);
      const granted = await exchange(person.access, [['resource', INVENTORY]]);
      assert.equal(granted.statusCode, 200, granted.body);
      const writes = calls.filter((name) => !READS.test(name));
      assert.deepEqual(writes, [], `store writes during exchanges: ${writes.join(', ')}`);
      assert.ok(calls.includes('findGrantHolding'), 'the subject token\'s grant was looked up');
      // The person's grant is as it was: its refresh token still works.
      assert.equal((await refresh(t.app, person.refresh)).statusCode, 200);
    });
  });
}

describe('interop: openid-client genericGrantRequest as the caller, a resource server verifying with jose', () => {
  let pinpoint: TestApp;
  let issuer: string;
  let inventory: Server;
  let inventoryUrl: string;

  before(async () => {
    const port = await freePort();
    issuer = `http://127.0.0.1:${port}`;
    pinpoint = await testApp({ config: await config({ baseUrl: issuer, listen: { host: '127.0.0.1', port } }) });
    await pinpoint.app.listen({ host: '127.0.0.1', port });
    // The inventory server: a token is for it when jose verifies it against /jwks with aud its own URI exactly.
    const jwks = createRemoteJWKSet(new URL(`${issuer}/jwks`));
    inventory = createServer((request, response) => {
      const token = /^Bearer (.+)$/.exec(request.headers.authorization ?? '')?.[1] ?? '';
      jwtVerify(token, jwks, { issuer, audience: INVENTORY, typ: 'at+jwt' })
        .then(({ payload }) => {
          if (payload.act === undefined) throw new Error('not on anyone\'s behalf');
          response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ sub: payload.sub, act: payload.act }));
        })
        .catch(() => response.writeHead(401).end());
    });
    await new Promise<void>((resolve) => inventory.listen(0, '127.0.0.1', resolve));
    inventoryUrl = `http://127.0.0.1:${(inventory.address() as AddressInfo).port}/stock`;
  });
  after(async () => {
    await new Promise<void>((resolve) => inventory.close(() => resolve()));
    await pinpoint.app.close();
  });

  test('the orders server exchanges the person\'s token with openid-client\'s defaults; the inventory server accepts it, and only it', async () => {
    const grant = await signInForCode(pinpoint.app);
    const person = await exchangeCode(pinpoint.app, grant, [ORDERS]);
    assert.equal(person.statusCode, 200, person.body);
    const subjectToken = person.json().access_token as string;

    // No ClientAuth argument: openid-client v6 sends client_secret_post, its default.
    const orders = await oidc.discovery(new URL(issuer), 'orders-api', CALLER_SECRET, undefined, { execute: [oidc.allowInsecureRequests] });
    assert.ok(orders.serverMetadata().grant_types_supported?.includes(TOKEN_EXCHANGE_GRANT));
    const tokens = await oidc.genericGrantRequest(orders, TOKEN_EXCHANGE_GRANT, {
      subject_token: subjectToken,
      subject_token_type: ACCESS_TOKEN_TYPE,
      resource: INVENTORY,
    });
    assert.equal(tokens.token_type.toLowerCase(), 'bearer');
    assert.equal(tokens.issued_token_type, ACCESS_TOKEN_TYPE);
    assert.equal(tokens.refresh_token, undefined);

    const call = (token: string): Promise<Response> => fetch(inventoryUrl, { headers: { authorization: `Bearer ${token}` } });
    const accepted = await call(tokens.access_token);
    assert.equal(accepted.status, 200);
    assert.deepEqual(await accepted.json(), { sub: 'alice', act: { sub: 'orders-api' } });
    // The person's own token is not for the inventory server; nor is an exchanged token for billing.
    assert.equal((await call(subjectToken)).status, 401);
    const forBilling = await oidc.genericGrantRequest(orders, TOKEN_EXCHANGE_GRANT, { subject_token: subjectToken, subject_token_type: ACCESS_TOKEN_TYPE, resource: BILLING });
    assert.equal((await call(forBilling.access_token)).status, 401);

    // A refusal reaches openid-client as the server sent it.
    await assert.rejects(
      oidc.genericGrantRequest(orders, TOKEN_EXCHANGE_GRANT, { subject_token: subjectToken, subject_token_type: ACCESS_TOKEN_TYPE, resource: 'https://inventory.example.org' }),
      (error: unknown) => {
        const { error: code, error_description: description } = error as { error?: string; error_description?: string };
        assert.equal(code, 'invalid_target');
        assert.equal(description, 'resource "https://inventory.example.org" is not one this client may ask a token for');
        return true;
      },
    );
  });
});

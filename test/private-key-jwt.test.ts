/**
 * private_key_jwt client authentication (RFC 7523 §2.2, DESIGN.md §13): jwks_file in the config, assertions at
 * /token, /revoke, /introspect and /par over HTTP on every store, across two instances, and clients whose metadata
 * document carries jwks or names a jwks_uri (served by a real HTTPS server on 127.0.0.1).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { buildApp } from '../src/app.js';
import { ConfigInvalid, formatProblem, loadConfig } from '../src/config/load.js';
import { describeConfig } from '../src/config/report.js';
import type { ClientRecord, Config } from '../src/config/types.js';
import { hashPassword } from '../src/crypto/password.js';
import { MetadataDocuments } from '../src/clients/metadata-document.js';
import { createLogger } from '../src/log.js';
import { MemoryStore } from '../src/store/memory.js';
import { openStore } from '../src/store/open.js';
import type { Store } from '../src/store/types.js';
import { createPostgresDatabase, POSTGRES_SKIP_REASON, POSTGRES_URL, STORE_KINDS } from './helpers/databases.js';
import { appPerSuite, basic, client, form, ISSUER, pkce, REDIRECT, SECRET, testApp, type TestApp, testConfig } from './helpers/app.js';
import { startHttpsServer, type HttpsTestServer } from './helpers/https-server.js';
import { loadSigningKeys } from './helpers/keys.js';
import { assertion, JWT_BEARER, newKey, privateJwkOf, type ClientKey, type ProofAlg } from './helpers/proofs.js';

const TOKEN = `${ISSUER}/token`;
const ALGS: ProofAlg[] = ['ES256', 'EdDSA', 'RS256', 'PS256'];

let keys: ClientKey[];
let signerKey: ClientKey;
before(async () => {
  keys = await Promise.all(ALGS.map((alg) => newKey(alg)));
  signerKey = keys[0] as ClientKey;
});

function signer(jwks = { keys: keys.map((key) => key.publicJwk) }): ClientRecord {
  return client({ clientId: 'signer', kind: 'confidential', assertionKeys: { jwks }, scopes: ['read'] });
}

async function config(): Promise<Config> {
  const base = await testConfig();
  return { ...base, clients: new Map([...base.clients, ['signer', signer()]]) };
}

/** A form POST to `path` with `pairs`, optionally with an Authorization header. */
function post(app: FastifyInstance, path: string, pairs: readonly (readonly [string, string])[], authorization?: string): Promise<LightMyRequestResponse> {
  return app.inject({
    method: 'POST',
    url: path,
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...(authorization === undefined ? {} : { authorization }) },
    payload: form(pairs),
  });
}

const withAssertion = (jwt: string, clientId: string | undefined = 'signer'): (readonly [string, string])[] => [
  ...(clientId === undefined ? [] : [['client_id', clientId] as const]),
  ['client_assertion_type', JWT_BEARER],
  ['client_assertion', jwt],
];

const clientCredentials = [['grant_type', 'client_credentials'], ['scope', 'read']] as const;

function assertInvalidClient(response: LightMyRequestResponse, description: RegExp): void {
  assert.equal(response.statusCode, 401, response.body);
  assert.equal(response.json().error, 'invalid_client');
  assert.equal(response.headers['www-authenticate'], 'Basic realm="pinpoint"');
  assert.match(response.json().error_description, description);
}

for (const kind of STORE_KINDS) {
  describe(`private_key_jwt on the ${kind.name} store`, { skip: kind.skip }, () => {
    let t: TestApp;
    appPerSuite(kind, async () => ({ config: await config() }), (opened) => {
      t = opened;
    });

    test('an assertion by each of its keys authenticates the client (a confidential one: client_credentials); aud the issuer or the endpoint, string or list', async () => {
      for (const key of keys) {
        const response = await post(t.app, '/token', [...clientCredentials, ...withAssertion(await assertion(key, { clientId: 'signer', audience: ISSUER }))]);
        assert.equal(response.statusCode, 200, `${key.alg}: ${response.body}`);
      }
      for (const audience of [TOKEN, [TOKEN], ['https://elsewhere.example', ISSUER]]) {
        const response = await post(t.app, '/token', [...clientCredentials, ...withAssertion(await assertion(signerKey, { clientId: 'signer', audience }))]);
        assert.equal(response.statusCode, 200, `${JSON.stringify(audience)}: ${response.body}`);
      }
      // Without client_id: the assertion's sub names the client (RFC 7523 §3).
      const bySub = await post(t.app, '/token', [...clientCredentials, ...withAssertion(await assertion(signerKey, { clientId: 'signer', audience: ISSUER }), undefined)]);
      assert.equal(bySub.statusCode, 200, bySub.body);
    });

    test('every refused assertion is 401 invalid_client saying why; two methods at once is invalid_request', async () => {
      const stranger = await newKey('ES256');
      const signed = (options: Partial<Parameters<typeof assertion>[1]> = {}, key: Parameters<typeof assertion>[0] = signerKey): Promise<string> =>
        assertion(key, { clientId: 'signer', audience: ISSUER, ...options });
      const cases: [string, (readonly [string, string])[], RegExp][] = [
        ['an unknown key', withAssertion(await signed({}, stranger)), /not signed by a key of this client/],
        ['HS256', withAssertion(await signed({}, { alg: 'HS256', privateKey: new TextEncoder().encode(SECRET.repeat(3)) })), /must be signed with one of ES256, EdDSA, RS256, PS256/],
        ['iss of another', withAssertion(await signed({ claims: { iss: 'webapp' } })), /iss must be the client_id/],
        ['sub of another', withAssertion(await signed({ claims: { sub: 'webapp' } })), /sub must be the client_id/],
        ['aud elsewhere', withAssertion(await signed({ audience: 'https://elsewhere.example' })), /aud must name the issuer or this endpoint/],
        ['aud of /revoke at /token', withAssertion(await signed({ audience: `${ISSUER}/revoke` })), /aud must name the issuer or this endpoint/],
        ['no aud', withAssertion(await signed({ claims: { aud: undefined } })), /has no aud claim/],
        ['no exp', withAssertion(await signed({ expiresIn: null })), /has no exp claim/],
        ['exp 6 minutes ahead', withAssertion(await signed({ expiresIn: 360 })), /exp is more than 5 minutes ahead/],
        ['expired', withAssertion(await signed({ expiresIn: -10 })), /has expired/],
        ['no jti', withAssertion(await signed({ jti: null })), /has no jti claim/],
        ['not a JWT', withAssertion('not-a-jwt'), /not a valid signed JWT/],
        ['another assertion type', [['client_id', 'signer'], ['client_assertion_type', 'urn:ietf:params:oauth:client-assertion-type:saml2-bearer'], ['client_assertion', await signed()]], /client_assertion_type must be urn:ietf:params:oauth:client-assertion-type:jwt-bearer/],
        ['a type without an assertion', [['client_id', 'signer'], ['client_assertion_type', JWT_BEARER]], /client_assertion is required/],
        ['client_id of another', withAssertion(await signed(), 'webapp'), /does not authenticate with private_key_jwt/],
        ['a secret from a key client', [['client_id', 'signer'], ['client_secret', SECRET]], /authenticates with private_key_jwt \(client_assertion\); it has no secret/],
        ['client_id alone', [['client_id', 'signer']], /must authenticate with private_key_jwt/],
      ];
      for (const [name, pairs, description] of cases) {
        const response = await post(t.app, '/token', [...clientCredentials, ...pairs]);
        assert.equal(response.statusCode, 401, `${name}: ${response.body}`);
        assertInvalidClient(response, description);
      }
      assertInvalidClient(await post(t.app, '/token', clientCredentials, basic('signer', SECRET)), /it has no secret/);
      const both = await post(t.app, '/token', [...clientCredentials, ...withAssertion(await signed()), ['client_secret', SECRET]]);
      assert.equal(both.statusCode, 400);
      assert.equal(both.json().error, 'invalid_request');
      const basicToo = await post(t.app, '/token', [...clientCredentials, ...withAssertion(await signed(), undefined)], basic('webapp', SECRET));
      assert.equal(basicToo.json().error, 'invalid_request');
    });

    test('an assertion is accepted once; one refused for itself does not use up its jti', async () => {
      const jti = randomUUID();
      const expired = await assertion(signerKey, { clientId: 'signer', audience: ISSUER, jti, expiresIn: -10 });
      assertInvalidClient(await post(t.app, '/token', [...clientCredentials, ...withAssertion(expired)]), /has expired/);
      const good = await assertion(signerKey, { clientId: 'signer', audience: ISSUER, jti });
      assert.equal((await post(t.app, '/token', [...clientCredentials, ...withAssertion(good)])).statusCode, 200);
      assertInvalidClient(await post(t.app, '/token', [...clientCredentials, ...withAssertion(good)]), /already used/);
      // The same jti in a new assertion is a replay too (RFC 7523 §3: the jti is what is used once).
      const again = await assertion(signerKey, { clientId: 'signer', audience: TOKEN, jti });
      assertInvalidClient(await post(t.app, '/token', [...clientCredentials, ...withAssertion(again)]), /already used/);
    });

    test('a spent assertion is refused before the grant judges anything: it cannot learn whether a code or refresh token is good', async () => {
      const spent = await assertion(signerKey, { clientId: 'signer', audience: ISSUER });
      assert.equal((await post(t.app, '/token', [...clientCredentials, ...withAssertion(spent)])).statusCode, 200);
      for (const grant of [
        [['grant_type', 'authorization_code'], ['code', 'not-a-code'], ['redirect_uri', 'https://app.example/cb'], ['code_verifier', 'v'.repeat(43)]],
        [['grant_type', 'refresh_token'], ['refresh_token', 'not-a-token']],
        [['grant_type', 'client_credentials'], ['scope', 'not-allowed']],
      ] as [string, string][][]) {
        assertInvalidClient(await post(t.app, '/token', [...grant, ...withAssertion(spent)]), /already used/);
      }
    });

    test('a request refused after the client authenticated records nothing: its assertion stays usable (DESIGN.md §1)', async () => {
      const good = await assertion(signerKey, { clientId: 'signer', audience: ISSUER });
      const refused = await post(t.app, '/token', [['grant_type', 'client_credentials'], ['scope', 'not-allowed'], ...withAssertion(good)]);
      assert.equal(refused.statusCode, 400, refused.body);
      assert.equal(refused.json().error, 'invalid_scope');
      const pushedBadly = await post(t.app, '/par', [['response_type', 'token'], ...withAssertion(good)]);
      assert.equal(pushedBadly.statusCode, 400, pushedBadly.body);
      assert.equal((await post(t.app, '/token', [...clientCredentials, ...withAssertion(good)])).statusCode, 200, 'the assertion was not used up');
      assertInvalidClient(await post(t.app, '/token', [...clientCredentials, ...withAssertion(good)]), /already used/);
    });

    test('/revoke, /introspect and /par take assertions addressed to the issuer, to themselves or to /token (RFC 7523 §3, RFC 9126 §2), not to another endpoint', async () => {
      const issued = await post(t.app, '/token', [...clientCredentials, ...withAssertion(await assertion(signerKey, { clientId: 'signer', audience: ISSUER }))]);
      const accessToken = issued.json().access_token as string;
      // RFC 7523 §3: the token endpoint's URL names the server too.
      for (const audience of [`${ISSUER}/introspect`, ISSUER, TOKEN]) {
        const introspected = await post(t.app, '/introspect', [['token', accessToken], ...withAssertion(await assertion(signerKey, { clientId: 'signer', audience }))]);
        assert.equal(introspected.statusCode, 200, introspected.body);
        assert.equal(introspected.json().active, true);
      }
      assertInvalidClient(await post(t.app, '/introspect', [['token', accessToken], ['client_id', 'signer'], ['client_secret', SECRET]]), /no secret/);

      const { challenge } = pkce();
      const pushed = await post(t.app, '/par', [
        ['response_type', 'code'], ['redirect_uri', REDIRECT], ['scope', 'read'], ['code_challenge', challenge], ['code_challenge_method', 'S256'],
        ...withAssertion(await assertion(keys[2] as ClientKey, { clientId: 'signer', audience: `${ISSUER}/par` })),
      ]);
      assert.equal(pushed.statusCode, 201, pushed.body);
      // RFC 9126 §2: at /par the token endpoint's URL is an audience too; another endpoint's is not.
      const pushedForToken = await post(t.app, '/par', [
        ['response_type', 'code'], ['redirect_uri', REDIRECT], ['scope', 'read'], ['code_challenge', challenge], ['code_challenge_method', 'S256'],
        ...withAssertion(await assertion(signerKey, { clientId: 'signer', audience: TOKEN })),
      ]);
      assert.equal(pushedForToken.statusCode, 201, pushedForToken.body);
      assertInvalidClient(await post(t.app, '/par', [['response_type', 'code'], ...withAssertion(await assertion(signerKey, { clientId: 'signer', audience: `${ISSUER}/revoke` }))]), /aud must name/);

      assertInvalidClient(await post(t.app, '/introspect', [['token', accessToken], ...withAssertion(await assertion(signerKey, { clientId: 'signer', audience: `${ISSUER}/revoke` }))]), /aud must name/);
      const revokedForToken = await post(t.app, '/revoke', [['token', 'not-a-token'], ...withAssertion(await assertion(signerKey, { clientId: 'signer', audience: TOKEN }))]);
      assert.equal(revokedForToken.statusCode, 200, revokedForToken.body);
      const revoked = await post(t.app, '/revoke', [['token', accessToken], ...withAssertion(await assertion(keys[1] as ClientKey, { clientId: 'signer', audience: `${ISSUER}/revoke` }))]);
      assert.equal(revoked.statusCode, 200, revoked.body);
      const after = await post(t.app, '/introspect', [['token', accessToken], ...withAssertion(await assertion(signerKey, { clientId: 'signer', audience: ISSUER }))]);
      assert.deepEqual(after.json(), { active: false });
      assertInvalidClient(await post(t.app, '/revoke', [['token', accessToken], ['client_id', 'signer']]), /must authenticate with private_key_jwt/);
    });
  });
}

const SHARED = [
  {
    name: 'one SQLite file',
    open: async (): Promise<{ stores: [Store, Store]; cleanup: () => Promise<void> }> => {
      const folder = await mkdtemp(join(tmpdir(), 'pinpoint-pkjwt-'));
      const path = join(folder, 'pinpoint.db');
      return { stores: [await openStore({ kind: 'sqlite', path }), await openStore({ kind: 'sqlite', path })], cleanup: () => rm(folder, { recursive: true, force: true }) };
    },
  },
  {
    name: 'one PostgreSQL database',
    ...(POSTGRES_URL === undefined && { skip: POSTGRES_SKIP_REASON }),
    open: async (): Promise<{ stores: [Store, Store]; cleanup: () => Promise<void> }> => {
      const database = await createPostgresDatabase();
      const open = () => openStore({ kind: 'postgres', url: database.url, schema: 'public' });
      return { stores: [await open(), await open()], cleanup: database.drop };
    },
  },
] as const;

for (const shared of SHARED) {
  describe(`client assertions across two instances on ${shared.name}`, { skip: 'skip' in shared ? shared.skip : undefined }, () => {
    test('an assertion accepted by one instance is refused by the other; racing it at both, one wins', async () => {
      const opened = await shared.open();
      const cfg = await config();
      const apps = [await testApp({ store: opened.stores[0], config: cfg }), await testApp({ store: opened.stores[1], config: cfg })] as const;
      try {
        const once = await assertion(signerKey, { clientId: 'signer', audience: ISSUER });
        assert.equal((await post(apps[0].app, '/token', [...clientCredentials, ...withAssertion(once)])).statusCode, 200);
        assertInvalidClient(await post(apps[1].app, '/token', [...clientCredentials, ...withAssertion(once)]), /already used/);
        const raced = await assertion(signerKey, { clientId: 'signer', audience: ISSUER });
        const answers = await Promise.all(apps.map((each) => post(each.app, '/token', [...clientCredentials, ...withAssertion(raced)])));
        assert.deepEqual(answers.map((answer) => answer.statusCode).sort(), [200, 401]);
      } finally {
        for (const each of apps) {
          await each.app.close();
          await each.store.close();
        }
        await opened.cleanup();
      }
    });
  });
}

describe('metadata-document clients with private_key_jwt (DESIGN.md §13)', () => {
  let documentServer: HttpsTestServer;
  let origin = '';
  const served = new Map<string, unknown>();
  const hits = new Map<string, number>();
  let app: FastifyInstance;
  let documents: MetadataDocuments;
  let docKey: ClientKey;
  // The document cache's clock runs this far ahead of the real one (the cooldown of a key set fetched again).
  let skewMs = 0;

  before(async () => {
    documentServer = await startHttpsServer((request, response) => {
      const path = request.url ?? '';
      hits.set(path, (hits.get(path) ?? 0) + 1);
      const body = served.get(path);
      if (body === undefined) response.writeHead(404).end();
      else response.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'max-age=300' }).end(JSON.stringify(body));
    });
    origin = documentServer.origin;
    docKey = await newKey('ES256');
    const base = await testConfig();
    const config: Config = {
      ...base,
      dynamicClients: { audience: ['https://mcp.example.org/mcp'], metadataDocuments: true, registration: 'off', scopes: ['openid'], refreshReuseGraceMs: 0, allowPrivateAddresses: true },
    };
    const store = new MemoryStore();
    documents = new MetadataDocuments({ allowPrivateAddresses: true, ca: documentServer.cert, now: () => Date.now() + skewMs });
    ({ app } = await buildApp({ config, store, keys: await loadSigningKeys(store), documents }));
    await app.ready();
  });
  after(async () => {
    await app.close();
    await documents.close();
    await documentServer.close();
  });

  /** Serves a document at `path` whose client_id is its URL; returns that client_id. */
  function serveDocument(path: string, extra: Record<string, unknown>): string {
    const clientId = `${origin}${path}`;
    served.set(path, { client_id: clientId, redirect_uris: ['https://app.example/callback'], ...extra });
    return clientId;
  }

  const revokeAs = async (clientId: string, key: ClientKey, pairs: (readonly [string, string])[] = []): Promise<LightMyRequestResponse> =>
    post(app, '/revoke', [['token', 'whatever'], ...withAssertion(await assertion(key, { clientId, audience: ISSUER }), clientId), ...pairs]);

  test('jwks inline: the assertion authenticates; the client is confidential, so client_id alone does not', async () => {
    const clientId = serveDocument('/inline.json', { token_endpoint_auth_method: 'private_key_jwt', jwks: { keys: [docKey.publicJwk] } });
    assert.equal((await revokeAs(clientId, docKey)).statusCode, 200);
    assertInvalidClient(await revokeAs(clientId, await newKey('ES256')), /not signed by a key of this client/);
    assertInvalidClient(await post(app, '/revoke', [['token', 'whatever'], ['client_id', clientId]]), /must authenticate with private_key_jwt/);
  });

  test('jwks_uri: fetched under the document rules and cached like the document', async () => {
    served.set('/keys.json', { keys: [docKey.publicJwk] });
    const clientId = serveDocument('/by-uri.json', { token_endpoint_auth_method: 'private_key_jwt', jwks_uri: `${origin}/keys.json` });
    assert.equal((await revokeAs(clientId, docKey)).statusCode, 200);
    assert.equal((await revokeAs(clientId, docKey)).statusCode, 200);
    assert.equal(hits.get('/keys.json'), 1, 'the key set is fetched once and cached');
    served.set('/missing-keys.json', undefined);
    const broken = serveDocument('/broken-uri.json', { token_endpoint_auth_method: 'private_key_jwt', jwks_uri: `${origin}/missing-keys.json` });
    assertInvalidClient(await revokeAs(broken, docKey), /jwks_uri URL answered HTTP 404/);
  });

  test('a client that rotates the keys at its jwks_uri: an assertion by a key the cached set lacks fetches the set again, at most once a minute per URL', async () => {
    const first = await newKey('ES256');
    const second = await newKey('ES256');
    served.set('/rotating-keys.json', { keys: [{ ...first.publicJwk, kid: 'first' }] });
    const clientId = serveDocument('/rotating.json', { token_endpoint_auth_method: 'private_key_jwt', jwks_uri: `${origin}/rotating-keys.json` });
    const revokeWith = async (key: ClientKey, kid?: string): Promise<LightMyRequestResponse> =>
      post(app, '/revoke', [['token', 'whatever'], ...withAssertion(await assertion(key, { clientId, audience: ISSUER, ...(kid !== undefined && { header: { kid } }) }), clientId)]);
    assert.equal((await revokeWith(first, 'first')).statusCode, 200);
    assert.equal(hits.get('/rotating-keys.json'), 1);

    served.set('/rotating-keys.json', { keys: [{ ...second.publicJwk, kid: 'second' }] });
    // Within a minute of the fetch the set is not fetched again, whatever the assertions name.
    assertInvalidClient(await revokeWith(second, 'second'), /not signed by a key of this client/);
    assert.equal(hits.get('/rotating-keys.json'), 1);

    skewMs += 61_000;
    assert.equal((await revokeWith(second, 'second')).statusCode, 200, 'the rotated key is found by fetching the set again');
    assert.equal(hits.get('/rotating-keys.json'), 2);
    assertInvalidClient(await revokeWith(first, 'first'), /not signed by a key of this client/);
    for (let i = 0; i < 10; i += 1) assertInvalidClient(await revokeWith(await newKey('ES256'), `made-up-${i}`), /not signed by a key of this client/);
    assert.equal(hits.get('/rotating-keys.json'), 2, 'assertions naming made-up keys fetch nothing more within the minute');

    // A set without kids: an assertion its one key does not verify fetches it again too, once a minute at most.
    const third = await newKey('ES256');
    served.set('/rotating-keys.json', { keys: [third.publicJwk] });
    skewMs += 61_000;
    assert.equal((await revokeWith(third)).statusCode, 200);
    assert.equal(hits.get('/rotating-keys.json'), 3);
    for (let i = 0; i < 5; i += 1) assertInvalidClient(await revokeWith(await newKey('ES256')), /not signed by a key of this client/);
    assert.equal(hits.get('/rotating-keys.json'), 3);
  });

  test('a private_key_jwt document without keys, or with a private key in jwks, names no usable client', async () => {
    const keyless = serveDocument('/keyless.json', { token_endpoint_auth_method: 'private_key_jwt' });
    assertInvalidClient(await revokeAs(keyless, docKey), /client authentication failed/);
    const leaky = serveDocument('/leaky.json', { token_endpoint_auth_method: 'private_key_jwt', jwks: { keys: [await privateJwkOf(docKey)] } });
    assertInvalidClient(await revokeAs(leaky, docKey), /client authentication failed/);
    const resolution = await documents.resolve(leaky);
    assert.equal(resolution.ok, false);
    assert.match(resolution.ok ? '' : resolution.reason, /jwks keys\[0\] holds private key members/);
  });
});

describe('jwks_file in the config (DESIGN.md §3, §7, §13)', () => {
  let user = '';
  before(async () => {
    user = `user "alice" {\n  password_hash = "${await hashPassword('wonderland', { N: 2 ** 14, r: 8, p: 1 })}"\n}\n`;
  });

  async function fixture(clientBody: string, files: Record<string, string | 'fifo'>): Promise<string> {
    const folder = await mkdtemp(join(tmpdir(), 'pinpoint-jwks-config-'));
    for (const [name, content] of Object.entries(files)) {
      const path = join(folder, name);
      await mkdir(dirname(path), { recursive: true });
      if (content === 'fifo') execFileSync('mkfifo', [path]);
      else {
        await writeFile(path, content);
        await chmod(path, 0o600);
      }
    }
    const file = join(folder, 'config.hcl');
    await writeFile(file, `base_url = "https://auth.example.org"\n${user}client "partner" {\n${clientBody}\n  audience = ["https://api.example.org/"]\n}\n`);
    return file;
  }

  async function problems(clientBody: string, files: Record<string, string | 'fifo'>): Promise<string[]> {
    try {
      await loadConfig(await fixture(clientBody, files));
    } catch (error) {
      if (error instanceof ConfigInvalid) return error.problems.map(formatProblem);
      throw error;
    }
    return assert.fail('the configuration should have been refused');
  }

  test('a JWK Set of public keys: a confidential client authenticating with private_key_jwt; check says so', async () => {
    const jwks = JSON.stringify({ keys: keys.map((key) => key.publicJwk) });
    const { config, warnings } = await loadConfig(await fixture('  jwks_file = "keys/partner.json"\n  require_dpop = true\n  require_par = true\n  redirect_uris = ["https://app.example.org/cb"]', { 'keys/partner.json': jwks }));
    const partner = config.clients.get('partner');
    assert.equal(partner?.kind, 'confidential');
    assert.equal(partner?.secret, undefined);
    assert.deepEqual(partner?.assertionKeys, { jwks: JSON.parse(jwks) });
    assert.equal(partner?.requireDpop, true);
    assert.equal(partner?.requirePar, true);
    const facts = describeConfig(config, warnings).clients?.find((each) => each.clientId === 'partner');
    assert.equal(facts?.authentication, 'private_key_jwt');
    assert.equal(facts?.requireDpop, true);
    assert.equal(JSON.stringify(describeConfig(config, warnings)).includes(keys[0]?.publicJwk.x as string), false, 'check prints no key material');
  });

  test('a jwks_file client is confidential for token exchange too (DESIGN.md §12)', async () => {
    const jwks = JSON.stringify({ keys: [signerKey.publicJwk] });
    const body = '  jwks_file = "k.json"\n  token_exchange {\n    subject_audience = ["https://api.example.org/"]\n  }';
    const { config } = await loadConfig(await fixture(body, { 'k.json': jwks }));
    assert.deepEqual(config.clients.get('partner')?.tokenExchange, { subjectAudience: ['https://api.example.org/'] });
  });

  test('private members, not a JWK Set, a FIFO, over 64 KiB, with secret_file or device: config errors naming jwks_file', async () => {
    const privateSet = JSON.stringify({ keys: [await privateJwkOf(signerKey)] });
    const cases: [string, Record<string, string | 'fifo'>, RegExp][] = [
      ['  jwks_file = "k.json"', { 'k.json': privateSet }, /jwks_file "k\.json" keys\[0\] holds private key members \(d\)/],
      ['  jwks_file = "k.json"', { 'k.json': JSON.stringify(signerKey.publicJwk) }, /jwks_file "k\.json" is not a JWK Set/],
      ['  jwks_file = "k.json"', { 'k.json': 'not json' }, /jwks_file "k\.json" is not valid JSON/],
      ['  jwks_file = "k.json"', { 'k.json': JSON.stringify({ keys: [{ kty: 'oct', k: 'c2VjcmV0' }] }) }, /keys\[0\] holds private key members \(k\)/],
      ['  jwks_file = "k.json"', { 'k.json': 'fifo' }, /jwks_file "k\.json" is not a regular file/],
      ['  jwks_file = "k.json"', { 'k.json': JSON.stringify({ keys: [signerKey.publicJwk], padding: 'x'.repeat(70 * 1024) }) }, /jwks_file "k\.json" is larger than 64 KiB/],
      ['  jwks_file = "k.json"', {}, /jwks_file "k\.json" does not exist/],
      ['  jwks_file = "k.json"\n  secret_file = "s"', { 'k.json': JSON.stringify({ keys: [signerKey.publicJwk] }), s: 'secret\n' }, /jwks_file is not allowed with secret_file/],
      ['  jwks_file = "k.json"\n  device = true', { 'k.json': JSON.stringify({ keys: [signerKey.publicJwk] }) }, /jwks_file is not allowed with device = true/],
    ];
    for (const [body, files, expected] of cases) {
      const lines = await problems(body, files);
      assert.ok(lines.some((line) => expected.test(line) && line.includes('client "partner"')), `${expected} not in:\n${lines.join('\n')}`);
    }
  });
});

describe('client assertions in the logs', () => {
  test('no assertion appears in any log line at level trace, accepted or refused', async () => {
    const lines: string[] = [];
    const t = await testApp({ config: await config(), logger: createLogger('trace', { write: (line: string) => void lines.push(line) }) });
    try {
      const good = await assertion(signerKey, { clientId: 'signer', audience: ISSUER });
      const bad = await assertion(signerKey, { clientId: 'signer', audience: 'https://elsewhere.example' });
      assert.equal((await post(t.app, '/token', [...clientCredentials, ...withAssertion(good)])).statusCode, 200);
      assert.equal((await post(t.app, '/token', [...clientCredentials, ...withAssertion(bad)])).statusCode, 401);
      assert.ok(lines.length > 0);
      for (const secret of [good, bad, good.split('.')[2] as string]) assert.ok(!lines.some((line) => line.includes(secret)), 'an assertion reached the log');
    } finally {
      await t.app.close();
    }
  });
});

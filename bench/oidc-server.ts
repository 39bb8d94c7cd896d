/**
 * oidc-provider configured like Pinpoint for the benchmark: resource indicators on, ES256 JWT access tokens
 * for the resource servers of the client's audience, one confidential client (client_secret_basic),
 * refresh-token rotation on, its own in-memory adapter, introspection on (for opaque access tokens to FILES, the one
 * format it can introspect: it stores a JWT access token under its jti, not its value). Grants, refresh tokens and codes are created on
 * request through its models (Grant, RefreshToken, AuthorizationCode), as its grant handlers would.
 */
import { createServer } from 'node:http';
import { exportJWK, generateKeyPair } from 'jose';
import Provider from 'oidc-provider';
import MemoryAdapter from 'oidc-provider/lib/adapters/memory_adapter.js';
import LRU from 'oidc-provider/lib/helpers/lru.js';
import {
  API,
  AUDIENCE,
  BASIC_AUTH,
  CLIENT_ID,
  FILES,
  CLIENT_SECRET,
  freePort,
  mapInBatches,
  REDIRECT_URI,
  REFRESH_LIFETIME_MS,
  SCOPE,
  SEEDED_CODE_LIFETIME_MS,
  serveRpc,
  shuffled,
} from './common.js';
import { profilerCommands } from './inspector.js';
import { challengeOf, newVerifier } from './pkce.js';
import { serverCommands } from './server-commands.js';

/** The models the seeding uses, typed here since the package ships no types. */
interface Models {
  readonly Client: { find(clientId: string): Promise<unknown> };
  readonly Grant: new (init: { accountId: string; clientId: string }) => {
    addOIDCScope(scope: string): void;
    addResourceScope(resource: string, scope: string): void;
    save(): Promise<string>;
  };
  readonly RefreshToken: new (init: Record<string, unknown>) => { save(): Promise<string> };
  readonly AuthorizationCode: new (init: Record<string, unknown>) => { save(): Promise<string> };
}

const port = await freePort();
const issuer = `http://127.0.0.1:${port}`;
const es256 = await generateKeyPair('ES256', { extractable: true });
const rs256 = await generateKeyPair('RS256', { extractable: true, modulusLength: 2048 });

// The package's in-memory adapter, with room for the pre-created tokens: its default store keeps only 1,000 entries.
const storage = new LRU({ maxSize: 50_000_000 });
const seconds = (ms: number): number => Math.floor(ms / 1000);

const provider = new Provider(issuer, {
  adapter: (model: string) => new MemoryAdapter(model, storage),
  clients: [
    {
      client_id: CLIENT_ID,
      client_secret: CLIENT_SECRET,
      redirect_uris: [REDIRECT_URI],
      grant_types: ['authorization_code', 'refresh_token', 'client_credentials'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
      scope: `openid offline_access ${SCOPE}`,
    },
  ],
  jwks: {
    keys: [
      { ...(await exportJWK(es256.privateKey)), kid: 'bench-es256', alg: 'ES256', use: 'sig' },
      { ...(await exportJWK(rs256.privateKey)), kid: 'bench-rs256', alg: 'RS256', use: 'sig' },
    ],
  },
  cookies: { keys: ['bench-cookie-key-not-secret'] },
  scopes: ['openid', 'offline_access', SCOPE],
  findAccount: async (_ctx: unknown, sub: string) => ({ accountId: sub, claims: async () => ({ sub }) }),
  rotateRefreshToken: true,
  ttl: {
    AccessToken: 3600,
    ClientCredentials: 3600,
    AuthorizationCode: seconds(SEEDED_CODE_LIFETIME_MS),
    RefreshToken: seconds(REFRESH_LIFETIME_MS),
    Grant: seconds(REFRESH_LIFETIME_MS),
  },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    introspection: { enabled: true },
    resourceIndicators: {
      enabled: true,
      // client_credentials names no resource at Pinpoint either; here it gets the first resource server.
      defaultResource: async (ctx: { oidc: { params?: { grant_type?: string } } }, _client: unknown, oneOf?: string[]) =>
        oneOf ?? (ctx.oidc.params?.grant_type === 'client_credentials' ? API : undefined),
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx: unknown, resource: string) => {
        if (!AUDIENCE.includes(resource)) throw new Error(`unknown resource ${resource}`);
        // FILES gets opaque tokens, the ones the introspection case asks about; no other case asks for FILES.
        if (resource === FILES) return { scope: SCOPE, accessTokenTTL: 3600, accessTokenFormat: 'opaque' };
        return { scope: SCOPE, accessTokenTTL: 3600, accessTokenFormat: 'jwt', jwt: { sign: { alg: 'ES256' } } };
      },
    },
  },
});
provider.on('server_error', (_ctx: unknown, error: unknown) => process.stderr.write(`oidc-provider server_error: ${String(error)}\n`));
const models = provider as unknown as Models;
const client = await models.Client.find(CLIENT_ID);
if (client === undefined) throw new Error('client not found');

let seeded = 0;

async function newGrant(accountId: string): Promise<string> {
  const grant = new models.Grant({ accountId, clientId: CLIENT_ID });
  grant.addOIDCScope('offline_access');
  for (const resource of AUDIENCE) grant.addResourceScope(resource, SCOPE);
  return grant.save();
}

async function seedRefreshTokens(count: number): Promise<string[]> {
  const lines: string[] = [];
  for (let i = 0; i < count; i += 1) {
    const accountId = `user-${(seeded += 1)}`;
    const grantId = await newGrant(accountId);
    const token = new models.RefreshToken({
      accountId,
      client,
      grantId,
      gty: 'authorization_code',
      scope: `offline_access ${SCOPE}`,
      resource: [...AUDIENCE],
      authTime: seconds(Date.now()),
      rotations: 0,
    });
    lines.push(await token.save());
  }
  // In no particular order, as for Pinpoint (its SQLite pages would otherwise be read in insertion order).
  return shuffled(lines);
}

async function seedCodes(count: number): Promise<string[]> {
  const lines: string[] = [];
  for (let i = 0; i < count; i += 1) {
    const accountId = `user-${(seeded += 1)}`;
    const grantId = await newGrant(accountId);
    const verifier = newVerifier();
    const code = new models.AuthorizationCode({
      accountId,
      client,
      grantId,
      scope: `offline_access ${SCOPE}`,
      resource: [...AUDIENCE],
      redirectUri: REDIRECT_URI,
      codeChallenge: challengeOf(verifier),
      codeChallengeMethod: 'S256',
      authTime: seconds(Date.now()),
    });
    lines.push(`${await code.save()} ${verifier}`);
  }
  return lines;
}

/** Opaque access tokens for FILES as the client gets them, one refresh-token exchange each at its own /token. */
async function seedAccessTokens(count: number): Promise<string[]> {
  return mapInBatches(await seedRefreshTokens(count), 16, async (refreshToken) => {
    const response = await fetch(`${issuer}/token`, {
      method: 'POST',
      headers: { authorization: BASIC_AUTH, 'content-type': 'application/x-www-form-urlencoded' },
      body: `grant_type=refresh_token&refresh_token=${encodeURIComponent(refreshToken)}&resource=${encodeURIComponent(FILES)}`,
    });
    const body = await response.text();
    if (response.status !== 200) throw new Error(`seeding an access token: ${response.status} ${body}`);
    return (JSON.parse(body) as { access_token: string }).access_token;
  });
}

const server = createServer(provider.callback());

serveRpc({
  ...profilerCommands(),
  ...serverCommands({ refresh: seedRefreshTokens, code: seedCodes, access: seedAccessTokens }),
  async stop() {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    setImmediate(() => process.exit(0));
    return true;
  },
});

await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
process.send?.({ ready: true, port, issuer, state: 'oidc-provider memory adapter' });

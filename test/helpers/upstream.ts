/** A real OpenID Connect provider (oidc-provider, dev interactions) on loopback, as Pinpoint's upstream in tests. */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair } from 'jose';
import Provider from 'oidc-provider';
import type { FederationRecord } from '../../src/config/types.js';

export const UPSTREAM_CLIENT_ID = 'pinpoint';
export const UPSTREAM_SECRET = 'upstream-secret';

export interface Upstream {
  readonly issuer: string;
  readonly port: number;
  close(): Promise<void>;
}

/** A loopback port that is free right now (nothing listens on it once this resolves). */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** The upstream's accounts: any login is accepted; its claims are derived from the login. */
export function upstreamEmail(login: string): string {
  return `${login}@upstream.example`;
}

/** Starts the provider on `port` (0: any free one) with one confidential client redirecting to `callbacks`. */
export async function startUpstream(callbacks: string | readonly string[], port = 0, options: { emailVerified?: boolean } = {}): Promise<Upstream> {
  const server: Server = createServer();
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  const actual = (server.address() as AddressInfo).port;
  const issuer = `http://127.0.0.1:${actual}`;
  const { privateKey } = await generateKeyPair('ES256', { extractable: true });
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: UPSTREAM_CLIENT_ID,
        client_secret: UPSTREAM_SECRET,
        redirect_uris: typeof callbacks === 'string' ? [callbacks] : [...callbacks],
        id_token_signed_response_alg: 'ES256',
        token_endpoint_auth_method: 'client_secret_basic',
      },
    ],
    jwks: { keys: [{ ...(await exportJWK(privateKey)), kid: 'upstream-es256', alg: 'ES256', use: 'sig' }] },
    cookies: { keys: ['upstream-cookie-key-for-tests-only'] },
    claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'] },
    features: { devInteractions: { enabled: true } },
    async findAccount(_ctx: unknown, sub: string) {
      return {
        accountId: sub,
        async claims() {
          return { sub, email: upstreamEmail(sub), email_verified: options.emailVerified ?? true, name: `Upstream ${sub}` };
        },
      };
    },
  });
  server.on('request', provider.callback());
  return {
    issuer,
    port: actual,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export function federation(name: string, issuer: string, extra: Partial<FederationRecord> = {}): FederationRecord {
  return { name, issuer, clientId: UPSTREAM_CLIENT_ID, clientSecret: UPSTREAM_SECRET, scopes: ['openid', 'email', 'profile'], ...extra };
}

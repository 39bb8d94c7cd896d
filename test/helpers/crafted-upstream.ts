/**
 * A small scriptable OpenID Connect upstream on loopback, for answers a real provider would not give: each scenario is
 * an issuer path `/s/{name}` with its own discovery document; /authorize answers at once (no login page) with a code,
 * and /token returns an ID token shaped by the scenario. It checks the client's secret and PKCE as a provider does.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { UPSTREAM_CLIENT_ID, UPSTREAM_SECRET } from './upstream.js';

type Claims = Record<string, unknown>;

export interface Scenario {
  /** Shapes the ID token's claims (given iss, sub, aud, exp, iat, nonce, email, email_verified, name). */
  idToken?: (claims: Claims) => Claims;
  /** The userinfo answer; default: the ID token's sub, email, email_verified and name. */
  userinfo?: Claims;
  /** `none`: an unsigned ID token; `stranger`: signed by a key that is not the upstream's, with the upstream's kid. */
  signing?: 'upstream' | 'none' | 'stranger';
  /** The discovery document's id_token_signing_alg_values_supported; default ["RS256"]. */
  algs?: readonly string[];
  /** A discovery answered with this status (an upstream that is down). */
  discoveryStatus?: number;
}

export interface CraftedUpstream {
  issuerOf(scenario: string): string;
  /** The query of every authorization request the scenario received, in order. */
  authorizationRequests(scenario: string): URLSearchParams[];
  /** How many times the scenario's discovery document was asked for. */
  discoveryRequests(scenario: string): number;
  close(): Promise<void>;
}

const b64u = (data: string | Buffer): string => Buffer.from(data).toString('base64url');

/** Starts the upstream on a free loopback port; `scenarios` are read at each request, so a test may change them between sign-ins. */
export async function startCraftedUpstream(scenarios: Record<string, Scenario>): Promise<CraftedUpstream> {
  const key = await generateKeyPair('RS256', { extractable: true });
  const stranger = await generateKeyPair('RS256');
  const publicJwk = { ...(await exportJWK(key.publicKey)), kid: 'k1', alg: 'RS256', use: 'sig' };
  const codes = new Map<string, { scenario: string; nonce: string | null; challenge: string | null; redirectUri: string | null }>();
  const authorizations = new Map<string, URLSearchParams[]>();
  const discoveries = new Map<string, number>();
  let base = '';

  async function idToken(scenario: Scenario, issuer: string, nonce: string | null): Promise<string> {
    const now = Math.floor(Date.now() / 1000);
    const defaults: Claims = { iss: issuer, sub: 'user-1', aud: UPSTREAM_CLIENT_ID, exp: now + 300, iat: now, nonce, email: 'user-1@crafted.example', email_verified: true, name: 'Crafted User' };
    const claims = scenario.idToken?.(defaults) ?? defaults;
    if (scenario.signing === 'none') return `${b64u(JSON.stringify({ alg: 'none', typ: 'JWT' }))}.${b64u(JSON.stringify(claims))}.`;
    const signer = scenario.signing === 'stranger' ? stranger.privateKey : key.privateKey;
    return new SignJWT(claims).setProtectedHeader({ alg: 'RS256', kid: 'k1', typ: 'JWT' }).sign(signer);
  }

  const server = createServer((request, response) => {
    void (async () => {
      const url = new URL(request.url ?? '/', base);
      const send = (status: number, body: unknown): void => {
        response.writeHead(status, { 'content-type': 'application/json' });
        response.end(JSON.stringify(body));
      };
      const match = /^\/s\/([^/]+)(\/.*)$/.exec(url.pathname);
      const name = match?.[1] ?? '';
      const scenario = scenarios[name];
      if (match === null || scenario === undefined) return send(404, { error: 'not_found' });
      const issuer = `${base}/s/${name}`;
      switch (match[2]) {
        case '/.well-known/openid-configuration':
          discoveries.set(name, (discoveries.get(name) ?? 0) + 1);
          if (scenario.discoveryStatus !== undefined) return send(scenario.discoveryStatus, { error: 'down' });
          return send(200, {
            issuer,
            authorization_endpoint: `${issuer}/authorize`,
            token_endpoint: `${issuer}/token`,
            jwks_uri: `${issuer}/jwks`,
            userinfo_endpoint: `${issuer}/userinfo`,
            response_types_supported: ['code'],
            subject_types_supported: ['public'],
            id_token_signing_alg_values_supported: scenario.algs ?? ['RS256'],
            token_endpoint_auth_methods_supported: ['client_secret_basic'],
            code_challenge_methods_supported: ['S256'],
            authorization_response_iss_parameter_supported: true,
          });
        case '/jwks':
          return send(200, { keys: [publicJwk] });
        case '/authorize': {
          const query = url.searchParams;
          authorizations.set(name, [...(authorizations.get(name) ?? []), new URLSearchParams(query)]);
          const code = b64u(randomBytes(16));
          codes.set(code, { scenario: name, nonce: query.get('nonce'), challenge: query.get('code_challenge'), redirectUri: query.get('redirect_uri') });
          const back = new URL(query.get('redirect_uri') ?? '');
          back.searchParams.set('code', code);
          back.searchParams.set('state', query.get('state') ?? '');
          back.searchParams.set('iss', issuer);
          response.writeHead(303, { location: back.href });
          return response.end();
        }
        case '/token': {
          let body = '';
          for await (const chunk of request) body += String(chunk);
          const form = new URLSearchParams(body);
          // RFC 6749 §2.3.1: each half of the Basic credentials is form-urlencoded.
          const [id, secret] = Buffer.from((request.headers.authorization ?? '').replace(/^Basic /, ''), 'base64').toString().split(':').map(decodeURIComponent);
          if (id !== UPSTREAM_CLIENT_ID || secret !== UPSTREAM_SECRET) return send(401, { error: 'invalid_client' });
          const pending = codes.get(form.get('code') ?? '');
          codes.delete(form.get('code') ?? '');
          const verifier = form.get('code_verifier') ?? '';
          if (pending === undefined || pending.scenario !== name || b64u(createHash('sha256').update(verifier).digest()) !== pending.challenge || form.get('redirect_uri') !== pending.redirectUri) {
            return send(400, { error: 'invalid_grant' });
          }
          return send(200, { access_token: `at-${name}`, token_type: 'Bearer', expires_in: 300, id_token: await idToken(scenario, issuer, pending.nonce) });
        }
        case '/userinfo':
          return send(200, scenario.userinfo ?? { sub: 'user-1', email: 'user-1@crafted.example', email_verified: true, name: 'Crafted User' });
        default:
          return send(404, { error: 'not_found' });
      }
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    issuerOf: (scenario) => `${base}/s/${scenario}`,
    authorizationRequests: (scenario) => authorizations.get(scenario) ?? [],
    discoveryRequests: (scenario) => discoveries.get(scenario) ?? 0,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

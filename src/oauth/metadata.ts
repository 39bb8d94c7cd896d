/** Authorization server metadata (RFC 8414, OIDC Discovery) and the JWK Set. */
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import type { ClientRecord, DynamicClientsConfig } from '../config/types.js';
import { DPOP_ALGS } from '../crypto/dpop.js';
import { ASYMMETRIC_ALGS } from '../crypto/jwk-set.js';
import type { SigningKeys } from '../crypto/keys.js';
import { DEVICE_CODE_GRANT, TOKEN_EXCHANGE_GRANT } from '../policy/grant-eligibility.js';

export const SUPPORTED_GRANT_TYPES = ['authorization_code', 'refresh_token', 'client_credentials', DEVICE_CODE_GRANT, TOKEN_EXCHANGE_GRANT] as const;

/** Client authentication at /token, /revoke, /introspect and /par (DESIGN.md §4, §13). */
const AUTH_METHODS = ['client_secret_basic', 'client_secret_post', 'none', 'private_key_jwt'];

/** What the metadata document is made of: the issuer and what the clients may ask. */
export interface MetadataDocumentDeps {
  readonly issuer: string;
  readonly configuredClients: ReadonlyMap<string, ClientRecord>;
  readonly dynamicClients?: DynamicClientsConfig;
}

/** What the metadata and /jwks routes under the issuer's path use, wired by buildApp. */
export interface MetadataRouteDeps extends MetadataDocumentDeps {
  /** The keys in use now, read at each use: keys rotate while the server runs. */
  readonly keys: () => SigningKeys;
  /** How long JWKS caches may keep /jwks (fits the key timing: a new key is published before it signs). */
  readonly jwksMaxAgeSeconds: number;
}

/** What the copies of the metadata at the root use, wired by buildApp. */
export interface WellKnownAtRootDeps extends MetadataDocumentDeps {
  readonly basePath: string;
}

/** Lists exactly what is implemented; grows as endpoints land. */
export function serverMetadata(deps: MetadataDocumentDeps): Record<string, unknown> {
  const issuer = deps.issuer;
  const scopes = new Set<string>(['openid']);
  for (const client of deps.configuredClients.values()) for (const scope of client.scopes) scopes.add(scope);
  const dynamic = deps.dynamicClients;
  for (const scope of dynamic?.scopes ?? []) scopes.add(scope);
  // DESIGN.md §9: offline_access is accepted from clients that refresh, so hosts that add it are not refused.
  const refreshes = [...deps.configuredClients.values()].some((client) => client.refreshLifetimeMs !== undefined) || dynamic?.refreshLifetimeMs !== undefined;
  if (refreshes) scopes.add('offline_access');
  const grantTypes: string[] = [...SUPPORTED_GRANT_TYPES];
  const metadata: Record<string, unknown> = {
    issuer,
    authorization_endpoint: `${issuer}/authorize`,
    token_endpoint: `${issuer}/token`,
    device_authorization_endpoint: `${issuer}/device_authorization`,
    userinfo_endpoint: `${issuer}/userinfo`,
    jwks_uri: `${issuer}/jwks`,
    end_session_endpoint: `${issuer}/logout`,
    revocation_endpoint: `${issuer}/revoke`,
    introspection_endpoint: `${issuer}/introspect`,
    revocation_endpoint_auth_methods_supported: AUTH_METHODS,
    introspection_endpoint_auth_methods_supported: AUTH_METHODS,
    // DESIGN.md §13: private_key_jwt assertions are checked with these, at every endpoint that authenticates clients.
    revocation_endpoint_auth_signing_alg_values_supported: [...ASYMMETRIC_ALGS],
    introspection_endpoint_auth_signing_alg_values_supported: [...ASYMMETRIC_ALGS],
    pushed_authorization_request_endpoint: `${issuer}/par`,
    require_pushed_authorization_requests: false,
    dpop_signing_alg_values_supported: [...DPOP_ALGS],
    scopes_supported: [...scopes],
    response_types_supported: ['code'],
    response_modes_supported: ['query'],
    grant_types_supported: grantTypes,
    subject_types_supported: ['public'],
    // Resource-server libraries read this list to learn the access tokens' ES256 too (DESIGN.md §4).
    id_token_signing_alg_values_supported: ['RS256', 'ES256'],
    token_endpoint_auth_methods_supported: AUTH_METHODS,
    token_endpoint_auth_signing_alg_values_supported: [...ASYMMETRIC_ALGS],
    code_challenge_methods_supported: ['S256'],
    claims_supported: ['iss', 'sub', 'aud', 'exp', 'iat', 'auth_time', 'nonce', 'at_hash', 'email', 'name'],
    prompt_values_supported: ['none', 'login', 'consent'],
    authorization_response_iss_parameter_supported: true,
    request_parameter_supported: false,
    request_uri_parameter_supported: false,
    ...(dynamic !== undefined && dynamic.registration !== 'off' && { registration_endpoint: `${issuer}/register` }),
    ...(dynamic?.metadataDocuments === true && { client_id_metadata_document_supported: true }),
  };
  return metadata;
}

function sendMetadata(app: FastifyInstance, path: string, deps: MetadataDocumentDeps): void {
  app.get(path, async (_request, reply) =>
    reply.header('Cache-Control', 'public, max-age=300').send(serverMetadata(deps)),
  );
}

export function metadataRoutes(deps: MetadataRouteDeps): FastifyPluginAsync {
  return async (app) => {
    sendMetadata(app, '/.well-known/openid-configuration', deps);
    sendMetadata(app, '/.well-known/oauth-authorization-server', deps);
    app.get('/jwks', async (_request, reply) =>
      // A JWKS cache must see a new key before it signs (crypto/keys.ts KeyTiming).
      reply.header('Cache-Control', `public, max-age=${deps.jwksMaxAgeSeconds}`).header('Content-Type', 'application/jwk-set+json').send(deps.keys().jwks),
    );
  };
}

/** RFC 8414 §3.1: with a path in the issuer, metadata also lives at /.well-known/...{path}. */
export function wellKnownAtRoot(deps: WellKnownAtRootDeps): FastifyPluginAsync {
  return async (app) => {
    if (deps.basePath === '') return;
    sendMetadata(app, `/.well-known/oauth-authorization-server${deps.basePath}`, deps);
    sendMetadata(app, `/.well-known/openid-configuration${deps.basePath}`, deps);
  };
}

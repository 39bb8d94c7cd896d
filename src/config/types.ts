/** The typed, frozen configuration produced by config/load.ts (DESIGN.md §3). */
import type { JSONWebKeySet } from 'jose';

export type TlsMode = 'off' | 'proxy' | 'terminate';

export interface TlsConfig {
  readonly mode: TlsMode;
  /** Absolute paths, present when mode is "terminate". */
  readonly certFile?: string;
  readonly keyFile?: string;
}

export type StateConfig =
  | { readonly kind: 'memory' }
  | { readonly kind: 'sqlite'; readonly path: string }
  | {
      readonly kind: 'postgres';
      readonly url: string;
      readonly schema: string;
      /** Read from password_file when given; otherwise pg falls back to PGPASSWORD / the URL. */
      readonly password?: string;
    };

export interface UserRecord {
  readonly username: string;
  readonly passwordHash: string;
  readonly email?: string;
  readonly name?: string;
}

export interface FederationRecord {
  readonly name: string;
  readonly issuer: string;
  readonly clientId: string;
  readonly clientSecret: string;
  readonly scopes: readonly string[];
  /** Claim used as the subject; default: `name:sub`. */
  readonly subjectClaim?: string;
}

export type ClientKind = 'confidential' | 'public' | 'device';

export interface ClientRecord {
  readonly clientId: string;
  readonly kind: ClientKind;
  /** The secret's text (confidential clients only). Never logged or printed. */
  readonly secret?: string;
  /** SHA-256 (hex) of the secret of a registered client: the store keeps no secret itself. */
  readonly secretDigest?: string;
  /** Where the public keys of its private_key_jwt assertions are (DESIGN.md §13); such a client has no secret. */
  readonly assertionKeys?: AssertionKeys;
  /** DESIGN.md §13: every token it gets is DPoP-bound; a /token request without a proof is refused. */
  readonly requireDpop?: boolean;
  /** DESIGN.md §13: /authorize takes only a request_uri from /par for it. */
  readonly requirePar?: boolean;
  /** Scope values given to a request without `scope` (dynamic clients only, DESIGN.md §9). */
  readonly defaultScope?: readonly string[];
  readonly redirectUris: readonly string[];
  /** In config order; an entry may be a logical name or a fragment URI (DESIGN.md §5). */
  readonly audience: readonly string[];
  /** Milliseconds; present when the client gets refresh tokens. */
  readonly refreshLifetimeMs?: number;
  readonly scopes: readonly string[];
  /** Shown on sign-in and consent pages; the client_id when absent. */
  readonly displayName?: string;
  /** Exact URIs /logout may send the browser back to (DESIGN.md §8). */
  readonly postLogoutRedirectUris: readonly string[];
  /** The algorithm of this client's ID tokens (DESIGN.md §3); default RS256. */
  readonly idTokenSigningAlg: 'RS256' | 'ES256';
  /** Milliseconds a just-rotated refresh token may be presented again by this client (DESIGN.md §6); 0 = strict. */
  readonly refreshReuseGraceMs: number;
  /** Present for clients that are not in the config (DESIGN.md §9): they need consent, and match loopback ports freely. */
  readonly dynamic?: DynamicClientInfo;
  /** The `token_exchange` block (DESIGN.md §12): present only on configured confidential clients. */
  readonly tokenExchange?: TokenExchangeConfig;
}

/** Which tokens a client may exchange for tokens of its own audience (RFC 8693, DESIGN.md §12). */
export interface TokenExchangeConfig {
  /** Audience values (its own addresses as a resource server) whose tokens it may exchange. */
  readonly subjectAudience: readonly string[];
}

/** A private_key_jwt client's public keys (RFC 7523 §2.2): a JWK Set (jwks_file, a document's `jwks`) or a document's `jwks_uri`. */
export type AssertionKeys = { readonly jwks: JSONWebKeySet } | { readonly jwksUri: string };

/** What a dynamic client said about itself: self-asserted, so pages show it next to the hosts it cannot fake. */
export interface DynamicClientInfo {
  readonly source: 'registration' | 'metadata-document';
  /** The grant_types it registered or its document lists; absent: none given (policy/grant-eligibility.ts decides). */
  readonly grantTypes?: readonly string[];
  readonly clientName?: string;
  readonly clientUri?: string;
  readonly logoUri?: string;
}

/** Every limit of DESIGN.md §4 that operators set (`limits { }`, §3). */
export interface LimitsConfig {
  /** Failed requests per client per address, per minute. */
  readonly clientFailures: number;
  /** Failed requests per address, per minute. */
  readonly addressFailures: number;
  /** Wrong passwords per user per address, per 15 minutes. */
  readonly loginFailures: number;
  /** Wrong passwords per user from all addresses, per 15 minutes, beyond which answers are slowed. */
  readonly loginFailuresAny: number;
  /** Wrong user codes per address, per 15 minutes. */
  readonly userCodeFailures: number;
  /** Password checks running at once per process, each about 128 MiB at the default cost (DESIGN.md §11). */
  readonly passwordHashes: number;
  /** Connections one address (an IPv6 /64) may hold open at once, per process; trusted proxies are not counted. */
  readonly addressConnections: number;
}

/** A resource server that may call /introspect (DESIGN.md §8); its label is an audience entry that can be named. */
export interface ResourceServerRecord {
  readonly label: string;
  /** Never logged or printed. */
  readonly secret: string;
}

/** Clients that are not in the config (DESIGN.md §9). */
export interface DynamicClientsConfig {
  readonly audience: readonly string[];
  readonly metadataDocuments: boolean;
  readonly registration: 'off' | 'open' | 'token';
  /** The initial access token for registration = "token" (from token_file). Never logged. */
  readonly registrationToken?: string;
  readonly scopes: readonly string[];
  /** Scope values given to a request without scope; absent: such a request is invalid_request. */
  readonly defaultScope?: readonly string[];
  readonly refreshLifetimeMs?: number;
  readonly refreshReuseGraceMs: number;
  /** Tests only: metadata documents may live on loopback and private addresses. */
  readonly allowPrivateAddresses: boolean;
}

export interface Config {
  /** Absolute path of the config file, for messages. */
  readonly file: string;
  /** The issuer, without trailing slash. */
  readonly baseUrl: string;
  /** The path part of base_url ("" or "/auth"); every route is served under it. */
  readonly basePath: string;
  readonly listen: { readonly host: string; readonly port: number };
  /** Processes serving the listener (DESIGN.md §11); "auto" = the CPUs this process may use; absent (built by hand): 1. */
  readonly workers?: number | 'auto';
  readonly accessTokenLifetimeMs: number;
  readonly logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  readonly tls: TlsConfig;
  readonly state: StateConfig;
  readonly users: ReadonlyMap<string, UserRecord>;
  readonly federations: ReadonlyMap<string, FederationRecord>;
  readonly clients: ReadonlyMap<string, ClientRecord>;
  /** Addresses and CIDRs (as written) whose X-Forwarded-* headers are believed; empty: none (DESIGN.md §3). */
  readonly trustedProxies: readonly string[];
  readonly limits: LimitsConfig;
  /** Prometheus text on its own listener; absent: no metrics listener. */
  readonly metrics?: { readonly listen: { readonly host: string; readonly port: number } };
  readonly resourceServers: ReadonlyMap<string, ResourceServerRecord>;
  readonly dynamicClients?: DynamicClientsConfig;
}

/** A problem found while loading; every one is reported, not just the first. */
export interface ConfigProblem {
  readonly file: string;
  readonly line?: number;
  readonly column?: number;
  /** e.g. `client "webapp"`; absent for top-level attributes. */
  readonly block?: string;
  readonly message: string;
}

/** The typed, frozen configuration produced by config/load.ts (DESIGN.md §3). */

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
  readonly redirectUris: readonly string[];
  /** In config order; an entry may be a logical name or a fragment URI (DESIGN.md §5). */
  readonly audience: readonly string[];
  /** Milliseconds; present when the client gets refresh tokens. */
  readonly refreshLifetimeMs?: number;
  readonly scopes: readonly string[];
}

export interface Config {
  /** Absolute path of the config file, for messages. */
  readonly file: string;
  /** The issuer, without trailing slash. */
  readonly baseUrl: string;
  /** The path part of base_url ("" or "/auth"); every route is served under it. */
  readonly basePath: string;
  readonly listen: { readonly host: string; readonly port: number };
  readonly accessTokenLifetimeMs: number;
  readonly logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  readonly tls: TlsConfig;
  readonly state: StateConfig;
  readonly users: ReadonlyMap<string, UserRecord>;
  readonly federations: ReadonlyMap<string, FederationRecord>;
  readonly clients: ReadonlyMap<string, ClientRecord>;
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

/**
 * Who a client_id names (DESIGN.md §9): a client of the config, a client registered at /register (in the store, so
 * every instance sees it), or, when enabled, a client whose client_id is the https URL of its metadata document.
 * Dynamic clients become ClientRecords with the `dynamic_clients` block's audience, scopes and lifetimes.
 */
import { ClientKeySets, type ClientKeys } from './private-key-jwt.js';
import type { AssertionKeys, ClientRecord, Config, DynamicClientsConfig } from '../config/types.js';
import { randomText } from '../crypto/random.js';
import { parseScope } from '../policy/scope.js';
import { httpsRedirectOrigins } from '../policy/redirect-uri.js';
import type { RegisteredClientRecord, RegisteredClientStore } from '../store/types.js';
import type { MetadataDocument, MetadataDocuments } from './metadata-document.js';

/** What fetches, checks and caches client ID metadata documents and their key sets (metadata-document.ts). */
export type DocumentResolver = Pick<MetadataDocuments, 'resolve' | 'cachedDocument' | 'resolveKeySet' | 'refetchKeySet' | 'wouldFetch' | 'wouldFetchKeySet'>;

export type ClientResolution =
  | { readonly found: true; readonly client: ClientRecord }
  /** Unknown, or a metadata document that could not be used (`reason` says why, for the error page). */
  | { readonly found: false; readonly reason?: string };

/** A client_id that names a metadata document: an https URL with a path (DESIGN.md §9). */
export function isDocumentUrl(clientId: string): boolean {
  if (!clientId.startsWith('https://')) return false;
  try {
    return new URL(clientId).pathname.length > 1;
  } catch {
    return false;
  }
}

/** The ClientRecord of a dynamic client: the block's audience and limits, its own redirect URIs and name. */
function dynamicClient(
  dynamic: DynamicClientsConfig,
  clientId: string,
  described: {
    redirectUris: readonly string[];
    scope?: string;
    grantTypes?: readonly string[];
    clientName?: string;
    clientUri?: string;
    logoUri?: string;
    /** RFC 9449 §5.2 dpop_bound_access_tokens (DESIGN.md §13). */
    dpopBound?: boolean;
  },
  source: 'registration' | 'metadata-document',
  credentials: { readonly secretDigest?: string; readonly assertionKeys?: AssertionKeys } = {},
): ClientRecord {
  const { secretDigest, assertionKeys } = credentials;
  // Registration and documents were checked already; a malformed scope there would have been refused.
  const asked = described.scope === undefined ? undefined : parseScope(described.scope);
  // A registered scope narrows what the client may ask within the block's scopes, and is its default (DESIGN.md §9).
  const scopes = asked === undefined ? dynamic.scopes : dynamic.scopes.filter((value) => asked.includes(value));
  return {
    clientId,
    kind: secretDigest === undefined && assertionKeys === undefined ? 'public' : 'confidential',
    ...(secretDigest !== undefined && { secretDigest }),
    ...(assertionKeys !== undefined && { assertionKeys }),
    ...(described.dpopBound === true && { requireDpop: true }),
    redirectUris: described.redirectUris,
    audience: dynamic.audience,
    scopes,
    // Whether it gets refresh tokens at all (it declared refresh_token, DESIGN.md §9) is policy/grant-eligibility.ts's to say.
    ...(dynamic.refreshLifetimeMs !== undefined && { refreshLifetimeMs: dynamic.refreshLifetimeMs }),
    ...(asked !== undefined ? { defaultScope: asked } : dynamic.defaultScope !== undefined ? { defaultScope: dynamic.defaultScope } : {}),
    postLogoutRedirectUris: [],
    idTokenSigningAlg: 'RS256',
    refreshReuseGraceMs: dynamic.refreshReuseGraceMs,
    dynamic: {
      source,
      ...(described.grantTypes !== undefined && { grantTypes: described.grantTypes }),
      ...(described.clientName !== undefined && { clientName: described.clientName }),
      ...(described.clientUri !== undefined && { clientUri: described.clientUri }),
      ...(described.logoUri !== undefined && { logoUri: described.logoUri }),
    },
  };
}

/** The ClientRecord of a registration. */
export function registeredClient(dynamic: DynamicClientsConfig, record: RegisteredClientRecord): ClientRecord {
  const { metadata } = record;
  return dynamicClient(
    dynamic,
    record.clientId,
    {
      redirectUris: metadata.redirect_uris,
      grantTypes: metadata.grant_types,
      ...(metadata.scope !== undefined && { scope: metadata.scope }),
      ...(metadata.client_name !== undefined && { clientName: metadata.client_name }),
      ...(metadata.client_uri !== undefined && { clientUri: metadata.client_uri }),
      ...(metadata.logo_uri !== undefined && { logoUri: metadata.logo_uri }),
      ...(metadata.dpop_bound_access_tokens === true && { dpopBound: true }),
    },
    'registration',
    record.secretDigest === undefined ? {} : { secretDigest: record.secretDigest },
  );
}

/** The ClientRecord of a checked metadata document (its client_id is the URL it was fetched from). */
function documentClient(dynamic: DynamicClientsConfig, document: MetadataDocument): ClientRecord {
  const assertionKeys = documentKeys(document);
  return dynamicClient(
    dynamic,
    document.client_id,
    {
      redirectUris: document.redirect_uris,
      ...(document.scope !== undefined && { scope: document.scope }),
      ...(document.grant_types !== undefined && { grantTypes: document.grant_types }),
      ...(document.client_name !== undefined && { clientName: document.client_name }),
      ...(document.client_uri !== undefined && { clientUri: document.client_uri }),
      ...(document.logo_uri !== undefined && { logoUri: document.logo_uri }),
      ...(document.dpop_bound_access_tokens === true && { dpopBound: true }),
    },
    'metadata-document',
    assertionKeys === undefined ? {} : { assertionKeys },
  );
}

/** DESIGN.md §13: a document with token_endpoint_auth_method "private_key_jwt" names its keys inline or by jwks_uri. */
function documentKeys(document: MetadataDocument): AssertionKeys | undefined {
  if (document.token_endpoint_auth_method !== 'private_key_jwt') return undefined;
  if (document.jwks !== undefined) return { jwks: document.jwks };
  return document.jwks_uri === undefined ? undefined : { jwksUri: document.jwks_uri };
}

/** At most this many origins of dynamic clients are kept for CORS (the least recently used dropped first). */
const MAX_DYNAMIC_ORIGINS = 10_000;

export class ClientDirectory {
  readonly #config: Config;
  readonly #registered: RegisteredClientStore;
  readonly #documents: DocumentResolver | undefined;
  /** Origins of dynamic clients' https redirect URIs, remembered once they are in use here (DESIGN.md §9 CORS). */
  readonly #origins = new Set<string>();
  readonly #configuredOrigins: ReadonlySet<string>;
  readonly #keySets: ClientKeySets;

  constructor(config: Config, registered: RegisteredClientStore, documents?: DocumentResolver) {
    this.#config = config;
    this.#registered = registered;
    this.#documents = documents;
    this.#keySets = new ClientKeySets(documents);
    const configured = new Set<string>();
    for (const client of config.clients.values()) {
      for (const uri of client.redirectUris) {
        const origin = new URL(uri).origin;
        if (origin !== 'null') configured.add(origin);
      }
    }
    this.#configuredOrigins = configured;
  }

  /** Whether a browser script from `origin` may call the token-ish endpoints. */
  isClientOrigin(origin: string): boolean {
    return this.#configuredOrigins.has(origin) || this.#origins.has(origin);
  }

  /**
   * How many fetches resolving `clientId` would make now: its metadata document, and with a client assertion, the key
   * set its jwks_uri names (DESIGN.md §13; for a document not fetched yet, whose jwks_uri is unknown, counted as one).
   * Work a stranger makes the server do, so the endpoints count it against the address before it starts (DESIGN.md §9).
   * Synchronous, so no request slips between.
   */
  fetchesToResolve(clientId: string, withAssertion = false): number {
    if (this.#config.clients.has(clientId) || !isDocumentUrl(clientId)) return 0;
    const dynamic = this.#config.dynamicClients;
    const documents = this.#documents;
    if (dynamic === undefined || !dynamic.metadataDocuments || documents === undefined) return 0;
    if (documents.wouldFetch(clientId)) return withAssertion ? 2 : 1;
    const cached = withAssertion ? documents.cachedDocument(clientId) : undefined;
    const keys = cached === undefined ? undefined : documentKeys(cached);
    return keys !== undefined && 'jwksUri' in keys && documents.wouldFetchKeySet(keys.jwksUri) ? 1 : 0;
  }

  /** The client `clientId` names, or why it cannot be used. */
  async resolve(clientId: string): Promise<ClientResolution> {
    const configured = this.#config.clients.get(clientId);
    if (configured !== undefined) return { found: true, client: configured };
    const dynamic = this.#config.dynamicClients;
    if (dynamic === undefined) return { found: false };
    if (isDocumentUrl(clientId)) {
      if (!dynamic.metadataDocuments || this.#documents === undefined) return { found: false };
      const resolved = await this.#documents.resolve(clientId);
      if (!resolved.ok) return { found: false, reason: resolved.reason };
      return { found: true, client: documentClient(dynamic, resolved.document) };
    }
    return this.#registeredResolution(dynamic, clientId);
  }

  /**
   * The client `clientId` names without fetching anything (DESIGN.md §7: /logout never fetches): one of the config, a
   * registered one (read from the store), or a metadata-document client whose document is in the cache. Anything
   * else is undefined, as if unknown, so no request can make the server fetch a URL it names.
   */
  async findWithoutFetching(clientId: string | undefined): Promise<ClientRecord | undefined> {
    if (clientId === undefined) return undefined;
    const configured = this.#config.clients.get(clientId);
    if (configured !== undefined) return configured;
    const dynamic = this.#config.dynamicClients;
    if (dynamic === undefined) return undefined;
    if (isDocumentUrl(clientId)) {
      if (!dynamic.metadataDocuments) return undefined;
      const document = this.#documents?.cachedDocument(clientId);
      return document === undefined ? undefined : documentClient(dynamic, document);
    }
    const resolution = await this.#registeredResolution(dynamic, clientId);
    return resolution.found ? resolution.client : undefined;
  }

  async #registeredResolution(dynamic: DynamicClientsConfig, clientId: string): Promise<ClientResolution> {
    if (dynamic.registration === 'off' || !REGISTERED_ID.test(clientId)) return { found: false };
    const record = await this.#registered.findRegisteredClient(clientId);
    return record === undefined ? { found: false } : { found: true, client: registeredClient(dynamic, record) };
  }

  /**
   * Whether `clientId` may still name a client, fetching and reading nothing: one of the config, or of a kind of
   * dynamic client the config still takes (its grant, looked up anyway, says whether it lives). A client removed from
   * the config is not (DESIGN.md §6: its tokens stop working).
   */
  isKnownClient(clientId: string): boolean {
    if (this.#config.clients.has(clientId)) return true;
    const dynamic = this.#config.dynamicClients;
    if (dynamic === undefined) return false;
    if (isDocumentUrl(clientId)) return dynamic.metadataDocuments;
    return dynamic.registration !== 'off' && REGISTERED_ID.test(clientId);
  }

  /** The keys a private_key_jwt client's assertions verify with (DESIGN.md §13): its JWK Set, or its document's jwks_uri (fetched, cached). */
  async assertionKeysOf(client: ClientRecord): Promise<ClientKeys> {
    if (client.assertionKeys === undefined) return { ok: false, reason: 'this client does not authenticate with private_key_jwt' };
    return this.#keySets.keysOf(client.assertionKeys);
  }

  /** Its keys fetched again when an assertion named none of them (a jwks_uri's, at most once a minute); else undefined. */
  async refetchedAssertionKeysOf(client: ClientRecord): Promise<ClientKeys | undefined> {
    return client.assertionKeys === undefined ? undefined : this.#keySets.refetchedKeysOf(client.assertionKeys);
  }

  /** The client, or undefined when there is none usable. */
  async find(clientId: string | undefined): Promise<ClientRecord | undefined> {
    if (clientId === undefined) return undefined;
    const resolution = await this.resolve(clientId);
    return resolution.found ? resolution.client : undefined;
  }

  /**
   * Remembers a dynamic client's https redirect origins for CORS (DESIGN.md §9), once a person has authorized it or it
   * has used a grant: never on a mere lookup, so a stranger naming clients cannot push a real client's origin out.
   * Most recently used last, so the origins forgotten first are those of clients no longer in use.
   */
  rememberOrigins(client: ClientRecord): void {
    if (client.dynamic === undefined) return;
    for (const origin of httpsRedirectOrigins(client.redirectUris)) {
      this.#origins.delete(origin);
      if (this.#origins.size >= MAX_DYNAMIC_ORIGINS) this.#origins.delete(this.#origins.values().next().value as string);
      this.#origins.add(origin);
    }
  }
}

/** Registered client ids are `dyn_` and 32 base64url characters (24 random bytes). */
const REGISTERED_ID = /^dyn_[A-Za-z0-9_-]{32}$/;

export const newRegisteredClientId = (): string => `dyn_${randomText(24)}`;

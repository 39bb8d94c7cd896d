/**
 * Client ID metadata documents (draft-ietf-oauth-client-id-metadata-document-02, the MCP authorization spec; DESIGN.md
 * §9): a client_id that is an https URL names a JSON document the server fetches, checks and caches.
 */
import { z } from 'zod';
import type { JSONWebKeySet } from 'jose';
import type { Agent } from 'undici';
import { parsePublicJwkSet, unimportableKeyProblem } from '../crypto/jwk-set.js';
import { dynamicRedirectUriProblem } from '../policy/redirect-uri.js';
import { bounded } from '../log.js';
import { FetchRefused, getSmall, publicAgent, type PublicAgentOptions } from './safe-fetch.js';

/** A document that passed every rule; only the fields the server uses are kept (logo_uri is data, never fetched). */
export interface MetadataDocument {
  readonly client_id: string;
  readonly redirect_uris: readonly string[];
  readonly client_name?: string;
  readonly client_uri?: string;
  readonly logo_uri?: string;
  readonly scope?: string;
  readonly grant_types?: readonly string[];
  /** DESIGN.md §13: `private_key_jwt` with `jwks` or `jwks_uri` makes the client confidential. */
  readonly token_endpoint_auth_method?: 'none' | 'private_key_jwt';
  readonly jwks?: JSONWebKeySet;
  readonly jwks_uri?: string;
  /** RFC 9449 §5.2: every access token of this client must be DPoP-bound. */
  readonly dpop_bound_access_tokens?: boolean;
}

/** A usable document, or why not; `fetched` is true for the one call that went to the network (it counts toward limits). */
export type DocumentResolution =
  | { readonly ok: true; readonly document: MetadataDocument; readonly fetched: boolean }
  | { readonly ok: false; readonly reason: string; readonly fetched: boolean };

/** A document's verdict without the network: either the document or why it is not acceptable. */
export type DocumentCheck = { readonly ok: true; readonly document: MetadataDocument } | { readonly ok: false; readonly reason: string };

/** What a document's jwks_uri served (DESIGN.md §13): a JWK Set of public keys, or why it cannot be used. */
export type KeySetCheck = { readonly ok: true; readonly jwks: JSONWebKeySet } | { readonly ok: false; readonly reason: string };

/** Where a failed fetch's detail goes (a pino logger): the page says less, so it names no internal address (DESIGN.md §7). */
export interface FetchFailureLog {
  warn(fields: Record<string, unknown>, message: string): void;
}

export interface MetadataDocumentsOptions extends Pick<PublicAgentOptions, 'allowPrivateAddresses' | 'ca' | 'lookup'> {
  /** Gets the address or error code behind each failed fetch; default: nowhere. */
  readonly log?: FetchFailureLog;
  /** Milliseconds since the epoch; cache expiry reads only this. Default Date.now. */
  readonly now?: () => number;
  /** Milliseconds for a whole fetch; default 5000 (DESIGN.md §9). */
  readonly timeoutMs?: number;
  /** Documents and failures remembered at most; the oldest is forgotten first. Default 10,000. */
  readonly maxEntries?: number;
}

const TIMEOUT_MS = 5000;
const MAX_BYTES = 5 * 1024;
const MAX_URL_LENGTH = 2048;
const DEFAULT_FRESH_MS = 5 * 60_000;
const MAX_FRESH_MS = 24 * 60 * 60_000;
/** A remembered key set is fetched again for an unknown key at most this often per URL (jose's remote JWK Sets wait 30 s). */
export const KEY_SET_REFETCH_COOLDOWN_MS = 60_000;
const FAILURE_MS = 60_000;
const MAX_ENTRIES = 10_000;

/** Why `clientId` cannot be a metadata document URL (draft §3), or undefined when it can; decided without fetching. */
export function documentUrlProblem(clientId: string): string | undefined {
  if (clientId.length > MAX_URL_LENGTH) return `a client_id URL must be at most ${MAX_URL_LENGTH} characters`;
  if (!URL.canParse(clientId)) return 'the client_id is not a URL';
  const url = new URL(clientId);
  if (url.protocol !== 'https:') return 'a client_id URL must use https';
  if (url.username !== '' || url.password !== '') return 'a client_id URL must not contain a user name or password';
  if (clientId.includes('#')) return 'a client_id URL must not contain a fragment';
  if (url.pathname === '/' || url.pathname === '') return 'a client_id URL must have a path, e.g. https://app.example/client.json';
  if (url.href !== clientId) return `a client_id URL must be written in normal form (${JSON.stringify(url.href.slice(0, 200))})`;
  return undefined;
}

const redirectUri = z
  .string('must be a string')
  .max(MAX_URL_LENGTH, `must be at most ${MAX_URL_LENGTH} characters`)
  .superRefine((value, context) => {
    const problem = dynamicRedirectUriProblem(value);
    if (problem !== undefined) context.addIssue({ code: 'custom', message: problem });
  });

// Fetched by the server, so https only, like the document itself.
const httpsUrl = z
  .string('must be a string')
  .max(MAX_URL_LENGTH, `must be at most ${MAX_URL_LENGTH} characters`)
  .refine((value) => documentUrlProblem(value) === undefined, 'must be an https URL with a path, without user name, password or fragment');

// Shown to people as links, so only web URLs.
const webUrl = z
  .string('must be a string')
  .max(MAX_URL_LENGTH, `must be at most ${MAX_URL_LENGTH} characters`)
  .refine((value) => URL.canParse(value) && ['https:', 'http:'].includes(new URL(value).protocol), 'must be an https (or http) URL');

const documentSchema = z.object(
  {
    client_id: z.string('is required'),
    redirect_uris: z.array(redirectUri, 'is required (a list of URIs)').min(1, 'must list at least one URI').max(50, 'lists more than 50 URIs'),
    client_name: z.string('must be a string').max(200, 'must be at most 200 characters').optional(),
    client_uri: webUrl.optional(),
    logo_uri: webUrl.optional(),
    scope: z.string('must be a string').max(1000, 'must be at most 1000 characters').optional(),
    grant_types: z.array(z.string('must list strings').max(200, 'must list short strings'), 'must be a list').max(10, 'lists more than 10 grant types').optional(),
    // Draft §4.1: no secret can be shared through a public document; only keys (DESIGN.md §13) make the client confidential.
    token_endpoint_auth_method: z
      .enum(['none', 'private_key_jwt'], 'must be "none" or "private_key_jwt": a metadata document cannot carry a secret')
      .optional(),
    jwks: z.unknown().optional(),
    jwks_uri: httpsUrl.optional(),
    dpop_bound_access_tokens: z.boolean('must be true or false').optional(),
    client_secret: z.undefined('must not appear: a metadata document cannot carry a secret').optional(),
    client_secret_expires_at: z.undefined('must not appear: a metadata document cannot carry a secret').optional(),
  },
  'is not a JSON object',
);

/** Checks a parsed document fetched from `url` against the draft's and DESIGN.md §9's rules. */
export function checkDocument(url: string, value: unknown): DocumentCheck {
  const parsed = documentSchema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = issue === undefined || issue.path.length === 0 ? 'the document' : pathText(issue.path);
    return { ok: false, reason: `${where} ${issue?.message ?? 'is not acceptable'}` };
  }
  // Draft §3: the document names itself, compared as plain strings.
  if (parsed.data.client_id !== url) return { ok: false, reason: "the document's client_id is not the URL it was fetched from" };
  const { client_secret: _secret, client_secret_expires_at: _expires, jwks: sentKeys, ...rest } = parsed.data;
  if (rest.token_endpoint_auth_method !== 'private_key_jwt') {
    const { jwks_uri: _uri, ...document } = rest;
    return { ok: true, document };
  }
  // DESIGN.md §13: a private_key_jwt client says where its keys are, in one place.
  if ((sentKeys === undefined) === (rest.jwks_uri === undefined)) {
    return { ok: false, reason: 'token_endpoint_auth_method "private_key_jwt" needs exactly one of jwks and jwks_uri' };
  }
  if (sentKeys === undefined) return { ok: true, document: rest };
  const keys = parsePublicJwkSet(sentKeys);
  if ('error' in keys) return { ok: false, reason: `jwks ${keys.error}` };
  return { ok: true, document: { ...rest, jwks: keys.jwks } };
}

const pathText = (path: ReadonlyArray<PropertyKey>): string =>
  path.map((part, index) => (typeof part === 'number' ? `[${part}]` : `${index === 0 ? '' : '.'}${String(part)}`)).join('');

/** RFC 8259 JSON, served as application/json or application/<something>+json (draft §4). */
function isJsonType(contentType: string | string[] | undefined): boolean {
  if (typeof contentType !== 'string') return false;
  const mediaType = contentType.split(';', 1)[0]?.trim().toLowerCase() ?? '';
  return mediaType === 'application/json' || /^application\/[a-z0-9.!#$&^_-]+\+json$/.test(mediaType);
}

/** How long an answer may be reused (RFC 9111 §4.2.1), capped at 24 h; 0 means do not keep it. */
export function freshnessMs(cacheControl: string | string[] | undefined, age: string | string[] | undefined): number {
  const directives = [cacheControl ?? []].flat().join(',').split(',').map((directive) => directive.trim().toLowerCase());
  if (directives.includes('no-store') || directives.includes('no-cache')) return 0;
  const maxAge = directives.find((directive) => /^max-age\s*=\s*"?\d+"?$/.test(directive));
  if (maxAge === undefined) return DEFAULT_FRESH_MS;
  const seconds = Number(maxAge.replace(/\D/g, '')) - (typeof age === 'string' && /^\d+$/.test(age) ? Number(age) : 0);
  return Math.min(Math.max(seconds, 0) * 1000, MAX_FRESH_MS);
}

type Check<T> = ({ readonly ok: true } & T) | { readonly ok: false; readonly reason: string };

interface Remembered<T> {
  readonly check: Check<T>;
  readonly storedAt: number;
  readonly expiresAt: number;
}

/** Checked answers per URL, fresh for as long as their fetch said; one fetch in flight per URL; the oldest forgotten first. */
class FetchCache<T> {
  /** In insertion order, so the first key is the oldest. */
  readonly #remembered = new Map<string, Remembered<T>>();
  readonly #inFlight = new Map<string, Promise<Check<T>>>();

  constructor(
    private readonly now: () => number,
    private readonly maxEntries: number,
  ) {}

  /** The remembered answer, else the one `fetch` gives (with how long to keep it; 0: not at all). */
  async get(url: string, fetch: () => Promise<{ check: Check<T>; keepMs: number }>): Promise<Check<T> & { readonly fetched: boolean }> {
    const remembered = this.#remembered.get(url);
    if (remembered !== undefined) {
      if (remembered.expiresAt > this.now()) return { ...remembered.check, fetched: false };
      this.#remembered.delete(url);
    }
    const pending = this.#inFlight.get(url);
    if (pending !== undefined) return { ...(await pending), fetched: false };
    const fetching = fetch().then(({ check, keepMs }) => {
      const now = this.now();
      if (keepMs > 0) this.#remember(url, { check, storedAt: now, expiresAt: now + keepMs });
      return check;
    });
    this.#inFlight.set(url, fetching);
    try {
      return { ...(await fetching), fetched: true };
    } finally {
      this.#inFlight.delete(url);
    }
  }

  /** Whether `get` would fetch now: nothing fresh is remembered for `url` and no fetch of it is in flight. */
  wouldFetch(url: string): boolean {
    const remembered = this.#remembered.get(url);
    if (remembered !== undefined && remembered.expiresAt > this.now()) return false;
    return !this.#inFlight.has(url);
  }

  /** Forgets the answer remembered for `url` if it was fetched at least `ageMs` ago; whether it did. */
  forgetIfOlder(url: string, ageMs: number): boolean {
    const remembered = this.#remembered.get(url);
    if (remembered === undefined || this.now() - remembered.storedAt < ageMs) return false;
    this.#remembered.delete(url);
    return true;
  }

  /** A remembered, fresh, acceptable answer; never fetches. */
  peek(url: string): ({ readonly ok: true } & T) | undefined {
    const remembered = this.#remembered.get(url);
    if (remembered === undefined || remembered.expiresAt <= this.now() || !remembered.check.ok) return undefined;
    return remembered.check;
  }

  #remember(url: string, entry: Remembered<T>): void {
    this.#remembered.delete(url);
    while (this.#remembered.size >= this.maxEntries) {
      const oldest = this.#remembered.keys().next();
      if (oldest.done === true) break;
      this.#remembered.delete(oldest.value);
    }
    this.#remembered.set(url, entry);
  }
}

/** Fetches, checks and caches client ID metadata documents, and the key sets their jwks_uri names; one fetch in flight per URL. */
export class MetadataDocuments {
  readonly #agent: Agent;
  readonly #timeoutMs: number;
  readonly #log: FetchFailureLog | undefined;
  readonly #documents: FetchCache<{ readonly document: MetadataDocument }>;
  readonly #keySets: FetchCache<{ readonly jwks: JSONWebKeySet }>;

  constructor(options: MetadataDocumentsOptions = {}) {
    const now = options.now ?? Date.now;
    const maxEntries = options.maxEntries ?? MAX_ENTRIES;
    this.#timeoutMs = options.timeoutMs ?? TIMEOUT_MS;
    this.#log = options.log;
    this.#documents = new FetchCache(now, maxEntries);
    this.#keySets = new FetchCache(now, maxEntries);
    this.#agent = publicAgent({
      connectTimeoutMs: this.#timeoutMs,
      ...(options.allowPrivateAddresses !== undefined && { allowPrivateAddresses: options.allowPrivateAddresses }),
      ...(options.ca !== undefined && { ca: options.ca }),
      ...(options.lookup !== undefined && { lookup: options.lookup }),
    });
  }

  /** The document `clientId` names, or why it cannot be used (for the /authorize error page). */
  async resolve(clientId: string): Promise<DocumentResolution> {
    const problem = documentUrlProblem(clientId);
    if (problem !== undefined) return { ok: false, reason: problem, fetched: false };
    return this.#documents.get(clientId, () =>
      this.#fetch<{ readonly document: MetadataDocument }>(clientId, 'metadata document', async (value) => {
        const check = checkDocument(clientId, value);
        return check.ok ? check : { ok: false, reason: `is not acceptable: ${check.reason}` };
      }),
    );
  }

  /** Whether resolve(clientId) would fetch now (a well-formed URL, nothing fresh remembered, no fetch in flight). */
  wouldFetch(clientId: string): boolean {
    return documentUrlProblem(clientId) === undefined && this.#documents.wouldFetch(clientId);
  }

  /** Whether resolveKeySet(url) would fetch now (a well-formed URL, nothing fresh remembered, no fetch in flight). */
  wouldFetchKeySet(url: string): boolean {
    return documentUrlProblem(url) === undefined && this.#keySets.wouldFetch(url);
  }

  /** The document `clientId` names if a fetch of it is remembered and still fresh; never fetches (DESIGN.md §7: /logout). */
  cachedDocument(clientId: string): MetadataDocument | undefined {
    return this.#documents.peek(clientId)?.document;
  }

  /** The public keys a private_key_jwt document's jwks_uri serves (DESIGN.md §13), under the same fetch rules and cache. */
  async resolveKeySet(url: string): Promise<KeySetCheck> {
    const problem = documentUrlProblem(url);
    if (problem !== undefined) return { ok: false, reason: `the client's jwks_uri cannot be used: ${problem.replace('client_id URL', 'jwks_uri')}` };
    const { fetched: _fetched, ...check } = await this.#keySets.get(url, () =>
      this.#fetch<{ readonly jwks: JSONWebKeySet }>(url, 'jwks_uri', async (value) => {
        const keys = parsePublicJwkSet(value);
        if ('error' in keys) return { ok: false, reason: keys.error };
        const unusable = await unimportableKeyProblem(keys.jwks);
        return unusable === undefined ? { ok: true, jwks: keys.jwks } : { ok: false, reason: unusable };
      }),
    );
    return check;
  }

  /**
   * The key set at `url` fetched again, when an assertion names a key the remembered set lacks (OpenID Connect Core
   * §10.1.1: the client rotated its keys): at most once per KEY_SET_REFETCH_COOLDOWN_MS per URL, so assertions naming
   * made-up keys cannot make the server fetch more often; undefined when it is not fetched again.
   */
  async refetchKeySet(url: string): Promise<KeySetCheck | undefined> {
    if (!this.#keySets.forgetIfOlder(url, KEY_SET_REFETCH_COOLDOWN_MS)) return undefined;
    return this.resolveKeySet(url);
  }

  /** Closes the connections kept to document hosts. */
  async close(): Promise<void> {
    await this.#agent.close();
  }

  /** GETs `url` and judges its JSON with `judge`; `what` names it in refusals. */
  async #fetch<T>(url: string, what: string, judge: (value: unknown) => Promise<Check<T>>): Promise<{ check: Check<T>; keepMs: number }> {
    const refuse = (reason: string): Check<T> => ({ ok: false, reason: `the client's ${what} ${reason}` });
    try {
      const answer = await getSmall(url, { dispatcher: this.#agent, timeoutMs: this.#timeoutMs, maxBytes: MAX_BYTES, accept: 'application/json' });
      const { status, body } = answer;
      // A failure is kept whatever the answer said, so a bad URL cannot make the server fetch in a loop.
      if (status >= 300 && status < 400) return { check: refuse(`URL answered with a redirect (HTTP ${status}); redirects are not followed`), keepMs: FAILURE_MS };
      if (status !== 200) return { check: refuse(`URL answered HTTP ${status}, not 200`), keepMs: FAILURE_MS };
      if (!isJsonType(answer.headers['content-type'])) return { check: refuse('is not served as application/json'), keepMs: FAILURE_MS };
      let value: unknown;
      try {
        value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(body));
      } catch {
        return { check: refuse('is not valid JSON'), keepMs: FAILURE_MS };
      }
      const check = await judge(value);
      if (!check.ok) return { check: refuse(check.reason), keepMs: FAILURE_MS };
      return { check, keepMs: freshnessMs(answer.headers['cache-control'], answer.headers['age']) };
    } catch (error) {
      const reason = error instanceof FetchRefused ? error.message : 'an unexpected error';
      const detail = error instanceof FetchRefused ? (error.detail ?? error.message) : error instanceof Error ? error.message : String(error);
      const refusal = error instanceof FetchRefused ? error.code : 'error';
      const where = what === 'jwks_uri' ? { event: 'jwks_uri_fetch', jwks_uri: bounded(url) } : { event: 'metadata_document_fetch', client_id: bounded(url) };
      this.#log?.warn({ ...where, refusal, detail: bounded(detail) }, `a client ${what} could not be fetched`);
      return { check: { ok: false, reason: `the client's ${what} could not be fetched: ${reason}` }, keepMs: FAILURE_MS };
    }
  }
}

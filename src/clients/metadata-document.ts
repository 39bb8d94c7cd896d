/**
 * Client ID metadata documents (draft-ietf-oauth-client-id-metadata-document-02, the MCP authorization spec; DESIGN.md
 * §9): a client_id that is an https URL names a JSON document the server fetches, checks and caches.
 */
import { z } from 'zod';
import type { Agent } from 'undici';
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
  readonly token_endpoint_auth_method?: 'none';
}

/** A usable document, or why not; `fetched` is true for the one call that went to the network (it counts toward limits). */
export type DocumentResolution =
  | { readonly ok: true; readonly document: MetadataDocument; readonly fetched: boolean }
  | { readonly ok: false; readonly reason: string; readonly fetched: boolean };

/** A document's verdict without the network: either the document or why it is not acceptable. */
export type DocumentCheck = { readonly ok: true; readonly document: MetadataDocument } | { readonly ok: false; readonly reason: string };

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
    // Draft §4.1: no secret can be shared through a public document, so the client is public.
    token_endpoint_auth_method: z.literal('none', 'must be "none": a metadata document cannot make a client confidential').optional(),
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
  const { client_secret: _secret, client_secret_expires_at: _expires, ...document } = parsed.data;
  return { ok: true, document };
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

interface Remembered {
  readonly check: DocumentCheck;
  readonly expiresAt: number;
}

/** Fetches, checks and caches client ID metadata documents; one fetch in flight per URL. */
export class MetadataDocuments {
  readonly #agent: Agent;
  readonly #now: () => number;
  readonly #timeoutMs: number;
  readonly #maxEntries: number;
  readonly #log: FetchFailureLog | undefined;
  /** In insertion order, so the first key is the oldest. */
  readonly #remembered = new Map<string, Remembered>();
  readonly #inFlight = new Map<string, Promise<DocumentCheck>>();

  constructor(options: MetadataDocumentsOptions = {}) {
    this.#now = options.now ?? Date.now;
    this.#timeoutMs = options.timeoutMs ?? TIMEOUT_MS;
    this.#maxEntries = options.maxEntries ?? MAX_ENTRIES;
    this.#log = options.log;
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
    const remembered = this.#remembered.get(clientId);
    if (remembered !== undefined) {
      if (remembered.expiresAt > this.#now()) return { ...remembered.check, fetched: false };
      this.#remembered.delete(clientId);
    }
    const pending = this.#inFlight.get(clientId);
    if (pending !== undefined) return { ...(await pending), fetched: false };
    const fetching = this.#fetch(clientId);
    this.#inFlight.set(clientId, fetching);
    try {
      return { ...(await fetching), fetched: true };
    } finally {
      this.#inFlight.delete(clientId);
    }
  }

  /** The document `clientId` names if a fetch of it is remembered and still fresh; never fetches (DESIGN.md §7: /logout). */
  cachedDocument(clientId: string): MetadataDocument | undefined {
    const remembered = this.#remembered.get(clientId);
    if (remembered === undefined || remembered.expiresAt <= this.#now() || !remembered.check.ok) return undefined;
    return remembered.check.document;
  }

  /** Closes the connections kept to document hosts. */
  async close(): Promise<void> {
    await this.#agent.close();
  }

  async #fetch(url: string): Promise<DocumentCheck> {
    let check: DocumentCheck;
    let keepMs = FAILURE_MS;
    try {
      const answer = await getSmall(url, { dispatcher: this.#agent, timeoutMs: this.#timeoutMs, maxBytes: MAX_BYTES, accept: 'application/json' });
      check = this.#read(url, answer.status, answer.headers['content-type'], answer.body);
      if (check.ok) keepMs = freshnessMs(answer.headers['cache-control'], answer.headers['age']);
    } catch (error) {
      const reason = error instanceof FetchRefused ? error.message : 'an unexpected error';
      check = { ok: false, reason: `the client's metadata document could not be fetched: ${reason}` };
      const detail = error instanceof FetchRefused ? (error.detail ?? error.message) : error instanceof Error ? error.message : String(error);
      const refusal = error instanceof FetchRefused ? error.code : 'error';
      this.#log?.warn({ event: 'metadata_document_fetch', client_id: bounded(url), refusal, detail: bounded(detail) }, 'a client metadata document could not be fetched');
    }
    // A failure is kept whatever the answer said, so a bad URL cannot make the server fetch in a loop.
    if (keepMs > 0) this.#remember(url, { check, expiresAt: this.#now() + keepMs });
    return check;
  }

  #read(url: string, status: number, contentType: string | string[] | undefined, body: Buffer): DocumentCheck {
    const refuse = (reason: string): DocumentCheck => ({ ok: false, reason: `the client's metadata document ${reason}` });
    if (status >= 300 && status < 400) return refuse(`URL answered with a redirect (HTTP ${status}); redirects are not followed`);
    if (status !== 200) return refuse(`URL answered HTTP ${status}, not 200`);
    if (!isJsonType(contentType)) return refuse('is not served as application/json');
    let value: unknown;
    try {
      value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(body));
    } catch {
      return refuse('is not valid JSON');
    }
    const check = checkDocument(url, value);
    return check.ok ? check : refuse(`is not acceptable: ${check.reason}`);
  }

  #remember(url: string, entry: Remembered): void {
    this.#remembered.delete(url);
    while (this.#remembered.size >= this.#maxEntries) {
      const oldest = this.#remembered.keys().next();
      if (oldest.done === true) break;
      this.#remembered.delete(oldest.value);
    }
    this.#remembered.set(url, entry);
  }
}

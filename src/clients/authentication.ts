/** Client authentication (RFC 6749 §2.3): client_secret_basic or client_secret_post for confidential clients, client_id for public ones. */
import type { ClientRecord, ResourceServerRecord } from '../config/types.js';
import { invalidClient, invalidRequest } from '../policy/oauth-error.js';
import { single, type Params } from '../http/params.js';
import { matchesDigest, sha256 } from '../crypto/digest.js';

/** What a request presents, decoded once per request. */
export interface PresentedCredentials {
  /** The client the request claims to be, before authentication (for rate limits and logs). */
  readonly claimedClientId: string | undefined;
  /** `text` is the Basic credentials as sent, before the form-decoding of RFC 6749 §2.3.1. */
  readonly basic: { readonly id: string; readonly secret: string; readonly text: string } | undefined;
  readonly malformedBasic: boolean;
  readonly bodyClientId: string | undefined;
  /** client_secret in the body (client_secret_post, RFC 6749 §2.3.1); undefined when absent. */
  readonly bodySecret: string | undefined;
}

/** RFC 6749 §2.3.1: the Basic credentials are form-urlencoded before base64. */
function decodeBasic(header: string): { id: string; secret: string; text: string } | undefined {
  const match = /^Basic ([A-Za-z0-9+/=]+)$/i.exec(header.trim());
  if (match === null) return undefined;
  const decoded = Buffer.from(match[1] as string, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon === -1) return undefined;
  try {
    const unescape = (text: string): string => decodeURIComponent(text.replace(/\+/g, ' '));
    return { id: unescape(decoded.slice(0, colon)), secret: unescape(decoded.slice(colon + 1)), text: decoded };
  } catch {
    return undefined;
  }
}

export function readClientCredentials(authorization: string | undefined, params: Params): PresentedCredentials {
  const basic = authorization === undefined ? undefined : decodeBasic(authorization);
  const bodyClientId = single(params, 'client_id');
  return {
    claimedClientId: authorization === undefined ? bodyClientId : basic?.id,
    basic,
    malformedBasic: authorization !== undefined && basic === undefined,
    bodyClientId,
    bodySecret: params.get('client_secret')?.[0],
  };
}

/** SHA-256 of each configured secret (client or resource server), computed once rather than per request. */
const secretDigests = new WeakMap<object, Buffer>();

/** Compares digests so the comparison takes the same time whatever the lengths. */
function secretMatches(holder: { readonly secret?: string; readonly secretDigest?: string }, presented: string): boolean {
  let expected = secretDigests.get(holder);
  if (expected === undefined) {
    // A registered client's secret is known only by its digest (the store keeps no secret).
    if (holder.secret !== undefined) expected = sha256(holder.secret);
    else if (holder.secretDigest !== undefined) expected = Buffer.from(holder.secretDigest, 'hex');
    else return false;
    secretDigests.set(holder, expected);
  }
  return matchesDigest(presented, expected);
}

/** Who may call /introspect (DESIGN.md §8): a resource server by its label, or a confidential client. */
export type IntrospectionCaller = { readonly kind: 'resource_server'; readonly label: string } | { readonly kind: 'client'; readonly client: ClientRecord };

/**
 * A resource server authenticates with its label as the client id, by HTTP Basic (DESIGN.md §8) or, as the metadata
 * offers every caller, client_secret_post; anyone else as at /token, confidential only.
 */
export function authenticateIntrospectionCaller(
  presented: PresentedCredentials,
  clients: { get(clientId: string): ClientRecord | undefined },
  resourceServers: ReadonlyMap<string, ResourceServerRecord>,
): IntrospectionCaller {
  const { claimedClientId, bodyClientId, bodySecret } = presented;
  const basic = presented.basic === undefined ? undefined : (labelSentUnencoded(presented.basic, resourceServers) ?? presented.basic);
  const callerId = basic?.id ?? claimedClientId;
  const server = callerId === undefined ? undefined : resourceServers.get(callerId);
  if (server !== undefined) {
    if (basic !== undefined && bodySecret !== undefined) throw invalidRequest('send the client secret either with HTTP Basic or in the body, not both');
    if (basic !== undefined && bodyClientId !== undefined && bodyClientId !== basic.id) throw invalidClient('client_id does not match the credentials');
    const secret = basic?.secret ?? bodySecret;
    if (secret === undefined || !secretMatches(server, secret)) throw invalidClient('client authentication failed');
    return { kind: 'resource_server', label: server.label };
  }
  const client = authenticateClient(presented, clients);
  if (client.kind !== 'confidential') throw invalidClient('only resource servers and confidential clients may introspect tokens');
  return { kind: 'client', client };
}

/**
 * A resource server's label is a URL, so it holds a colon; sent in Basic without RFC 6749 §2.3.1's form-encoding (as
 * `curl -u` and many libraries send it) it is split at the wrong colon. Such credentials are read as the label they
 * start with, when one does and the split found no resource server.
 */
function labelSentUnencoded(
  basic: { readonly id: string; readonly text: string },
  resourceServers: ReadonlyMap<string, ResourceServerRecord>,
): { id: string; secret: string } | undefined {
  if (resourceServers.has(basic.id)) return undefined;
  for (const label of resourceServers.keys()) {
    if (basic.text.startsWith(`${label}:`)) return { id: label, secret: basic.text.slice(label.length + 1) };
  }
  return undefined;
}

/** The authenticated client, or throws invalid_client (401 with WWW-Authenticate); both methods at once is invalid_request (DESIGN.md §4). */
export function authenticateClient(presented: PresentedCredentials, clients: { get(clientId: string): ClientRecord | undefined }): ClientRecord {
  const { basic, bodyClientId, bodySecret } = presented;
  if (presented.malformedBasic) throw invalidClient('the Authorization header is not valid HTTP Basic');
  // RFC 6749 §2.3.1: a client must not use more than one authentication method in a request.
  if (basic !== undefined && bodySecret !== undefined) throw invalidRequest('send the client secret either with HTTP Basic or in the body, not both');
  if (basic !== undefined) {
    if (bodyClientId !== undefined && bodyClientId !== basic.id) throw invalidClient('client_id does not match the credentials');
    const client = clients.get(basic.id);
    if (client === undefined || !secretMatches(client, basic.secret)) throw invalidClient('client authentication failed');
    return client;
  }
  if (bodyClientId === undefined) throw invalidClient('client authentication is required');
  const client = clients.get(bodyClientId);
  if (client === undefined) throw invalidClient('client authentication failed');
  if (bodySecret !== undefined) {
    if (!secretMatches(client, bodySecret)) throw invalidClient('client authentication failed');
    return client;
  }
  if (client.kind === 'confidential') throw invalidClient('this client must authenticate with its secret');
  return client;
}

/** The one client a request claims to be, looked up beforehand (dynamic clients need I/O), as authenticateClient's map. */
export async function claimedClient(directory: { find(clientId: string | undefined): Promise<ClientRecord | undefined> }, presented: PresentedCredentials): Promise<{ get(clientId: string): ClientRecord | undefined }> {
  const client = await directory.find(presented.claimedClientId);
  return { get: (clientId) => (client !== undefined && client.clientId === clientId ? client : undefined) };
}

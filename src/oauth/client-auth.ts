/** Client authentication at /token (RFC 6749 §2.3): HTTP Basic for confidential clients, client_id for public ones. */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { ClientRecord } from '../config/types.js';
import { invalidClient } from '../errors.js';
import { single, type Params } from '../http/params.js';

/** The last header decoded: each request decodes its header twice (claimedClientId, then authenticateClient). */
let lastDecoded: { header: string; credentials: { id: string; secret: string } | undefined } | undefined;

function decodeBasic(header: string): { id: string; secret: string } | undefined {
  if (lastDecoded?.header !== header) lastDecoded = { header, credentials: decodeBasicHeader(header) };
  return lastDecoded.credentials;
}

/** RFC 6749 §2.3.1: the Basic credentials are form-urlencoded before base64. */
function decodeBasicHeader(header: string): { id: string; secret: string } | undefined {
  const match = /^Basic ([A-Za-z0-9+/=]+)$/i.exec(header.trim());
  if (match === null) return undefined;
  const decoded = Buffer.from(match[1] as string, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon === -1) return undefined;
  try {
    const unescape = (text: string): string => decodeURIComponent(text.replace(/\+/g, ' '));
    return { id: unescape(decoded.slice(0, colon)), secret: unescape(decoded.slice(colon + 1)) };
  } catch {
    return undefined;
  }
}

/** Digests of the configured secrets, computed once per secret rather than per request. */
const expectedDigests = new Map<string, Buffer>();

/** Compares digests so the comparison takes the same time whatever the lengths. */
function secretsEqual(presented: string, expected: string): boolean {
  let b = expectedDigests.get(expected);
  if (b === undefined) {
    b = createHash('sha256').update(expected).digest();
    expectedDigests.set(expected, b);
  }
  const a = createHash('sha256').update(presented).digest();
  return timingSafeEqual(a, b);
}

/** The authenticated client, or throws invalid_client (401 with WWW-Authenticate). */
export function authenticateClient(
  authorization: string | undefined,
  params: Params,
  clients: ReadonlyMap<string, ClientRecord>,
): ClientRecord {
  const bodyClientId = single(params, 'client_id');
  if (params.has('client_secret')) throw invalidClient('client_secret_post is not supported; send the secret with HTTP Basic');
  if (authorization !== undefined) {
    const credentials = decodeBasic(authorization);
    if (credentials === undefined) throw invalidClient('the Authorization header is not valid HTTP Basic');
    if (bodyClientId !== undefined && bodyClientId !== credentials.id) throw invalidClient('client_id does not match the credentials');
    const client = clients.get(credentials.id);
    if (client?.secret === undefined || !secretsEqual(credentials.secret, client.secret)) {
      throw invalidClient('client authentication failed');
    }
    return client;
  }
  if (bodyClientId === undefined) throw invalidClient('client authentication is required');
  const client = clients.get(bodyClientId);
  if (client === undefined) throw invalidClient('client authentication failed');
  if (client.kind === 'confidential') throw invalidClient('this client must authenticate with HTTP Basic');
  return client;
}

/** The client a request claims to be, before authentication (for rate limits and logs). */
export function claimedClientId(authorization: string | undefined, params: Params): string | undefined {
  if (authorization !== undefined) return decodeBasic(authorization)?.id;
  return single(params, 'client_id');
}

/**
 * Client authentication (RFC 6749 §2.3), the one place that decides it for every endpoint: client_secret_basic or
 * client_secret_post for clients with a secret, private_key_jwt (RFC 7523 §2.2, DESIGN.md §13) for clients with keys,
 * client_id alone for public ones.
 */
import { decodeJwt } from 'jose';
import { JWT_BEARER_ASSERTION, verifyClientAssertion, type ClientKeys } from './private-key-jwt.js';
import type { ClientRecord, ResourceServerRecord } from '../config/types.js';
import { invalidClient, invalidRequest } from '../policy/oauth-error.js';
import { formDecodedStrictly, single, type Params } from '../http/params.js';
import { matchesDigest, sha256 } from '../crypto/digest.js';
import type { UsedOnce } from '../crypto/used-once.js';

/** What a request presents, decoded once per request. */
export interface PresentedCredentials {
  /** The client the request claims to be, before authentication (for rate limits and logs). */
  readonly claimedClientId: string | undefined;
  /** `text` is the Basic credentials as sent, before the form-decoding of RFC 6749 §2.3.1. */
  readonly basic: BasicCredentials | undefined;
  readonly malformedBasic: boolean;
  readonly bodyClientId: string | undefined;
  /** client_secret in the body (client_secret_post, RFC 6749 §2.3.1); undefined when absent. */
  readonly bodySecret: string | undefined;
  /** client_assertion_type and client_assertion (RFC 7521 §4.2) as sent; undefined when neither was. */
  readonly assertion: { readonly type: string | undefined; readonly jwt: string | undefined } | undefined;
}

/** RFC 7523 §3: without client_id in the body, the assertion's sub names the client (read unverified, to look it up). */
function assertionSubject(jwt: string | undefined): string | undefined {
  if (jwt === undefined) return undefined;
  try {
    const { sub } = decodeJwt(jwt);
    return typeof sub === 'string' && sub !== '' ? sub : undefined;
  } catch {
    return undefined;
  }
}

/** HTTP Basic credentials as decoded (RFC 6749 §2.3.1), with the secret also as it was sent. */
export interface BasicCredentials {
  readonly id: string;
  readonly secret: string;
  /** The secret before form-decoding: what a client that skipped the encoding meant (see basicSecretMatches). */
  readonly secretAsSent: string;
  /** The decoded header, `id:secret` as sent. */
  readonly text: string;
}

/** RFC 6749 §2.3.1: the Basic credentials are form-urlencoded before base64. */
function decodeBasic(header: string): BasicCredentials | undefined {
  const match = /^Basic ([A-Za-z0-9+/=]+)$/i.exec(header.trim());
  if (match === null) return undefined;
  const decoded = Buffer.from(match[1] as string, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon === -1) return undefined;
  const id = formDecodedStrictly(decoded.slice(0, colon));
  const secretAsSent = decoded.slice(colon + 1);
  const secret = formDecodedStrictly(secretAsSent);
  return id === undefined || secret === undefined ? undefined : { id, secret, secretAsSent, text: decoded };
}

export function readClientCredentials(authorization: string | undefined, params: Params): PresentedCredentials {
  const basic = authorization === undefined ? undefined : decodeBasic(authorization);
  const bodyClientId = single(params, 'client_id');
  const assertionType = single(params, 'client_assertion_type');
  const assertionJwt = single(params, 'client_assertion');
  const assertion = assertionType === undefined && assertionJwt === undefined ? undefined : { type: assertionType, jwt: assertionJwt };
  return {
    claimedClientId: authorization === undefined ? (bodyClientId ?? assertionSubject(assertionJwt)) : basic?.id,
    basic,
    malformedBasic: authorization !== undefined && basic === undefined,
    bodyClientId,
    bodySecret: params.get('client_secret')?.[0],
    assertion,
  };
}

/** A client that proved who it is, and what its request must record before it changes anything. */
export interface AuthenticatedClient {
  readonly client: ClientRecord;
  /**
   * The client assertion's jti (RFC 7523 §3), undefined for a secret or a public client: the endpoint records it with
   * the request's other one-time credentials (oauth/one-time-credentials.ts) once every other check passed.
   */
  readonly assertionReplay: UsedOnce | undefined;
}

/** Checks a private_key_jwt client's assertion at one endpoint, or throws invalid_client; answers its jti, recorded later. */
export type AssertionVerifier = (client: ClientRecord, assertion: string) => Promise<UsedOnce>;

/** What checking assertions reads: the issuer, the clock, and the keys of a client (directory.ts assertionKeysOf). */
export interface AssertionSources {
  readonly issuer: string;
  readonly now: () => number;
  readonly clients: {
    assertionKeysOf(client: ClientRecord): Promise<ClientKeys>;
    refetchedAssertionKeysOf(client: ClientRecord): Promise<ClientKeys | undefined>;
  };
}

/**
 * The assertion check of the endpoint at the first of `paths` (DESIGN.md §13: `aud` may name the issuer or this URL,
 * or the URL of another of `paths`). It records
 * nothing: the endpoint records the jti it answers before its request changes state (a replay's grant revocation
 * included), so a refused request writes nothing and a replayed assertion revokes nothing.
 */
export function assertionVerifier(sources: AssertionSources, ...paths: readonly [string, ...string[]]): AssertionVerifier {
  const endpointUrls = paths.map((path) => `${sources.issuer}${path}`);
  return async (client, assertion) => {
    const keys = await sources.clients.assertionKeysOf(client);
    if (!keys.ok) throw invalidClient(keys.reason);
    const expected = { clientId: client.clientId, issuer: sources.issuer, endpointUrls, now: sources.now() };
    let check = await verifyClientAssertion(assertion, keys.keys, expected);
    if (!check.ok && check.signerUnknown) {
      // A key the remembered set lacks: the client may have rotated its keys since the set was fetched.
      const again = await sources.clients.refetchedAssertionKeysOf(client);
      if (again?.ok === true) check = await verifyClientAssertion(assertion, again.keys, expected);
    }
    if (!check.ok) throw invalidClient(check.reason);
    return check.accepted.replay;
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

/**
 * A Basic secret, form-decoded as RFC 6749 §2.3.1 says, or as sent: many clients (the MCP SDK, `curl -u`) skip the
 * encoding, which turns the "+" of a base64 secret (`openssl rand -base64`) into a space. Both readings are of what
 * the caller sent, so the second gives a guesser nothing more.
 */
function basicSecretMatches(holder: { readonly secret?: string; readonly secretDigest?: string }, basic: BasicCredentials): boolean {
  return secretMatches(holder, basic.secret) || (basic.secretAsSent !== basic.secret && secretMatches(holder, basic.secretAsSent));
}

/** Who may call /introspect (DESIGN.md §8): a resource server by its label, or a confidential client. */
export type IntrospectionCaller = { readonly kind: 'resource_server'; readonly label: string } | { readonly kind: 'client'; readonly client: ClientRecord };

/**
 * A resource server authenticates with its label as the client id, by HTTP Basic (DESIGN.md §8) or, as the metadata
 * offers every caller, client_secret_post; anyone else as at /token, confidential only.
 */
export async function authenticateIntrospectionCaller(
  presented: PresentedCredentials,
  clients: { get(clientId: string): ClientRecord | undefined },
  resourceServers: ReadonlyMap<string, ResourceServerRecord>,
  verifyAssertion: AssertionVerifier,
): Promise<{ readonly caller: IntrospectionCaller; readonly assertionReplay: UsedOnce | undefined }> {
  const { claimedClientId, bodyClientId, bodySecret } = presented;
  const basic = presented.basic === undefined ? undefined : (labelSentUnencoded(presented.basic, resourceServers) ?? presented.basic);
  const callerId = basic?.id ?? claimedClientId;
  const server = callerId === undefined ? undefined : resourceServers.get(callerId);
  if (server !== undefined) {
    if (presented.assertion !== undefined) throw invalidClient('a resource server authenticates with its secret, not a client assertion');
    if (basic !== undefined && bodySecret !== undefined) throw invalidRequest('send the client secret either with HTTP Basic or in the body, not both');
    if (basic !== undefined && bodyClientId !== undefined && bodyClientId !== basic.id) throw invalidClient('client_id does not match the credentials');
    const matches = basic !== undefined ? basicSecretMatches(server, basic) : bodySecret !== undefined && secretMatches(server, bodySecret);
    if (!matches) throw invalidClient('client authentication failed');
    return { caller: { kind: 'resource_server', label: server.label }, assertionReplay: undefined };
  }
  const { client, assertionReplay } = await authenticateClient(presented, clients, verifyAssertion);
  if (client.kind !== 'confidential') throw invalidClient('only resource servers and confidential clients may introspect tokens');
  return { caller: { kind: 'client', client }, assertionReplay };
}

/**
 * A resource server's label is a URL, so it holds a colon; sent in Basic without RFC 6749 §2.3.1's form-encoding (as
 * `curl -u` and many libraries send it) it is split at the wrong colon. Such credentials are read as the label they
 * start with, when one does and the split found no resource server.
 */
function labelSentUnencoded(
  basic: { readonly id: string; readonly text: string },
  resourceServers: ReadonlyMap<string, ResourceServerRecord>,
): BasicCredentials | undefined {
  if (resourceServers.has(basic.id)) return undefined;
  for (const label of resourceServers.keys()) {
    if (basic.text.startsWith(`${label}:`)) {
      const secret = basic.text.slice(label.length + 1);
      return { id: label, secret, secretAsSent: secret, text: basic.text };
    }
  }
  return undefined;
}

/** DESIGN.md §13: a client with keys has no secret, so a secret it sends is refused, right or wrong. */
const noSecretOfKeyClient = (): ReturnType<typeof invalidClient> =>
  invalidClient('this client authenticates with private_key_jwt (client_assertion); it has no secret');

/** The authenticated client, or throws invalid_client (401 with WWW-Authenticate); two methods at once is invalid_request (DESIGN.md §4). */
export async function authenticateClient(
  presented: PresentedCredentials,
  clients: { get(clientId: string): ClientRecord | undefined },
  verifyAssertion: AssertionVerifier,
): Promise<AuthenticatedClient> {
  const { basic, bodyClientId, bodySecret } = presented;
  if (presented.malformedBasic) throw invalidClient('the Authorization header is not valid HTTP Basic');
  // RFC 6749 §2.3.1: a client must not use more than one authentication method in a request.
  if (basic !== undefined && bodySecret !== undefined) throw invalidRequest('send the client secret either with HTTP Basic or in the body, not both');
  if (presented.assertion !== undefined) return authenticateByAssertion(presented, presented.assertion, clients, verifyAssertion);
  if (basic !== undefined) {
    if (bodyClientId !== undefined && bodyClientId !== basic.id) throw invalidClient('client_id does not match the credentials');
    const client = clients.get(basic.id);
    if (client === undefined) throw invalidClient('client authentication failed');
    if (client.assertionKeys !== undefined) throw noSecretOfKeyClient();
    if (!basicSecretMatches(client, basic)) throw invalidClient('client authentication failed');
    return { client, assertionReplay: undefined };
  }
  if (bodyClientId === undefined) throw invalidClient('client authentication is required');
  const client = clients.get(bodyClientId);
  if (client === undefined) throw invalidClient('client authentication failed');
  if (client.assertionKeys !== undefined) {
    throw bodySecret !== undefined ? noSecretOfKeyClient() : invalidClient('this client must authenticate with private_key_jwt (client_assertion)');
  }
  if (bodySecret !== undefined) {
    if (!secretMatches(client, bodySecret)) throw invalidClient('client authentication failed');
    return { client, assertionReplay: undefined };
  }
  if (client.kind === 'confidential') throw invalidClient('this client must authenticate with its secret');
  return { client, assertionReplay: undefined };
}

/** private_key_jwt (RFC 7523 §2.2): the assertion alone authenticates; client_id, when sent, must name the same client. */
async function authenticateByAssertion(
  presented: PresentedCredentials,
  assertion: NonNullable<PresentedCredentials['assertion']>,
  clients: { get(clientId: string): ClientRecord | undefined },
  verifyAssertion: AssertionVerifier,
): Promise<AuthenticatedClient> {
  // RFC 6749 §2.3: one authentication method per request.
  if (presented.basic !== undefined || presented.bodySecret !== undefined) {
    throw invalidRequest('use one client authentication method: a client assertion or a client secret, not both');
  }
  if (assertion.type !== JWT_BEARER_ASSERTION) throw invalidClient(`client_assertion_type must be ${JWT_BEARER_ASSERTION}`);
  if (assertion.jwt === undefined) throw invalidClient('client_assertion is required with client_assertion_type');
  const clientId = presented.claimedClientId;
  if (clientId === undefined) throw invalidClient('the client assertion names no client: send client_id, or sub in the assertion');
  const client = clients.get(clientId);
  if (client === undefined) throw invalidClient('client authentication failed');
  if (client.assertionKeys === undefined) throw invalidClient('this client does not authenticate with private_key_jwt');
  return { client, assertionReplay: await verifyAssertion(client, assertion.jwt) };
}

/** The one client a request claims to be, looked up beforehand (dynamic clients need I/O), as authenticateClient's map. */
export async function claimedClient(directory: { find(clientId: string | undefined): Promise<ClientRecord | undefined> }, presented: PresentedCredentials): Promise<{ get(clientId: string): ClientRecord | undefined }> {
  const client = await directory.find(presented.claimedClientId);
  return { get: (clientId) => (client !== undefined && client.clientId === clientId ? client : undefined) };
}

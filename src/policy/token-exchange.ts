/**
 * The order in which a token exchange (RFC 8693, DESIGN.md §12) checks its request, as pure functions like
 * token-requests.ts: first what the request alone says, then the subject token's claims once jose has verified it,
 * then, with the state of its grant, the decision. Nothing here changes state, and neither does an exchange.
 *
 * | # | check                                                             | refusal                                   |
 * |---|-------------------------------------------------------------------|-------------------------------------------|
 * | 1 | a configured confidential client with a token_exchange block      | unauthorized_client                       |
 * | 2 | resource at most once                                             | invalid_request "resource appears ..."    |
 * | 3 | no actor_token, no actor_token_type, no audience                  | invalid_request, one text each            |
 * | 4 | subject_token, subject_token_type = access_token                  | invalid_request                           |
 * | 5 | requested_token_type absent or access_token                       | invalid_request                           |
 * | 6 | scope well-formed                                                 | invalid_scope                             |
 * | 7 | subject token verified (issuer, keys, unexpired, at+jwt), claims  | invalid_grant (not one this client may…)  |
 * | 8 | not addressed to the issuer (provider scopes)                     | invalid_grant (same text)                 |
 * | 9 | of a grant (a person's), not client_credentials                   | invalid_grant (same text)                 |
 * |10 | aud holds one of the caller's subject_audience                    | invalid_grant (same text)                 |
 * |11 | fewer than MAX_ACT_DEPTH earlier exchanges                        | invalid_grant (exchanged too often)       |
 * |12 | its grant stands (§8: not revoked, person and clients configured) | invalid_grant (same text as 7)            |
 * |13 | resource nameable in the caller's audience (§5)                   | invalid_target (§5 first text)            |
 * |14 | scope within subject ∩ caller's scopes, no provider scope, not ∅  | invalid_scope                             |
 */
import { MAX_ACT_DEPTH, actDepth, nestAct, type ActClaim } from './act-chain.js';
import { OAuthError, invalidGrant } from './oauth-error.js';
import { PROVIDER_SCOPES, decideResourceParameter, decideTokenAudience, type Audience } from './resource.js';
import type { PolicyClient } from './token-requests.js';
import { allow, refuse, type Decision } from './decision.js';
import { grantRefusal, mayUseGrant, TOKEN_EXCHANGE_GRANT } from './grant-eligibility.js';

export { TOKEN_EXCHANGE_GRANT };
/** RFC 8693 §3: the one token type this server takes and issues. */
export const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';

/** A client as token exchange sees it (a configured ClientRecord fits). */
export interface ExchangeClient extends PolicyClient {
  /** DESIGN.md §3 `token_exchange` block: the audience values whose tokens this client may exchange. */
  readonly tokenExchange?: { readonly subjectAudience: readonly string[] };
}

/** The parameters of an exchange as sent: a value, or undefined when absent; `present` for those refused outright. */
export interface ExchangeParameters {
  readonly subjectToken?: string;
  readonly subjectTokenType?: string;
  readonly requestedTokenType?: string;
  /** Raw `resource` values, repeats included. */
  readonly resources: readonly string[];
  /** The parsed `scope`: [] when absent, undefined when malformed. */
  readonly requestedScope: readonly string[] | undefined;
  /** Whether these were sent at all (an empty value counts). */
  readonly actorToken: boolean;
  readonly actorTokenType: boolean;
  readonly audience: boolean;
}

export interface ExchangeRequest {
  readonly subjectToken: string;
  readonly resource?: string;
  /** Empty: the whole intersection of the subject token's and the caller's scopes. */
  readonly requestedScope: readonly string[];
}

const badRequest = (description: string): OAuthError => new OAuthError('invalid_request', description);

/** DESIGN.md §12: every refusal of the subject token itself says the same, so it tells a caller nothing more. */
export const badSubjectToken = (): OAuthError => invalidGrant('the subject token is not one this client may exchange');
export const exchangedTooOften = (): OAuthError =>
  invalidGrant(`the subject token has been exchanged ${MAX_ACT_DEPTH} times already, the most a token may be`);

/** DESIGN.md §12: only a configured confidential client with a token_exchange block; dynamic clients never (§7). */
export function mayExchangeTokens(client: ExchangeClient): boolean {
  return mayUseGrant(client, TOKEN_EXCHANGE_GRANT);
}

/** Rows 1-6: what the request alone decides, before the subject token is looked at. */
export function checkTokenExchangeRequest(client: ExchangeClient, sent: ExchangeParameters): Decision<ExchangeRequest> {
  const ineligible = grantRefusal(client, TOKEN_EXCHANGE_GRANT);
  if (ineligible !== undefined) return refuse(ineligible);
  const named = decideResourceParameter('token_exchange', sent.resources);
  if (!named.ok) return named;
  // RFC 8693 §2.1 lets a second token name the actor; here the authenticated caller is the actor, always.
  if (sent.actorToken) return refuse(badRequest('actor_token is not supported: the authenticated client is the actor'));
  if (sent.actorTokenType) return refuse(badRequest('actor_token_type is not supported: it goes with actor_token, which is not taken'));
  if (sent.audience) return refuse(badRequest('audience is not taken: name the server the token is for with resource (RFC 8707)'));
  if (sent.subjectToken === undefined) return refuse(badRequest('subject_token is required'));
  if (sent.subjectTokenType === undefined) return refuse(badRequest('subject_token_type is required'));
  if (sent.subjectTokenType !== ACCESS_TOKEN_TYPE) return refuse(badRequest(`subject_token_type must be ${ACCESS_TOKEN_TYPE}`));
  if (sent.requestedTokenType !== undefined && sent.requestedTokenType !== ACCESS_TOKEN_TYPE) {
    return refuse(badRequest(`requested_token_type must be ${ACCESS_TOKEN_TYPE}, the only type issued`));
  }
  if (sent.requestedScope === undefined) return refuse(new OAuthError('invalid_scope', 'scope is malformed'));
  const resource = named.value;
  return allow({ subjectToken: sent.subjectToken, ...(resource !== undefined && { resource }), requestedScope: sent.requestedScope });
}

/** What an exchange takes from its subject token. */
export interface SubjectToken {
  readonly subject: string;
  /** The client the subject token was issued to. */
  readonly clientId: string;
  readonly jti: string;
  readonly grantId: string;
  readonly audience: readonly string[];
  readonly scope: readonly string[];
  /** Epoch seconds. */
  readonly expiresAt: number;
  /** Epoch seconds, when the token says when the person signed in. */
  readonly authTime?: number;
  readonly act?: ActClaim;
}

/**
 * Rows 7-11: the subject token's claims, once jose has verified signature, issuer, `typ` and expiry (`claims` is
 * undefined when it refused), and `grantId` is what its jti names (undefined for a token without a grant).
 */
export function checkSubjectToken(input: {
  readonly client: ExchangeClient;
  readonly issuer: string;
  readonly claims: Readonly<Record<string, unknown>> | undefined;
  readonly grantId: string | undefined;
}): Decision<SubjectToken> {
  const { client, issuer, claims, grantId } = input;
  if (claims === undefined) return refuse(badSubjectToken());
  const { sub, client_id: clientId, jti, aud, scope, exp, auth_time: authTime, act } = claims;
  const audience = typeof aud === 'string' ? [aud] : aud;
  if (typeof sub !== 'string' || typeof clientId !== 'string' || typeof jti !== 'string' || typeof scope !== 'string' || typeof exp !== 'number') {
    return refuse(badSubjectToken());
  }
  if (!Array.isArray(audience) || !audience.every((value): value is string => typeof value === 'string')) return refuse(badSubjectToken());
  // DESIGN.md §12: a token for the provider alone (§5 provider scopes) is never a subject token.
  if (audience.includes(issuer)) return refuse(badSubjectToken());
  // Exchange is on a person's behalf: a client_credentials token has no grant, so none that could stand.
  if (grantId === undefined) return refuse(badSubjectToken());
  const subjectAudience = client.tokenExchange?.subjectAudience ?? [];
  if (!audience.some((value) => subjectAudience.includes(value))) return refuse(badSubjectToken());
  const depth = actDepth(act);
  if (depth === undefined) return refuse(badSubjectToken());
  if (depth >= MAX_ACT_DEPTH) return refuse(exchangedTooOften());
  return allow({
    subject: sub,
    clientId,
    jti,
    grantId,
    audience,
    scope: scope.split(' ').filter((value) => value.length > 0),
    expiresAt: exp,
    ...(typeof authTime === 'number' && { authTime }),
    ...(act !== undefined && { act: act as ActClaim }),
  });
}

export interface Exchange {
  readonly audience: Audience;
  readonly scope: readonly string[];
  readonly act: ActClaim;
}

/** Rows 12-14: with the state of the subject token's grant, the new token's `aud`, `scope` and `act`. */
export function decideTokenExchange(input: {
  readonly client: ExchangeClient;
  readonly issuer: string;
  readonly request: ExchangeRequest;
  readonly subject: SubjectToken;
  /** DESIGN.md §8 access-token state of the subject token: its grant lives and its person and clients are configured. */
  readonly grantStands: boolean;
}): Decision<Exchange> {
  const { client, request, subject } = input;
  if (!input.grantStands) return refuse(badSubjectToken());
  // DESIGN.md §5 against the caller's audience, by the one resource policy: a nameable entry, else the whole audience
  // (no provider scope crosses an exchange, and no authorization named resources).
  const named = request.resource === undefined ? [] : [request.resource];
  const audience = decideTokenAudience({ grantType: 'token_exchange', client, issuer: input.issuer, grantScope: [], tokenScope: [], grantResources: [], requested: named });
  if (!audience.ok) return audience;
  const scope = decideExchangeScope(request.requestedScope, subject.scope, client.scopes);
  if (!scope.ok) return scope;
  return allow({ audience: audience.value, scope: scope.value, act: nestAct(client.clientId, subject.act) });
}

/**
 * DESIGN.md §12: the new scope lies within both the subject token's and the caller's scopes; provider scopes (§5)
 * never cross an exchange; without `scope` it is that whole intersection; nothing left is invalid_scope.
 */
export function decideExchangeScope(requested: readonly string[], subjectScope: readonly string[], callerScopes: readonly string[]): Decision<string[]> {
  const crossing = subjectScope.filter((value) => callerScopes.includes(value) && !PROVIDER_SCOPES.includes(value));
  const provider = requested.find((value) => PROVIDER_SCOPES.includes(value));
  if (provider !== undefined) return refuse(new OAuthError('invalid_scope', `scope "${provider}" is for the provider alone and never crosses an exchange`));
  const outside = requested.find((value) => !crossing.includes(value));
  if (outside !== undefined) {
    return refuse(new OAuthError('invalid_scope', `scope "${outside}" is not in both the subject token's scope and this client's scopes`));
  }
  const scope = requested.length > 0 ? [...requested] : crossing;
  if (scope.length === 0) return refuse(new OAuthError('invalid_scope', "no scope of the subject token is one this client may have"));
  return allow(scope);
}

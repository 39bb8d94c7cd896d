/**
 * grant_type=urn:ietf:params:oauth:grant-type:token-exchange (RFC 8693, DESIGN.md §12): a resource server that got a
 * person's token calls another server on that person's behalf, with a token for that server alone. The checks, in
 * order, are policy/token-exchange.ts; an exchange changes no state (its token belongs to the subject token's grant),
 * so a refused one writes nothing by construction.
 */
import type { JWTPayload } from 'jose';
import { all, single, type Params } from '../../http/params.js';
import { audienceClaim } from '../../policy/resource.js';
import { parseScope } from '../../policy/scope.js';
import {
  ACCESS_TOKEN_TYPE,
  TOKEN_EXCHANGE_GRANT,
  checkSubjectToken,
  checkTokenExchangeRequest,
  decideTokenExchange,
  type Exchange,
  type ExchangeParameters,
  type SubjectToken,
} from '../../policy/token-exchange.js';
import type { VerifiedAccessTokens } from '../../crypto/jwt.js';
import type { SigningKeys } from '../../crypto/keys.js';
import { accessTokenStands, type AccessTokenStateSources } from '../../tokens/access-token-state.js';
import { grantIdOfJti } from '../../tokens/claims.js';
import { issueTokens, type TokenSigner } from '../../tokens/response.js';
import type { GrantHandler } from './grant.js';

/** What this grant reads (RFC 8693 §2.1); actor_token, actor_token_type and audience are read only to be refused. */
function exchangeParameters(params: Params): ExchangeParameters {
  return {
    subjectToken: single(params, 'subject_token'),
    subjectTokenType: single(params, 'subject_token_type'),
    requestedTokenType: single(params, 'requested_token_type'),
    resources: all(params, 'resource'),
    requestedScope: parseScope(single(params, 'scope')),
    actorToken: params.has('actor_token'),
    actorTokenType: params.has('actor_token_type'),
    audience: params.has('audience'),
  };
}

interface ValidExchange extends Exchange {
  readonly subject: SubjectToken;
}

/** What token exchange uses, wired by tokenRoutes: it reads state only through the one access-token check. */
export interface TokenExchangeGrantDeps {
  readonly issuer: string;
  /** The keys in use now, read at each use: keys rotate while the server runs. */
  readonly keys: () => SigningKeys;
  readonly verifiedAccessTokens: VerifiedAccessTokens;
  readonly tokenState: AccessTokenStateSources;
  readonly signer: TokenSigner;
}

export function tokenExchangeGrant(deps: TokenExchangeGrantDeps): GrantHandler<ValidExchange> {
  /** jose's verdict on the subject token (issuer, our keys, unexpired, at+jwt); undefined when it refused. */
  async function verifiedClaims(token: string, now: number): Promise<JWTPayload | undefined> {
    try {
      // A resource server exchanges one person's token for each downstream call: jose verifies it once (DESIGN.md §11 speed).
      return await deps.verifiedAccessTokens.verify(deps.keys(), token, deps.issuer, now);
    } catch {
      return undefined;
    }
  }

  return {
    grantType: TOKEN_EXCHANGE_GRANT,

    async validate({ client, params, now }) {
      const request = checkTokenExchangeRequest(client, exchangeParameters(params));
      if (!request.ok) return request;
      const claims = await verifiedClaims(request.value.subjectToken, now);
      const jti = typeof claims?.jti === 'string' ? claims.jti : undefined;
      const subject = checkSubjectToken({ client, issuer: deps.issuer, claims, grantId: jti === undefined ? undefined : grantIdOfJti(jti) });
      if (!subject.ok) return subject;
      const grantStands = await accessTokenStands(deps.tokenState, { jti: subject.value.jti, clientId: subject.value.clientId, subject: subject.value.subject, exchanged: subject.value.act !== undefined });
      const decision = decideTokenExchange({ client, issuer: deps.issuer, request: request.value, subject: subject.value, grantStands });
      if (!decision.ok) return decision;
      const { audience, scope, act } = decision.value;
      return { ok: true, value: { audience, scope, act, subject: subject.value } };
    },

    async respond({ client, now, proofKey }, { subject, audience, scope, act }) {
      const issued = await issueTokens(
        deps.signer,
        {
          client,
          grantId: subject.grantId,
          subject: subject.subject,
          audience,
          scope,
          // DESIGN.md §12-13: with a proof, the exchanged token is DPoP-bound like any other.
          confirmation: proofKey,
          ...(subject.authTime !== undefined && { authTime: subject.authTime * 1000 }),
          exchange: { act, notAfter: subject.expiresAt, issuedTokenType: ACCESS_TOKEN_TYPE },
          // DESIGN.md §12: the audit line names the caller (client_id), the subject token's client, the person, both auds.
          audit: { subject_client_id: subject.clientId, sub: subject.subject, subject_aud: audienceClaim(subject.audience) },
        },
        now,
      );
      return issued;
    },
  };
}

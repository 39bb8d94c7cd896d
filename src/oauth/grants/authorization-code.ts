/** grant_type=authorization_code (RFC 6749 §4.1.3, RFC 7636 §4.6, RFC 8707 §2.2); the checks are policy/token-requests.ts. */
import { pkceChallengeOf, digestOf } from '../../crypto/digest.js';
import { newRefreshToken } from '../../crypto/refresh-token.js';
import { all, single } from '../../http/params.js';
import { refreshLifetimeOf } from '../../policy/grant-eligibility.js';
import type { Audience } from '../../policy/resource.js';
import { bindingRefusal, refreshTokenBinding } from '../../policy/sender-constraint.js';
import { badCode, checkCodeExchangeRequest, decideCodeExchange } from '../../policy/token-requests.js';
import type { AuthorizationCodeRecord, AuthorizationCodeStore, Grant, GrantStore } from '../../store/types.js';
import { issueTokens } from '../../tokens/response.js';
import { revokeReplayed, type GrantHandler, type PersonGrantDeps } from './grant.js';

interface ValidCodeExchange {
  readonly code: AuthorizationCodeRecord;
  readonly grant: Grant;
  readonly audience: Audience;
}

/** What the code exchange uses, wired by tokenRoutes. */
export interface AuthorizationCodeGrantDeps extends PersonGrantDeps {
  readonly store: AuthorizationCodeStore & GrantStore;
}

export function authorizationCodeGrant(deps: AuthorizationCodeGrantDeps): GrantHandler<ValidCodeExchange> {
  const { store } = deps;
  return {
    grantType: 'authorization_code',

    async validate({ client, params, now, proofKey }) {
      const requested = all(params, 'resource');
      const sent = { code: single(params, 'code'), redirectUri: single(params, 'redirect_uri'), verifier: single(params, 'code_verifier') };
      const shape = checkCodeExchangeRequest(client, requested, sent);
      if (!shape.ok) return shape;
      const { code, redirectUri, verifier } = shape.value;
      const state = await store.findCode(digestOf(code), now);
      // RFC 9449 §10: this client's code bound by dpop_jkt needs its key's proof, judged before replay detection so a
      // stolen code presented without the key cannot revoke (another client's code is refused below as any unknown one).
      const boundKey = state.status !== 'unknown' && state.code.clientId === client.clientId ? state.code.boundKey : undefined;
      const unbound = bindingRefusal(boundKey, proofKey, 'authorization code');
      if (unbound !== undefined) return { ok: false, error: unbound };
      const subjectExists = state.status !== 'active' || deps.isKnownSubject(state.grant.subject);
      const verifierChallenge = pkceChallengeOf(verifier);
      const decision = decideCodeExchange({ client, issuer: deps.issuer, state, redirectUri, verifierChallenge, requested, subjectExists });
      if (!decision.ok || state.status !== 'active') return decision.ok ? { ok: false, error: badCode() } : decision;
      return { ok: true, value: { code: state.code, grant: state.grant, audience: decision.value } };
    },

    async respond(request, { code, grant, audience }) {
      const { client, now, proofKey } = request;
      const refreshLifetimeMs = refreshLifetimeOf(client);
      const refresh = refreshLifetimeMs === undefined ? undefined : newRefreshToken(grant.id, now, refreshLifetimeMs, refreshTokenBinding(client, proofKey));
      // The code is used and the refresh token stored in one transaction: one commit per exchange.
      // The grant lives at least as long as the access token, so /introspect finds it (DESIGN.md §8).
      if (!(await store.consumeCode(code.digest, now, now + deps.signer.accessTokenLifetimeMs, refresh?.record))) {
        // Another exchange of the same code, by the same client, won the race: that is a replay too (DESIGN.md §6).
        await revokeReplayed(store, deps.metrics, request, grant.id, 'authorization_code');
        throw badCode();
      }
      return issueTokens(
        deps.signer,
        {
          client,
          grantId: grant.id,
          subject: grant.subject,
          audience,
          scope: grant.scope,
          confirmation: proofKey,
          authTime: grant.authTime,
          refreshToken: refresh?.value,
          idToken: { nonce: code.nonce, claims: grant.claims, authTime: grant.authTime },
        },
        now,
      );
    },
  };
}

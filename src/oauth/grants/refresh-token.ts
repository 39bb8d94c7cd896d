/** grant_type=refresh_token (RFC 6749 §6) with rotation and reuse detection (RFC 9700 §4.14.2); the checks are policy/token-requests.ts. */
import type { AppContext } from '../../context.js';
import { newRefreshToken, refreshTokenKey } from '../../crypto/refresh-token.js';
import { all, single } from '../../http/params.js';
import type { Audience } from '../../policy/resource.js';
import { parseScope } from '../../policy/scope.js';
import { badRefreshToken, checkRefreshRequest, decideRefresh } from '../../policy/token-requests.js';
import type { Grant, GrantStore, RefreshTokenRecord, RefreshTokenStore } from '../../store/types.js';
import { issueTokens } from '../token-response.js';
import { revokeReplayed, type GrantHandler } from './grant.js';

interface ValidRefresh {
  readonly token: RefreshTokenRecord;
  readonly grant: Grant;
  readonly scope: readonly string[];
  readonly audience: Audience;
  readonly lifetimeMs: number;
}

export function refreshTokenGrant(ctx: AppContext, store: RefreshTokenStore & GrantStore): GrantHandler<ValidRefresh> {
  return {
    grantType: 'refresh_token',

    async validate({ client, params, now }) {
      const requested = all(params, 'resource');
      const shape = checkRefreshRequest(client, requested, single(params, 'refresh_token'), parseScope(single(params, 'scope')));
      if (!shape.ok) return shape;
      const { presented, requestedScope } = shape.value;
      const key = refreshTokenKey(presented);
      if (key === undefined) return { ok: false, error: badRefreshToken() };
      const state = await store.findRefreshToken(key.grantId, key.digest, now);
      const subjectExists = state.status !== 'active' || ctx.isKnownSubject(state.grant.subject);
      const decision = decideRefresh({ client, issuer: ctx.issuer, state, requestedScope, requested, subjectExists });
      if (!decision.ok || state.status !== 'active') return decision.ok ? { ok: false, error: badRefreshToken() } : decision;
      const { scope, audience } = decision.value;
      return { ok: true, value: { token: state.token, grant: state.grant, scope, audience, lifetimeMs: shape.value.lifetimeMs } };
    },

    async respond(request, { token, grant, scope, audience, lifetimeMs }) {
      const { client, now } = request;
      const next = newRefreshToken(grant.id, now, lifetimeMs);
      if (!(await store.rotateRefreshToken(token.digest, next.record, now))) {
        // Lost a race with a parallel refresh of the same token: that is reuse too (DESIGN.md §6).
        await revokeReplayed(store, ctx.metrics, request, grant.id, 'refresh_token');
        throw badRefreshToken();
      }
      return issueTokens(ctx, { client, grantId: grant.id, subject: grant.subject, audience, scope, authTime: grant.authTime, refreshToken: next.value }, now);
    },
  };
}

/**
 * grant_type=refresh_token (RFC 6749 §6) with rotation, reuse detection (RFC 9700 §4.14.2) and the per-client reuse
 * grace of DESIGN.md §6; the checks are policy/token-requests.ts.
 */
import { newRefreshToken, refreshTokenKey } from '../../crypto/refresh-token.js';
import { all, single } from '../../http/params.js';
import type { Audience } from '../../policy/resource.js';
import { parseScope } from '../../policy/scope.js';
import { bindingRefusal, refreshTokenBinding } from '../../policy/sender-constraint.js';
import { badRefreshToken, checkRefreshRequest, decideRefresh, withinReuseGrace, type RefreshState } from '../../policy/token-requests.js';
import type { Grant, GrantStore, RefreshLookup, RefreshTokenStore } from '../../store/types.js';
import { issueTokens } from '../../tokens/response.js';
import { revokeReplayed, type GrantHandler, type PersonGrantDeps } from './grant.js';

interface ValidRefresh {
  /** The digest of the presented token, to rotate; absent for a token presented again within the grace. */
  readonly rotate?: string;
  readonly grant: Grant;
  readonly scope: readonly string[];
  readonly audience: Audience;
  readonly lifetimeMs: number;
  /** RFC 9449 §5: the DPoP key the presented token was bound to, which its successor keeps. */
  readonly boundKey?: string;
}

/** What refreshing uses, wired by tokenRoutes. */
export interface RefreshTokenGrantDeps extends PersonGrantDeps {
  readonly store: RefreshTokenStore & GrantStore;
}

export function refreshTokenGrant(deps: RefreshTokenGrantDeps): GrantHandler<ValidRefresh> {
  const { store } = deps;
  /** The state the policy judges of a token that is not active: a rotated token of this client within its grace names its (live) grant. */
  async function inactiveStateOf(lookup: Exclude<RefreshLookup, { status: 'active' }>, clientId: string, graceMs: number, now: number): Promise<{ state: RefreshState; grant?: Grant }> {
    if (lookup.status === 'rotated' && lookup.clientId === clientId && withinReuseGrace(lookup.rotatedAt, graceMs, now)) {
      const grant = await store.findGrant(lookup.grantId, now);
      if (grant !== undefined) return { state: { status: 'within-grace', grant }, grant };
    }
    return { state: lookup };
  }

  return {
    grantType: 'refresh_token',

    async validate({ client, params, now, proofKey }) {
      const requested = all(params, 'resource');
      const shape = checkRefreshRequest(client, requested, single(params, 'refresh_token'), parseScope(single(params, 'scope')));
      if (!shape.ok) return shape;
      const { presented, requestedScope } = shape.value;
      const key = refreshTokenKey(presented);
      if (key === undefined) return { ok: false, error: badRefreshToken() };
      const lookup = await store.findRefreshToken(key.grantId, key.digest, now);
      // RFC 9449 §5: this client's bound token without its key's proof is refused before reuse detection, so it cannot
      // revoke (another client's token is refused below as any unknown one).
      const boundKey =
        lookup.status === 'active' && lookup.grant.clientId === client.clientId ? lookup.token.boundKey
        : lookup.status === 'rotated' && lookup.clientId === client.clientId ? lookup.boundKey
        : undefined;
      const unbound = bindingRefusal(boundKey, proofKey);
      if (unbound !== undefined) return { ok: false, error: unbound };
      // An active token is judged as found: no further read, so no await for it.
      const { state, grant } = lookup.status === 'active' ? { state: lookup, grant: lookup.grant } : await inactiveStateOf(lookup, client.clientId, client.refreshReuseGraceMs, now);
      const subjectExists = grant === undefined || deps.isKnownSubject(grant.subject);
      const decision = decideRefresh({ client, issuer: deps.issuer, state, requestedScope, requested, subjectExists });
      if (!decision.ok) return decision;
      if (grant === undefined) return { ok: false, error: badRefreshToken() };
      const { scope, audience } = decision.value;
      const rotate = lookup.status === 'active' ? lookup.token.digest : undefined;
      // Spreads last: V8 builds a literal that starts with an object spread on its slow path (about 1 µs here).
      return { ok: true, value: { grant, scope, audience, lifetimeMs: shape.value.lifetimeMs, ...(rotate !== undefined && { rotate }), ...(boundKey !== undefined && { boundKey }) } };
    },

    async respond(request, { rotate, grant, scope, audience, lifetimeMs, boundKey }) {
      const { client, now, proofKey } = request;
      const next = newRefreshToken(grant.id, now, lifetimeMs, refreshTokenBinding(client, proofKey, boundKey));
      let stored = rotate === undefined ? await store.addRefreshToken(next.record, now) : await store.rotateRefreshToken(rotate, next.record, now, grant.expiresAt);
      // Lost a race with a parallel refresh of the same token, which rotated it just now: within a grace that is the
      // case the grace exists for (a sibling of the same grant); without one it is reuse (DESIGN.md §6).
      if (!stored && rotate !== undefined && client.refreshReuseGraceMs > 0) stored = await store.addRefreshToken(next.record, now);
      if (!stored) {
        if (rotate !== undefined && client.refreshReuseGraceMs === 0) await revokeReplayed(store, deps.metrics, request, grant.id, 'refresh_token');
        throw badRefreshToken();
      }
      if (rotate === undefined) request.log.info({ client_id: client.clientId, grant_id: grant.id }, 'rotated refresh token presented again within the reuse grace');
      return issueTokens(deps.signer, { client, grantId: grant.id, subject: grant.subject, audience, scope, confirmation: proofKey, authTime: grant.authTime, refreshToken: next.value }, now);
    },
  };
}

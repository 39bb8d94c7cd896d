/** grant_type=refresh_token (RFC 6749 §6) with rotation and reuse detection (RFC 9700 §4.14.2). */
import { OAuthError, invalidGrant } from '../../errors.js';
import { all, required, single } from '../../http/params.js';
import { decideResourceParameter, decideTokenAudience, type Audience } from '../../policy/resource.js';
import { decideRefreshScope, parseScope } from '../../policy/scope.js';
import type { Grant, RefreshTokenRecord } from '../../store/types.js';
import { newRefreshToken, refreshTokenKey } from '../../tokens/mint.js';
import { issueTokens } from '../token-response.js';
import { unwrap, type GrantHandler } from './grant.js';

interface ValidRefresh {
  readonly token: RefreshTokenRecord;
  readonly grant: Grant;
  readonly scope: readonly string[];
  readonly audience: Audience;
  readonly lifetimeMs: number;
}

const badRefreshToken = (): OAuthError => invalidGrant('the refresh token is invalid, expired or revoked');

export const refreshTokenGrant: GrantHandler<ValidRefresh> = {
  grantType: 'refresh_token',

  async validate(ctx, { client, params, now, log }) {
    unwrap(decideResourceParameter('refresh_token', all(params, 'resource')));
    const presented = required(params, 'refresh_token');
    const requestedScope = parseScope(single(params, 'scope'));
    if (requestedScope === undefined) throw new OAuthError('invalid_scope', 'scope is malformed');
    const lifetimeMs = client.refreshLifetimeMs;
    if (lifetimeMs === undefined) throw new OAuthError('unauthorized_client', 'this client does not get refresh tokens');

    const key = refreshTokenKey(presented);
    if (key === undefined) throw badRefreshToken();
    const lookup = await ctx.store.findRefreshToken(key.grantId, key.digest, now);
    if (lookup.status === 'rotated') {
      if (lookup.clientId === client.clientId) {
        // RFC 9700 §4.14.2: a rotated token presented again means it leaked or the client raced itself.
        await ctx.store.revokeGrant(lookup.grantId);
        log.warn({ client_id: client.clientId, grant_id: lookup.grantId }, 'refresh token reused: grant revoked');
      }
      throw badRefreshToken();
    }
    if (lookup.status === 'unknown' || lookup.grant.clientId !== client.clientId) throw badRefreshToken();

    const scope = unwrap(decideRefreshScope(requestedScope, lookup.grant.scope));
    const audience = unwrap(
      decideTokenAudience({
        grantType: 'refresh_token',
        client,
        issuer: ctx.issuer,
        grantScope: lookup.grant.scope,
        tokenScope: scope,
        grantResources: lookup.grant.resources,
        requested: all(params, 'resource'),
      }),
    );
    return { token: lookup.token, grant: lookup.grant, scope, audience, lifetimeMs };
  },

  async respond(ctx, { client, now, log }, { token, grant, scope, audience, lifetimeMs }) {
    const next = newRefreshToken(grant.id, now, lifetimeMs);
    if (!(await ctx.store.rotateRefreshToken(token.digest, next.record, now))) {
      // Lost a race with a parallel refresh of the same token: that is reuse too (DESIGN.md §6).
      await ctx.store.revokeGrant(grant.id);
      log.warn({ client_id: client.clientId, grant_id: grant.id }, 'refresh token reused (parallel refresh): grant revoked');
      throw badRefreshToken();
    }
    return issueTokens(ctx, { client, subject: grant.subject, audience, scope, authTime: grant.authTime, refreshToken: next.value }, now);
  },
};

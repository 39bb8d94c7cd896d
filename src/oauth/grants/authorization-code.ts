/** grant_type=authorization_code (RFC 6749 §4.1.3, RFC 7636 §4.6, RFC 8707 §2.2). */
import { OAuthError, invalidGrant } from '../../errors.js';
import { all, required } from '../../http/params.js';
import { decideResourceParameter, decideTokenAudience, type Audience } from '../../policy/resource.js';
import type { AuthorizationCodeRecord, Grant } from '../../store/types.js';
import { digestOf, newRefreshToken } from '../../tokens/mint.js';
import { sha256 } from '../../tokens/sha256.js';
import { issueTokens } from '../token-response.js';
import { unwrap, type GrantHandler } from './grant.js';

interface ValidCodeExchange {
  readonly code: AuthorizationCodeRecord;
  readonly grant: Grant;
  readonly audience: Audience;
}

const VERIFIER = /^[A-Za-z0-9._~-]{43,128}$/;
const badCode = (): OAuthError => invalidGrant('the authorization code is invalid, expired or already used');

export const authorizationCodeGrant: GrantHandler<ValidCodeExchange> = {
  grantType: 'authorization_code',

  async validate(ctx, { client, params, now, log }) {
    if (client.kind === 'device' || client.redirectUris.length === 0) {
      throw new OAuthError('unauthorized_client', 'this client may not use the authorization_code grant');
    }
    unwrap(decideResourceParameter('authorization_code', all(params, 'resource')));
    const code = required(params, 'code');
    const redirectUri = required(params, 'redirect_uri');
    const verifier = required(params, 'code_verifier');
    if (!VERIFIER.test(verifier)) throw new OAuthError('invalid_request', 'code_verifier is malformed (RFC 7636 §4.1)');

    const lookup = await ctx.store.findCode(digestOf(code), now);
    if (lookup.status === 'used') {
      // RFC 6749 §4.1.2: a replayed code revokes what it issued.
      await ctx.store.revokeGrant(lookup.grantId);
      log.warn({ client_id: client.clientId, grant_id: lookup.grantId }, 'authorization code replayed: grant revoked');
      throw badCode();
    }
    if (lookup.status === 'unknown' || lookup.code.clientId !== client.clientId) throw badCode();
    if (lookup.code.redirectUri !== redirectUri) throw invalidGrant('redirect_uri does not match the authorization request');
    const challenge = sha256(verifier).toString('base64url');
    if (challenge !== lookup.code.codeChallenge) throw invalidGrant('code_verifier does not match the code_challenge');

    const audience = unwrap(
      decideTokenAudience({
        grantType: 'authorization_code',
        client,
        issuer: ctx.issuer,
        grantScope: lookup.grant.scope,
        tokenScope: lookup.grant.scope,
        grantResources: lookup.grant.resources,
        requested: all(params, 'resource'),
      }),
    );
    return { code: lookup.code, grant: lookup.grant, audience };
  },

  async respond(ctx, { client, now, log }, { code, grant, audience }) {
    const refresh = client.refreshLifetimeMs === undefined ? undefined : newRefreshToken(grant.id, now, client.refreshLifetimeMs);
    // The code is used and the refresh token stored in one transaction: one commit per exchange.
    if (!(await ctx.store.consumeCode(code.digest, now, refresh?.record))) {
      await ctx.store.revokeGrant(grant.id);
      log.warn({ client_id: client.clientId, grant_id: grant.id }, 'authorization code used twice at once: grant revoked');
      throw badCode();
    }
    return issueTokens(
      ctx,
      {
        client,
        subject: grant.subject,
        audience,
        scope: grant.scope,
        authTime: grant.authTime,
        refreshToken: refresh?.value,
        idToken: { nonce: code.nonce, claims: grant.claims, authTime: grant.authTime },
      },
      now,
    );
  },
};

/** grant_type=urn:ietf:params:oauth:grant-type:device_code (RFC 8628 §3.4-3.5): polling, then tokens once. */
import { randomUUID } from 'node:crypto';
import { OAuthError, invalidGrant } from '../../errors.js';
import { all, required } from '../../http/params.js';
import { decideResourceParameter, decideTokenAudience, type Audience } from '../../policy/resource.js';
import type { DeviceAuthorizationRecord, Grant, SubjectClaims } from '../../store/types.js';
import { digestOf, newRefreshToken } from '../../tokens/mint.js';
import { issueTokens } from '../token-response.js';
import { unwrap, type GrantHandler } from './grant.js';

interface Approval {
  readonly subject: string;
  readonly claims: SubjectClaims;
  readonly authTime: number;
}

/**
 * What a poll comes to. Only `approved` gives tokens; the others are answers RFC 8628 §3.5 defines,
 * given in respond() after the poll is recorded (the poll time is state the interval rule needs).
 */
type ValidPoll =
  | { readonly outcome: 'approved'; readonly record: DeviceAuthorizationRecord; readonly approval: Approval; readonly audience: Audience }
  | { readonly outcome: 'waiting'; readonly record: DeviceAuthorizationRecord; readonly tooFast: boolean }
  | { readonly outcome: 'closed'; readonly record: DeviceAuthorizationRecord; readonly error: OAuthError };

const badDeviceCode = (): OAuthError => invalidGrant('the device code is invalid or was already used');

export const deviceCodeGrant: GrantHandler<ValidPoll> = {
  grantType: 'urn:ietf:params:oauth:grant-type:device_code',

  async validate(ctx, { client, params, now }) {
    // DESIGN.md §5 order: the grant type that refuses `resource` comes before everything else.
    unwrap(decideResourceParameter('device_code', all(params, 'resource')));
    if (client.kind !== 'device') throw new OAuthError('unauthorized_client', 'this client may not use the device_code grant');
    const deviceCode = required(params, 'device_code');

    const record = await ctx.store.findByDeviceCode(digestOf(deviceCode));
    if (record === undefined || record.clientId !== client.clientId || record.status === 'redeemed') throw badDeviceCode();
    if (record.expiresAt <= now) {
      return { outcome: 'closed', record, error: new OAuthError('expired_token', 'the device code has expired; start again') };
    }
    if (record.status === 'denied') {
      return { outcome: 'closed', record, error: new OAuthError('access_denied', 'the person denied the request') };
    }
    if (record.status === 'pending') {
      // RFC 8628 §3.5: polling faster than the interval earns slow_down.
      const tooFast = record.lastPolledAt !== undefined && now - record.lastPolledAt < record.intervalSeconds * 1000;
      return { outcome: 'waiting', record, tooFast };
    }
    if (record.subject === undefined) throw badDeviceCode();
    const approval: Approval = { subject: record.subject, claims: record.claims ?? {}, authTime: record.authTime ?? record.createdAt };
    // DESIGN.md §5 "device flow": tokens always for the whole audience (no resources bound the grant).
    const audience = unwrap(
      decideTokenAudience({
        grantType: 'device_code',
        client,
        issuer: ctx.issuer,
        grantScope: record.scope,
        tokenScope: record.scope,
        grantResources: [],
        requested: all(params, 'resource'),
      }),
    );
    return { outcome: 'approved', record, approval, audience };
  },

  async respond(ctx, { client, now }, poll) {
    if (poll.outcome === 'waiting') {
      await ctx.store.recordPoll(poll.record.deviceCodeDigest, now, poll.tooFast);
      if (poll.tooFast) {
        throw new OAuthError('slow_down', `polling too fast; wait ${poll.record.intervalSeconds + 5} seconds between requests`);
      }
      throw new OAuthError('authorization_pending', 'the person has not yet approved the request');
    }
    if (poll.outcome === 'closed') {
      await ctx.store.recordPoll(poll.record.deviceCodeDigest, now, false);
      throw poll.error;
    }

    const { record, approval, audience } = poll;
    const grantId = randomUUID();
    const refresh = client.refreshLifetimeMs === undefined ? undefined : newRefreshToken(grantId, now, client.refreshLifetimeMs);
    const grant: Grant = {
      id: grantId,
      clientId: client.clientId,
      subject: approval.subject,
      scope: record.scope,
      resources: [],
      claims: approval.claims,
      authTime: approval.authTime,
      createdAt: now,
      // Without refresh tokens nothing reads the grant after this answer; keep it as long as its access token.
      expiresAt: refresh?.record.expiresAt ?? now + ctx.config.accessTokenLifetimeMs,
    };
    // RFC 8628 §3.5 + DESIGN.md §6: one atomic redemption; a second (or parallel) one gets invalid_grant.
    if (!(await ctx.store.redeemDeviceCode(record.deviceCodeDigest, grant, refresh?.record, now))) throw badDeviceCode();
    return issueTokens(
      ctx,
      {
        client,
        subject: grant.subject,
        audience,
        scope: grant.scope,
        authTime: grant.authTime,
        refreshToken: refresh?.value,
        // An ID token when the scope has openid, as for the code flow (no nonce: the device sent none).
        idToken: { claims: grant.claims, authTime: grant.authTime },
      },
      now,
    );
  },
};

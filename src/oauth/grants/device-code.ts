/** grant_type=urn:ietf:params:oauth:grant-type:device_code (RFC 8628 §3.4-3.5); the checks are policy/token-requests.ts. */
import { randomUUID } from 'node:crypto';
import { digestOf } from '../../crypto/digest.js';
import { newRefreshToken } from '../../crypto/refresh-token.js';
import { all, single } from '../../http/params.js';
import { DEVICE_CODE_GRANT, refreshLifetimeOf } from '../../policy/grant-eligibility.js';
import { OAuthError } from '../../policy/oauth-error.js';
import { refreshTokenBinding } from '../../policy/sender-constraint.js';
import { badDeviceCode, checkDevicePollRequest, decideDevicePoll, type DevicePoll } from '../../policy/token-requests.js';
import type { DeviceAuthorizationRecord, DeviceCodeStore, Grant } from '../../store/types.js';
import { issueTokens, type TokenSigner } from '../../tokens/response.js';
import type { GrantHandler } from './grant.js';

interface ValidPoll {
  readonly record: DeviceAuthorizationRecord;
  readonly poll: DevicePoll;
}

/** What device-code polling uses, wired by tokenRoutes. */
export interface DeviceCodeGrantDeps {
  readonly store: DeviceCodeStore;
  readonly issuer: string;
  readonly signer: TokenSigner;
}

export function deviceCodeGrant(deps: DeviceCodeGrantDeps): GrantHandler<ValidPoll> {
  const { store } = deps;
  return {
    grantType: DEVICE_CODE_GRANT,

    async validate({ client, params, now }) {
      const shape = checkDevicePollRequest(client, all(params, 'resource'), single(params, 'device_code'));
      if (!shape.ok) return shape;
      const record = await store.findByDeviceCode(digestOf(shape.value));
      const decision = decideDevicePoll({ client, issuer: deps.issuer, state: record, now });
      if (!decision.ok) return decision;
      if (record === undefined) return { ok: false, error: badDeviceCode() };
      return { ok: true, value: { record, poll: decision.value } };
    },

    async respond({ client, now, proofKey }, { record, poll }) {
      if (poll.outcome === 'waiting') {
        // The poll time is state the interval rule needs (RFC 8628 §3.5), so even a waiting answer records it.
        await store.recordPoll(record.deviceCodeDigest, now, poll.tooFast);
        if (poll.tooFast) {
          throw new OAuthError('slow_down', `polling too fast; wait ${record.intervalSeconds + 5} seconds between requests`);
        }
        throw new OAuthError('authorization_pending', 'the person has not yet approved the request');
      }
      if (poll.outcome === 'closed') {
        await store.recordPoll(record.deviceCodeDigest, now, false);
        throw poll.error;
      }

      const subject = record.subject as string;
      const authTime = record.authTime ?? record.createdAt;
      const claims = record.claims ?? {};
      const grantId = randomUUID();
      const refreshLifetimeMs = refreshLifetimeOf(client);
      const refresh = refreshLifetimeMs === undefined ? undefined : newRefreshToken(grantId, now, refreshLifetimeMs, refreshTokenBinding(client, proofKey));
      const grant: Grant = {
        id: grantId,
        clientId: client.clientId,
        subject,
        scope: record.scope,
        resources: [],
        claims,
        authTime,
        createdAt: now,
        // Without refresh tokens nothing reads the grant after this answer; keep it as long as its access token.
        expiresAt: refresh?.record.expiresAt ?? now + deps.signer.accessTokenLifetimeMs,
      };
      // RFC 8628 §3.5 + DESIGN.md §6: one atomic redemption; a second (or parallel) one gets invalid_grant.
      if (!(await store.redeemDeviceCode(record.deviceCodeDigest, grant, refresh?.record, now))) throw badDeviceCode();
      return issueTokens(
        deps.signer,
        {
          client,
          grantId,
          subject,
          audience: poll.audience,
          scope: grant.scope,
          confirmation: proofKey,
          authTime,
          refreshToken: refresh?.value,
          // An ID token when the scope has openid, as for the code flow (no nonce: the device sent none).
          idToken: { claims, authTime },
        },
        now,
      );
    },
  };
}

/** POST /device_authorization (RFC 8628 §3.1-3.2): a device code for the device, a user code for the person. */
import type { FastifyPluginAsync } from 'fastify';
import type { ClientDirectory } from '../clients/directory.js';
import { askableScopes, DEVICE_CODE_GRANT, mayUseGrant } from '../policy/grant-eligibility.js';
import { OAuthError } from '../policy/oauth-error.js';
import { StoreUnavailableError } from '../store/unavailable.js';
import { all, single } from '../http/params.js';
import { decideResourceParameter } from '../policy/resource.js';
import { decideRequestedScope, parseScope } from '../policy/scope.js';
import type { DeviceAuthorizationRecord, DeviceCodeStore, ReplayStore } from '../store/types.js';
import { newSecret, randomCode } from '../crypto/random.js';
import { formatUserCode, USER_CODE_ALPHABET, USER_CODE_LENGTH } from '../policy/user-code.js';
import { assertionVerifier, authenticateClient, claimedClient } from '../clients/authentication.js';
import { unwrap } from './grants/grant.js';
import { handleFormEndpoint, type FormEndpointDeps } from './form-endpoint.js';
import { useCredentialsOnce } from './one-time-credentials.js';

/** RFC 8628 §3.2 expires_in: long enough to find a phone and sign in. */
export const DEVICE_CODE_LIFETIME_MS = 600_000;
/** RFC 8628 §3.2 interval: the default of 5 s. */
export const POLL_INTERVAL_SECONDS = 5;
/** Draws before giving up when user codes collide with live ones (practically never more than one). */
const USER_CODE_DRAWS = 5;

/** A fresh user code in its stored form: 8 characters of the alphabet, no dash. */
export const newUserCode = (): string => randomCode(USER_CODE_ALPHABET, USER_CODE_LENGTH);

/** What /device_authorization uses, wired by buildApp. */
export interface DeviceAuthorizationRouteDeps extends FormEndpointDeps {
  readonly store: DeviceCodeStore & ReplayStore;
  /** Clients by client_id, and the keys a private_key_jwt client's assertion is checked with (DESIGN.md §13). */
  readonly clients: Pick<ClientDirectory, 'find' | 'assertionKeysOf' | 'refetchedAssertionKeysOf'>;
  readonly issuer: string;
}

export function deviceAuthorizationRoutes(deps: DeviceAuthorizationRouteDeps): FastifyPluginAsync {
  const { store } = deps;
  // RFC 7523 §3: the token endpoint's URL may name the server too (clients that reuse one audience for every call).
  const verifyAssertion = assertionVerifier(deps, '/device_authorization', '/token');
  async function storeNewAuthorization(record: Omit<DeviceAuthorizationRecord, 'userCode'>): Promise<string> {
    for (let draw = 1; ; draw++) {
      const userCode = newUserCode();
      try {
        await store.createDeviceAuthorization({ ...record, userCode });
        return userCode;
      } catch (error) {
        if (error instanceof StoreUnavailableError || draw >= USER_CODE_DRAWS) throw error;
      }
    }
  }

  return async (app) => {
    app.post('/device_authorization', async (request, reply) =>
      handleFormEndpoint(deps, request, reply, async (params, presented) => {
        const { client, assertionReplay } = await authenticateClient(presented, await claimedClient(deps.clients, presented), verifyAssertion);
        if (!mayUseGrant(client, DEVICE_CODE_GRANT)) throw new OAuthError('unauthorized_client', 'this client may not use the device authorization flow');
        // DESIGN.md §5: device tokens are for the whole audience, so any `resource` is refused, never ignored.
        unwrap(decideResourceParameter('device_code', all(params, 'resource')));
        const requestedScope = parseScope(single(params, 'scope'));
        if (requestedScope === undefined) throw new OAuthError('invalid_scope', 'scope is malformed');
        const scope = unwrap(decideRequestedScope(requestedScope, askableScopes(client)));

        const now = deps.now();
        const deviceCode = newSecret();
        await useCredentialsOnce(store, { assertion: assertionReplay, proof: undefined }, now);
        const userCode = await storeNewAuthorization({
          deviceCodeDigest: deviceCode.digest,
          clientId: client.clientId,
          scope,
          status: 'pending',
          intervalSeconds: POLL_INTERVAL_SECONDS,
          createdAt: now,
          expiresAt: now + DEVICE_CODE_LIFETIME_MS,
        });
        const shown = formatUserCode(userCode);
        // The authorization is kept on the server for 10 minutes: it counts against the address (DESIGN.md §4, as /par).
        return {
          kept: true,
          body: {
            device_code: deviceCode.value,
            user_code: shown,
            verification_uri: `${deps.issuer}/device`,
            verification_uri_complete: `${deps.issuer}/device?user_code=${shown}`,
            expires_in: Math.floor(DEVICE_CODE_LIFETIME_MS / 1000),
            interval: POLL_INTERVAL_SECONDS,
          },
        };
      }),
    );
  };
}

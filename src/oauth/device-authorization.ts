/** POST /device_authorization (RFC 8628 §3.1-3.2): a device code for the device, a user code for the person. */
import { randomInt } from 'node:crypto';
import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../context.js';
import { OAuthError, StoreUnavailableError } from '../errors.js';
import { all, single } from '../http/params.js';
import { decideResourceParameter } from '../policy/resource.js';
import { decideRequestedScope, parseScope } from '../policy/scope.js';
import type { DeviceAuthorizationRecord } from '../store/types.js';
import { newSecret } from '../tokens/mint.js';
import { authenticateClient } from './client-auth.js';
import { unwrap } from './grants/grant.js';
import { handleFormEndpoint } from './form-endpoint.js';

/** RFC 8628 §3.2 expires_in: long enough to find a phone and sign in. */
export const DEVICE_CODE_LIFETIME_MS = 600_000;
/** RFC 8628 §3.2 interval: the default of 5 s. */
export const POLL_INTERVAL_SECONDS = 5;
/** RFC 8628 §6.1: consonants only, so no words, and no 0/O or 1/I to confuse; 20^8 ≈ 2^34.6 codes. */
export const USER_CODE_ALPHABET = 'BCDFGHJKLMNPQRSTVWXZ';
export const USER_CODE_LENGTH = 8;

const USER_CODE = new RegExp(`^[${USER_CODE_ALPHABET}]{${USER_CODE_LENGTH}}$`);
/** Draws before giving up when user codes collide with live ones (practically never more than one). */
const USER_CODE_DRAWS = 5;

/** A fresh user code in its stored form: 8 characters of the alphabet, no dash. */
export function newUserCode(): string {
  let code = '';
  for (let i = 0; i < USER_CODE_LENGTH; i++) code += USER_CODE_ALPHABET[randomInt(USER_CODE_ALPHABET.length)];
  return code;
}

/** The stored form of what a person typed (case, dashes and spaces ignored), or undefined when it cannot be a code. */
export function normaliseUserCode(typed: string): string | undefined {
  if (typed.length > 64) return undefined;
  const code = typed.replace(/[\s-]/g, '').toUpperCase();
  return USER_CODE.test(code) ? code : undefined;
}

/** XXXX-XXXX, as shown to people (RFC 8628 §6.1: easier to read and type). */
export function formatUserCode(code: string): string {
  return `${code.slice(0, 4)}-${code.slice(4)}`;
}

export function deviceAuthorizationRoutes(ctx: AppContext): FastifyPluginAsync {
  async function storeNewAuthorization(record: Omit<DeviceAuthorizationRecord, 'userCode'>): Promise<string> {
    for (let draw = 1; ; draw++) {
      const userCode = newUserCode();
      try {
        await ctx.store.createDeviceAuthorization({ ...record, userCode });
        return userCode;
      } catch (error) {
        if (error instanceof StoreUnavailableError || draw >= USER_CODE_DRAWS) throw error;
      }
    }
  }

  return async (app) => {
    app.post('/device_authorization', { config: { cors: 'clients' } }, async (request, reply) =>
      handleFormEndpoint(ctx, request, reply, async (params, presented) => {
        const client = authenticateClient(presented, ctx.config.clients);
        if (client.kind !== 'device') throw new OAuthError('unauthorized_client', 'this client may not use the device authorization flow');
        // DESIGN.md §5: device tokens are for the whole audience, so any `resource` is refused, never ignored.
        unwrap(decideResourceParameter('device_code', all(params, 'resource')));
        const requestedScope = parseScope(single(params, 'scope'));
        if (requestedScope === undefined) throw new OAuthError('invalid_scope', 'scope is malformed');
        const scope = unwrap(decideRequestedScope(requestedScope, client.scopes));

        const now = ctx.now();
        const deviceCode = newSecret();
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
        return {
          body: {
            device_code: deviceCode.value,
            user_code: shown,
            verification_uri: `${ctx.issuer}/device`,
            verification_uri_complete: `${ctx.issuer}/device?user_code=${shown}`,
            expires_in: Math.floor(DEVICE_CODE_LIFETIME_MS / 1000),
            interval: POLL_INTERVAL_SECONDS,
          },
        };
      }),
    );
  };
}

/** grant_type=client_credentials (RFC 6749 §4.4); the checks are policy/token-requests.ts. */
import { all, single } from '../../http/params.js';
import type { Audience } from '../../policy/resource.js';
import { parseScope } from '../../policy/scope.js';
import { decideClientCredentials } from '../../policy/token-requests.js';
import { issueTokens, type TokenSigner } from '../../tokens/response.js';
import type { GrantHandler } from './grant.js';

interface ValidClientCredentials {
  readonly scope: readonly string[];
  readonly audience: Audience;
}

/** What client_credentials uses, wired by tokenRoutes. */
export interface ClientCredentialsGrantDeps {
  readonly issuer: string;
  readonly signer: TokenSigner;
}

export function clientCredentialsGrant(deps: ClientCredentialsGrantDeps): GrantHandler<ValidClientCredentials> {
  return {
    grantType: 'client_credentials',

    async validate({ client, params }) {
      return decideClientCredentials({ client, issuer: deps.issuer, requestedScope: parseScope(single(params, 'scope')), requested: all(params, 'resource') });
    },

    async respond({ client, now, proofKey }, { scope, audience }) {
      // RFC 9068 §2.2: with no person, the subject is the client itself.
      return issueTokens(deps.signer, { client, subject: client.clientId, audience, scope, confirmation: proofKey }, now);
    },
  };
}

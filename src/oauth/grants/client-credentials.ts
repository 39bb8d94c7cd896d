/** grant_type=client_credentials (RFC 6749 §4.4): confidential clients, tokens for the whole audience. */
import { OAuthError } from '../../errors.js';
import { all, single } from '../../http/params.js';
import { decideTokenAudience, type Audience } from '../../policy/resource.js';
import { decideRequestedScope, parseScope } from '../../policy/scope.js';
import { issueTokens } from '../token-response.js';
import { unwrap, type GrantHandler } from './grant.js';

interface ValidClientCredentials {
  readonly scope: readonly string[];
  readonly audience: Audience;
}

export const clientCredentialsGrant: GrantHandler<ValidClientCredentials> = {
  grantType: 'client_credentials',

  async validate(ctx, { client, params }) {
    if (client.kind !== 'confidential') {
      throw new OAuthError('unauthorized_client', 'client_credentials is for confidential clients');
    }
    const requestedScope = parseScope(single(params, 'scope'));
    if (requestedScope === undefined) throw new OAuthError('invalid_scope', 'scope is malformed');
    const audience = unwrap(
      decideTokenAudience({
        grantType: 'client_credentials',
        client,
        issuer: ctx.issuer,
        grantScope: requestedScope,
        tokenScope: requestedScope,
        grantResources: [],
        requested: all(params, 'resource'),
      }),
    );
    const scope = unwrap(decideRequestedScope(requestedScope, client.scopes));
    return { scope, audience };
  },

  async respond(ctx, { client, now }, { scope, audience }) {
    // RFC 9068 §2.2: with no person, the subject is the client itself.
    return issueTokens(ctx, { client, subject: client.clientId, audience, scope }, now);
  },
};

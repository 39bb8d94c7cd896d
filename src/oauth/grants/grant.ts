/**
 * A grant handler in two halves (after ory/fosite): validate() reads the state the request names and lets the
 * policy decide, touching nothing; respond() is the one place state changes. A refused request therefore writes
 * nothing, except the one deliberate case of DESIGN.md §1, done here in one place: a replayed code or refresh
 * token of the authenticated client revokes its grant.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { ClientRecord } from '../../config/types.js';
import type { Params } from '../../http/params.js';
import type { Decision } from '../../policy/decision.js';
import type { GrantStore } from '../../store/types.js';
import type { Metrics } from '../../http/metrics.js';
import type { Issued, TokenResponse, TokenSigner } from '../../tokens/response.js';

export interface TokenRequest {
  readonly client: ClientRecord;
  readonly params: Params;
  readonly now: number;
  readonly log: FastifyBaseLogger;
  /** Records the request's audit fields: its access line carries them (DESIGN.md §10). */
  readonly audit: (fields: Record<string, unknown>) => void;
  /** RFC 9449: the thumbprint of the key of the request's valid DPoP proof; the tokens issued are bound to it. */
  readonly proofKey?: string;
  /**
   * The last check before the request changes state, a replay's revocation included: its one-time credentials (a
   * client assertion's and a DPoP proof's jti) are used up, or it is refused; nothing is written before.
   */
  readonly beforeChanges?: () => Promise<void>;
}

export interface GrantHandler<Validated> {
  readonly grantType: string;
  validate(request: TokenRequest): Promise<Decision<Validated>>;
  respond(request: TokenRequest, validated: Validated): Promise<Issued>;
}

/** Runs a handler's two halves; a refusal that names a grant to revoke revokes it before the error is answered. */
export async function runGrant<V>(handler: GrantHandler<V>, grants: GrantStore, metrics: Pick<Metrics, 'tokensIssued' | 'refreshReuse'>, request: TokenRequest): Promise<TokenResponse> {
  const decision = await handler.validate(request);
  if (!decision.ok) {
    if (decision.revokeGrant !== undefined) {
      await request.beforeChanges?.();
      await revokeReplayed(grants, metrics, request, decision.revokeGrant, handler.grantType);
    }
    throw decision.error;
  }
  await request.beforeChanges?.();
  const issued = await handler.respond(request, decision.value);
  metrics.tokensIssued.inc({ grant_type: handler.grantType });
  request.audit({ event: 'token_issued', client_id: request.client.clientId, grant_type: handler.grantType, aud: issued.audience, scope: issued.response.scope, grant_id: issued.grantId, ...issued.audit });
  return issued.response;
}

/** RFC 6749 §4.1.2, RFC 9700 §4.14.2: a replayed code or refresh token means it leaked or the client raced itself. */
export async function revokeReplayed(grants: GrantStore, metrics: Pick<Metrics, 'refreshReuse'>, request: TokenRequest, grantId: string, grantType: string): Promise<void> {
  await grants.revokeGrant(grantId);
  metrics.refreshReuse.inc();
  request.log.warn({ audit: true, event: 'reuse_detected', client_id: request.client.clientId, grant_id: grantId, grant_type: grantType }, 'replayed grant credential: grant revoked');
}

export function unwrap<T>(decision: { ok: true; value: T } | { ok: false; error: Error }): T {
  if (!decision.ok) throw decision.error;
  return decision.value;
}

/** What a grant issuing tokens for a person's grant uses besides its store (code exchange, refresh), wired by tokenRoutes. */
export interface PersonGrantDeps {
  readonly issuer: string;
  /** Whether a grant's subject is still a user, or comes from a configured upstream (DESIGN.md §6). */
  readonly isKnownSubject: (subject: string) => boolean;
  readonly signer: TokenSigner;
  /** A replayed code or rotated refresh token revokes its grant and is counted (DESIGN.md §6). */
  readonly metrics: Pick<Metrics, 'refreshReuse'>;
}


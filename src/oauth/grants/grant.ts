/**
 * A grant handler in two halves (after ory/fosite): validate() reads and decides, touching nothing;
 * respond() is the one place state changes. A refused request therefore writes nothing.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { ClientRecord } from '../../config/types.js';
import type { AppContext } from '../../context.js';
import type { Params } from '../../http/params.js';
import type { TokenResponse } from '../token-response.js';

export interface TokenRequest {
  readonly client: ClientRecord;
  readonly params: Params;
  readonly now: number;
  readonly log: FastifyBaseLogger;
}

export interface GrantHandler<Validated> {
  readonly grantType: string;
  validate(ctx: AppContext, request: TokenRequest): Promise<Validated>;
  respond(ctx: AppContext, request: TokenRequest, validated: Validated): Promise<TokenResponse>;
}

/** Erases the validated type so handlers can sit in one table. */
export async function runGrant<V>(handler: GrantHandler<V>, ctx: AppContext, request: TokenRequest): Promise<TokenResponse> {
  const validated = await handler.validate(ctx, request);
  return handler.respond(ctx, request, validated);
}

export function unwrap<T>(decision: { ok: true; value: T } | { ok: false; error: Error }): T {
  if (!decision.ok) throw decision.error;
  return decision.value;
}

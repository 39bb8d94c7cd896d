/** Rate limits on failed requests per address and per client (DESIGN.md §4: 429 with Retry-After). */
import type { FastifyRequest } from 'fastify';
import type { AppContext } from '../context.js';
import { OAuthError } from '../errors.js';

/** 429 when the address or the client has failed too often in the current window. */
export function tooManyFailures(ctx: AppContext, request: FastifyRequest, clientId: string | undefined): OAuthError | undefined {
  const now = ctx.now();
  for (const key of [`ip:${request.ip}`, clientId === undefined ? undefined : `client:${clientId}`]) {
    if (key === undefined) continue;
    const verdict = ctx.failures.check(key, now);
    if (verdict.limited) {
      return new OAuthError('invalid_request', 'too many failed requests; slow down', 429, {
        'Retry-After': String(verdict.retryAfterSeconds),
      });
    }
  }
  return undefined;
}

export function countFailure(ctx: AppContext, request: FastifyRequest, clientId: string | undefined, status: number): void {
  if (status < 400 || status >= 500 || status === 429) return;
  const now = ctx.now();
  ctx.failures.hit(`ip:${request.ip}`, now);
  if (clientId !== undefined) ctx.failures.hit(`client:${clientId}`, now);
}


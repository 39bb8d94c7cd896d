/**
 * The DPoP proof of a request (RFC 9449 §4, DESIGN.md §13), for /token, /par and /userinfo: read from the one DPoP
 * header and checked against the request as the issuer sees it (base_url + path); its jti is used once through
 * one-time-credentials.ts. A refusal is `invalid_dpop_proof`; no proof, header or key material ever reaches a log
 * line (log.ts redacts the header).
 */
import type { FastifyRequest } from 'fastify';
import { verifyDpopProof, type DpopProof } from '../crypto/dpop.js';
import { pathOf } from '../http/params.js';
import { OAuthError } from '../policy/oauth-error.js';

/** What checking a proof uses: the issuer (the URL a proof names is its origin and the path) and the clock. */
export interface DpopRequestDeps {
  readonly issuer: string;
  readonly now: () => number;
}

export const invalidProof = (description: string, status = 400): OAuthError => new OAuthError('invalid_dpop_proof', description, status);

/** The one DPoP header's value (RFC 9449 §4.3 check 1): Node joins repeated headers with ", ", which no JWT holds. */
function dpopHeaderOf(request: FastifyRequest): { readonly value?: string } | { readonly error: string } {
  const value = request.headers.dpop;
  if (value === undefined) return {};
  if (typeof value !== 'string' || value.includes(',')) return { error: 'more than one DPoP header was sent; send exactly one proof' };
  return { value };
}

/**
 * The verified proof the request carries, undefined when it carries none; throws invalid_dpop_proof for a refused
 * one. `accessToken` is the token the proof must name (ath) at a protected resource. The jti is not recorded here.
 */
export async function proofOf(deps: DpopRequestDeps, request: FastifyRequest, accessToken?: string, status = 400): Promise<DpopProof | undefined> {
  const header = dpopHeaderOf(request);
  if ('error' in header) throw invalidProof(header.error, status);
  if (header.value === undefined) return undefined;
  // The request's URL as the issuer sees it: the issuer's scheme, host and port, and the request's path.
  const url = `${new URL(deps.issuer).origin}${pathOf(request.url)}`;
  const check = await verifyDpopProof(header.value, { method: request.method, url, now: deps.now(), ...(accessToken !== undefined && { accessToken }) });
  if (!check.ok) throw invalidProof(check.reason, status);
  return check.proof;
}

/**
 * A request's one-time credentials, a client assertion's jti (RFC 7523 §3) and a DPoP proof's (RFC 9449 §11.1),
 * recorded as used in one store call, all or none: a request refused for one of them writes nothing and leaves the
 * other usable (DESIGN.md §1, §13).
 */
import type { UsedOnce } from '../crypto/used-once.js';
import { invalidClient } from '../policy/oauth-error.js';
import type { ReplayStore, UsedOnceEntry } from '../store/types.js';
import { invalidProof } from './dpop-request.js';

/** What a request presented once; each undefined when it carries none (a secret or a public client; no DPoP proof). */
export interface OneTimeCredentials {
  readonly assertion: UsedOnce | undefined;
  readonly proof: UsedOnce | undefined;
}

/** What a spent client assertion gets, wherever it is found spent. */
const spentAssertion = () => invalidClient('the client assertion was already used (its jti was seen before)');

/**
 * A client assertion used before is refused as soon as the client is authenticated (RFC 7523 §3: a jti accepted once),
 * not only before the state change: a replayed assertion must not learn whether a code or refresh token is good from
 * the grant's own refusal. Reads only; useCredentialsOnce still records it, all or none, once the request passed.
 */
export async function refuseSpentAssertion(replays: ReplayStore, assertion: UsedOnce, now: number): Promise<void> {
  if (await replays.isUsedOnce('client_assertion', assertion.id, now)) throw spentAssertion();
}

/**
 * Records the request's one-time credentials as used, or throws when one was used before: invalid_client for the
 * assertion (checked first, as the client is), invalid_dpop_proof with `proofStatus` for the proof (401 at /userinfo).
 * The last check of a request, once every other passed and before it changes state (a replay's grant revocation
 * included), so a refused request writes nothing and a replayed credential revokes nothing.
 */
export async function useCredentialsOnce(replays: ReplayStore, credentials: OneTimeCredentials, now: number, proofStatus = 400): Promise<void> {
  const { assertion, proof } = credentials;
  const entries: UsedOnceEntry[] = [];
  if (assertion !== undefined) entries.push({ kind: 'client_assertion', id: assertion.id, expiresAt: assertion.expiresAt });
  if (proof !== undefined) entries.push({ kind: 'dpop', id: proof.id, expiresAt: proof.expiresAt });
  if (entries.length === 0) return;
  const marked = await replays.markAllUsedOnce(entries, now);
  if (marked.ok) return;
  if (marked.used === 'client_assertion') throw spentAssertion();
  throw invalidProof('the DPoP proof was already used (its jti was seen before); make a new proof for each request', proofStatus);
}

/** The end of a successful /authorize: a grant with its single-use code, and the redirect that carries it. */
import { randomUUID } from 'node:crypto';
import { newSecret } from '../crypto/random.js';
import type { AuthorizationCodeStore, Grant, PendingAuthorization, SessionRecord } from '../store/types.js';
import { redirectWith } from '../http/redirects.js';

/** DESIGN.md §6: codes are single-use and live 60 s. */
export const CODE_LIFETIME_MS = 60_000;

export async function completeAuthorization(
  codes: AuthorizationCodeStore,
  issuer: string,
  request: PendingAuthorization,
  session: SessionRecord,
  now: number,
): Promise<string> {
  const grant: Grant = {
    id: randomUUID(),
    clientId: request.clientId,
    subject: session.subject,
    scope: request.scope,
    resources: request.resources,
    claims: session.claims,
    authTime: session.authTime,
    createdAt: now,
    expiresAt: now + CODE_LIFETIME_MS,
  };
  const code = newSecret();
  await codes.createGrantWithCode(grant, {
    digest: code.digest,
    grantId: grant.id,
    clientId: request.clientId,
    redirectUri: request.redirectUri,
    codeChallenge: request.codeChallenge,
    nonce: request.nonce,
    expiresAt: now + CODE_LIFETIME_MS,
    ...(request.dpopJkt !== undefined && { boundKey: request.dpopJkt }),
  });
  return redirectWith(request.redirectUri, { code: code.value, state: request.state, iss: issuer });
}

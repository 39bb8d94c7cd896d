/** `pinpoint grants list | revoke` (DESIGN.md §2): what a person or client holds, and taking it back. */
import type { GrantAdminStore, GrantFilter, GrantStore, RegisteredClientStore, SessionStore } from '../store/types.js';
import type { Output } from './keys.js';

/** "1 grant", "0 grants": the counts these commands print. */
const counted = (count: number, noun: string): string => `${count} ${noun}${count === 1 ? '' : 's'}`;

const iso = (ms: number | undefined): string | undefined => (ms === undefined ? undefined : new Date(ms).toISOString());

export async function listGrants(store: GrantAdminStore, filter: GrantFilter, out: Output, json: boolean, now = Date.now()): Promise<number> {
  const rows = (await store.listGrants(filter, now)).map(({ grant, lastRefreshAt }) => ({
    id: grant.id,
    user: grant.subject,
    client: grant.clientId,
    scope: grant.scope.join(' '),
    resources: grant.resources,
    created: iso(grant.createdAt),
    last_refresh: iso(lastRefreshAt),
  }));
  if (json) {
    out.write(`${JSON.stringify(rows, null, 2)}\n`);
    return 0;
  }
  for (const row of rows) {
    const resources = row.resources.length === 0 ? '(whole audience)' : row.resources.join(' ');
    out.write(`${row.id}  user ${row.user}  client ${row.client}  scope "${row.scope}"  resources ${resources}  created ${row.created}  last refresh ${row.last_refresh ?? 'never'}\n`);
  }
  out.write(`${counted(rows.length, 'grant')}\n`);
  return 0;
}

export type RevokeTarget = { readonly grantId: string } | GrantFilter;

/** Writes one audit line (DESIGN.md §10: revocation), as the server's log would. */
export type AuditLine = (fields: Record<string, unknown>, message: string) => void;

/**
 * Revokes one grant, or every grant of a user (ending their sessions too) or of a client (removing its registration
 * too, when it registered itself: DESIGN.md §9); prints the counts, and an audit line when it took anything back.
 */
export async function revokeGrants(
  store: GrantStore & GrantAdminStore & SessionStore & RegisteredClientStore,
  target: RevokeTarget,
  out: Output,
  err: Output,
  audit: AuditLine,
  now = Date.now(),
): Promise<number> {
  const revocation = { audit: true, event: 'revocation', by: 'cli' };
  if ('grantId' in target) {
    const found = await store.findGrant(target.grantId, now);
    if (found !== undefined) await store.revokeGrant(target.grantId);
    out.write(`${counted(found === undefined ? 0 : 1, 'grant')} revoked\n`);
    // As `keys retire` says of a kid: exit 1 and why, so a script that mistyped an id does not take it for done.
    if (found === undefined) err.write(`pinpoint: there is no live grant ${target.grantId}\n`);
    else audit({ ...revocation, grant_id: target.grantId, user: found.subject, client_id: found.clientId }, 'grant revoked');
    return found === undefined ? 1 : 0;
  }
  const grants = await store.revokeGrants(target);
  out.write(`${counted(grants, 'grant')} revoked\n`);
  const sessions = target.subject === undefined ? 0 : await store.deleteSessionsOf(target.subject);
  if (target.subject !== undefined) out.write(`${counted(sessions, 'session')} ended\n`);
  const registration = target.clientId !== undefined && (await store.deleteRegisteredClient(target.clientId));
  if (registration) out.write('1 registered client removed\n');
  if (grants > 0 || sessions > 0 || registration) {
    audit({ ...revocation, user: target.subject, client_id: target.clientId, grants, sessions, registration_removed: registration }, 'grants revoked');
  }
  return 0;
}

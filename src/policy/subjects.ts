/** Who a grant or session names, and whether the configuration still knows them (DESIGN.md §6). */

/** Federated subjects are `<upstream name>:<subject at the upstream>`; local user names never hold a colon. */
export function upstreamOf(subject: string): string | undefined {
  const colon = subject.indexOf(':');
  return colon === -1 ? undefined : subject.slice(0, colon);
}

/** True while `subject` is a configured local user, or comes from a configured upstream. */
export function isKnownSubject(subject: string, users: { has(name: string): boolean }, upstreams: { has(name: string): boolean }): boolean {
  const upstream = upstreamOf(subject);
  return upstream === undefined ? users.has(subject) : upstreams.has(upstream);
}

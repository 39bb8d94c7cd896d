/** Why an audience entry cannot be named as `resource`, or undefined when it can (DESIGN.md §5). */
export type UnrequestableReason = 'logical name' | 'contains a fragment';

// RFC 3986 §3.1: an absolute URI starts with a scheme.
const HAS_SCHEME = /^[A-Za-z][A-Za-z0-9+.-]*:/;

/** True when the text starts with a URI scheme (RFC 3986 §4.3), e.g. `https:` or `urn:`. */
export function isAbsoluteUri(text: string): boolean {
  return HAS_SCHEME.test(text);
}

/** RFC 8707 §2: a resource is an absolute URI without a fragment; anything else stays audience-only. */
export function requestableReason(entry: string): UnrequestableReason | undefined {
  if (!isAbsoluteUri(entry)) return 'logical name';
  if (entry.includes('#')) return 'contains a fragment';
  return undefined;
}

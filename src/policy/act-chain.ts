/**
 * The `act` claim of token exchange (RFC 8693 §4.1): who acts for the subject, the current actor outermost, each
 * earlier actor nested in the one after it. Pure: values in, values out.
 */

/** One actor and the actors before it. */
export interface ActClaim {
  readonly sub: string;
  readonly act?: ActClaim;
}

/** DESIGN.md §12: a token carries at most this many nested `act`, so a chain of exchanges ends after three hops. */
export const MAX_ACT_DEPTH = 3;

/**
 * How many actors `act` holds (0 when absent), or undefined when it is not a chain this server writes: an object
 * with a string `sub` and nothing but an optional nested `act`, at most MAX_ACT_DEPTH deep.
 */
export function actDepth(act: unknown): number | undefined {
  let depth = 0;
  for (let link = act; link !== undefined; depth += 1) {
    if (depth === MAX_ACT_DEPTH || typeof link !== 'object' || link === null || Array.isArray(link)) return undefined;
    const { sub, act: earlier, ...rest } = link as Record<string, unknown>;
    if (typeof sub !== 'string' || Object.keys(rest).length > 0) return undefined;
    link = earlier;
  }
  return depth;
}

/** RFC 8693 §4.1: the caller becomes the current actor; the subject token's own `act` nests inside it. */
export function nestAct(actor: string, earlier: ActClaim | undefined): ActClaim {
  return earlier === undefined ? { sub: actor } : { sub: actor, act: earlier };
}

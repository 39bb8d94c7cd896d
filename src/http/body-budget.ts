/**
 * Bytes of request bodies a worker holds while they arrive, bounded per client address group and in all. A cost audit
 * had one address open 1,000 connections that each sent 60 KB of a 64 KiB form body and then nothing: 70 MiB held
 * for the 30 s a body may take, and five addresses would pass the 512 MiB a process is sized for. A request is
 * weighed when its headers are in, by the body it announces (Content-Length, or the 64 KiB limit when chunked), and
 * let go when its answer ends.
 */

/** What one address group may hold at once: 16 bodies of the largest size, or hundreds of ordinary ones (a few KiB). */
export const BODY_BYTES_PER_ADDRESS = 1024 * 1024;
/** What the worker holds at most: 1,024 of the largest bodies, well inside a process's 512 MiB. */
export const BODY_BYTES_IN_ALL = 64 * 1024 * 1024;

export class BodyBudget {
  readonly #held = new Map<string, number>();
  #total = 0;

  constructor(
    private readonly perAddress = BODY_BYTES_PER_ADDRESS,
    private readonly inAll = BODY_BYTES_IN_ALL,
  ) {}

  /** Takes `bytes` for `group`; else takes nothing and says which bound would be passed. */
  take(group: string, bytes: number): 'address' | 'all' | undefined {
    const held = this.#held.get(group) ?? 0;
    if (held + bytes > this.perAddress) return 'address';
    if (this.#total + bytes > this.inAll) return 'all';
    this.#held.set(group, held + bytes);
    this.#total += bytes;
    return undefined;
  }

  /** Gives back what `take` took; a group holding nothing is forgotten, so the map is as large as what is held. */
  give(group: string, bytes: number): void {
    const left = (this.#held.get(group) ?? 0) - bytes;
    if (left <= 0) this.#held.delete(group);
    else this.#held.set(group, left);
    this.#total -= bytes;
  }

  /** Bytes held now, in all and for `group`. */
  held(group?: string): number {
    return group === undefined ? this.#total : (this.#held.get(group) ?? 0);
  }
}

/** The bytes a request's body may occupy by its headers: none without a body, the limit when its length is unknown. */
export function announcedBodyBytes(headers: { readonly 'content-length'?: string; readonly 'transfer-encoding'?: string }, limit: number): number {
  const length = headers['content-length'];
  if (length !== undefined) {
    const bytes = Number(length);
    return Number.isSafeInteger(bytes) && bytes >= 0 ? Math.min(bytes, limit) : limit;
  }
  return headers['transfer-encoding'] === undefined ? 0 : limit;
}

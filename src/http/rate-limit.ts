/** Fixed-window counters kept in process memory, for request-rate limits that need no coordination. */
import { hash } from 'node:crypto';

export interface RateLimitVerdict {
  readonly limited: boolean;
  /** Seconds until the window ends (for Retry-After). */
  readonly retryAfterSeconds: number;
}

/** A counted event that may be given back: `release` undoes the count, once, while its window lasts. */
export type Reservation = ({ readonly limited: true } & RateLimitVerdict) | { readonly limited: false; readonly release: () => void };

/** Keys are built from attacker-chosen text (client ids, addresses): longer ones are kept as their digest. */
const MAX_KEY_LENGTH = 128;
/** Entries kept at most; beyond it, expired ones go first, then the oldest, so memory stays bounded under any key spray. */
export const MAX_ENTRIES = 100_000;

export class FixedWindowLimiter {
  private readonly windows = new Map<string, { count: number; endsAt: number }>();

  constructor(
    private readonly windowMs: number,
    private readonly maxEntries = MAX_ENTRIES,
  ) {}


  /** Whether `key` has reached `limit` in its current window, without counting. */
  check(key: string, limit: number, now: number): RateLimitVerdict {
    const window = this.windows.get(boundedKey(key));
    if (window === undefined || window.endsAt <= now) return { limited: false, retryAfterSeconds: 0 };
    return { limited: window.count >= limit, retryAfterSeconds: Math.max(1, Math.ceil((window.endsAt - now) / 1000)) };
  }

  /** Counts one event for `key`. */
  hit(key: string, now: number): void {
    this.windowOf(boundedKey(key), now).count += 1;
  }

  /**
   * Counts one event for `key` unless it has reached `limit`, in one synchronous step, so parallel requests cannot all
   * pass a check made before any of them was counted (DESIGN.md §7). The count holds unless it is released.
   */
  reserve(key: string, limit: number, now: number): Reservation {
    const verdict = this.check(key, limit, now);
    if (verdict.limited) return { limited: true, retryAfterSeconds: verdict.retryAfterSeconds };
    const bounded = boundedKey(key);
    const window = this.windowOf(bounded, now);
    window.count += 1;
    let released = false;
    const release = (): void => {
      // A window that ended (or was evicted) since is not this reservation's to change.
      if (released || this.windows.get(bounded) !== window) return;
      released = true;
      window.count = Math.max(0, window.count - 1);
    };
    return { limited: false, release };
  }

  /** The live window of a bounded key, started now when there is none. */
  private windowOf(bounded: string, now: number): { count: number; endsAt: number } {
    let window = this.windows.get(bounded);
    if (window === undefined || window.endsAt <= now) {
      if (window !== undefined) this.windows.delete(bounded);
      else if (this.windows.size >= this.maxEntries) this.makeRoom(now);
      window = { count: 0, endsAt: now + this.windowMs };
      // Insertion order is window-start order, which makeRoom relies on.
      this.windows.set(bounded, window);
    }
    return window;
  }

  private makeRoom(now: number): void {
    for (const [key, window] of this.windows) if (window.endsAt <= now) this.windows.delete(key);
    // Still full: the oldest windows go (they end first).
    for (const key of this.windows.keys()) {
      if (this.windows.size < this.maxEntries * 0.9) break;
      this.windows.delete(key);
    }
  }
}

function boundedKey(key: string): string {
  return key.length <= MAX_KEY_LENGTH ? key : `sha256:${hash('sha256', key, 'hex')}`;
}

/** Fixed-window counters kept in process memory, for request-rate limits that need no coordination. */
import { hash } from 'node:crypto';

export interface RateLimitVerdict {
  readonly limited: boolean;
  /** Seconds until the window ends (for Retry-After). */
  readonly retryAfterSeconds: number;
}

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

  /** How many keys are held now (for tests of the memory bound). */
  get size(): number {
    return this.windows.size;
  }

  /** Whether `key` has reached `limit` in its current window, without counting. */
  check(key: string, limit: number, now: number): RateLimitVerdict {
    const window = this.windows.get(boundedKey(key));
    if (window === undefined || window.endsAt <= now) return { limited: false, retryAfterSeconds: 0 };
    return { limited: window.count >= limit, retryAfterSeconds: Math.max(1, Math.ceil((window.endsAt - now) / 1000)) };
  }

  /** Counts one event for `key`. */
  hit(key: string, now: number): void {
    const bounded = boundedKey(key);
    let window = this.windows.get(bounded);
    if (window === undefined || window.endsAt <= now) {
      if (window !== undefined) this.windows.delete(bounded);
      else if (this.windows.size >= this.maxEntries) this.makeRoom(now);
      window = { count: 0, endsAt: now + this.windowMs };
      // Insertion order is window-start order, which makeRoom relies on.
      this.windows.set(bounded, window);
    }
    window.count += 1;
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

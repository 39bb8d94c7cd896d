/** Fixed-window counters kept in process memory, for request-rate limits that need no coordination. */

export interface RateLimitVerdict {
  readonly limited: boolean;
  /** Seconds until the window ends (for Retry-After). */
  readonly retryAfterSeconds: number;
}

export class FixedWindowLimiter {
  private readonly windows = new Map<string, { count: number; endsAt: number }>();

  constructor(
    private readonly limit: number,
    private readonly windowMs: number,
  ) {}

  /** Whether `key` is already over the limit, without counting. */
  check(key: string, now: number): RateLimitVerdict {
    const window = this.windows.get(key);
    if (window === undefined || window.endsAt <= now) return { limited: false, retryAfterSeconds: 0 };
    return { limited: window.count >= this.limit, retryAfterSeconds: Math.max(1, Math.ceil((window.endsAt - now) / 1000)) };
  }

  /** Counts one event for `key`. */
  hit(key: string, now: number): void {
    let window = this.windows.get(key);
    if (window === undefined || window.endsAt <= now) {
      if (this.windows.size > 100_000) this.prune(now);
      window = { count: 0, endsAt: now + this.windowMs };
      this.windows.set(key, window);
    }
    window.count += 1;
  }

  private prune(now: number): void {
    for (const [key, window] of this.windows) if (window.endsAt <= now) this.windows.delete(key);
  }
}

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

/** A live window as one worker hands it to another (DESIGN.md §11): its bounded key, its count, when it ends (epoch ms). */
export type HandedWindow = readonly [key: string, count: number, endsAt: number];

/** Windows handed over at most, highest counts first: whatever keys an attacker sprays, a handover stays under about 3 MB. */
export const MAX_HANDED_WINDOWS = 20_000;

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

  /** How many events `key` has counted in its current window. */
  counted(key: string, now: number): number {
    const window = this.windows.get(boundedKey(key));
    return window === undefined || window.endsAt <= now ? 0 : window.count;
  }

  /** Counts one event for `key`. */
  hit(key: string, now: number): void {
    this.windowOf(boundedKey(key), now).count += 1;
  }

  /** The live windows, for a worker that starts later (DESIGN.md §11); beyond `max`, those with the highest counts. */
  snapshot(now: number, max = MAX_HANDED_WINDOWS): HandedWindow[] {
    const live: HandedWindow[] = [];
    for (const [key, window] of this.windows) if (window.endsAt > now) live.push([key, window.count, window.endsAt]);
    // The keys nearest their limits matter most: a spray of single failures is what gets left out.
    if (live.length > max) live.sort((a, b) => b[1] - a[1] || b[2] - a[2]).length = max;
    return live;
  }

  /**
   * Checks the windows another worker's snapshot() handed over, changing nothing; returns what takes them in, or
   * undefined when `handed` is not what snapshot() gives. So several limiters' parts can all be checked before any is taken.
   */
  acceptHandover(handed: unknown, now: number): (() => number) | undefined {
    const windows = handedWindows(handed, now + this.windowMs);
    return windows === undefined ? undefined : () => this.merge(windows, now);
  }

  /**
   * Per key the larger count with its end, so a call replayed here meanwhile is never counted twice; ended windows are
   * dropped and the entry bound holds. Returns how many windows changed.
   */
  private merge(windows: readonly HandedWindow[], now: number): number {
    let taken = 0;
    for (const [key, count, endsAt] of windows) {
      if (endsAt <= now) continue;
      const window = this.windows.get(key);
      const live = window !== undefined && window.endsAt > now;
      if (live && window.count >= count) continue;
      if (live) Object.assign(window, { count, endsAt });
      else this.windows.set(key, { count, endsAt });
      taken += 1;
    }
    this.keepInStartOrder(now);
    return taken;
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
    makeRoom(this.windows, this.maxEntries, (window) => window.endsAt <= now);
  }

  /** Drops ended windows and re-inserts the rest by end (start order, which makeRoom relies on), the newest maxEntries. */
  private keepInStartOrder(now: number): void {
    const live = [...this.windows].filter(([, window]) => window.endsAt > now).sort(([, a], [, b]) => a.endsAt - b.endsAt);
    this.windows.clear();
    for (const [key, window] of live.slice(-this.maxEntries)) this.windows.set(key, window);
  }
}

/** `value` as windows when it is what snapshot() gives (each end clipped to `latestEnd`), else undefined. */
function handedWindows(value: unknown, latestEnd: number): HandedWindow[] | undefined {
  if (!Array.isArray(value) || value.length > MAX_HANDED_WINDOWS) return undefined;
  const windows: HandedWindow[] = [];
  for (const entry of value as unknown[]) {
    if (!Array.isArray(entry) || entry.length !== 3) return undefined;
    const [key, count, endsAt] = entry as unknown[];
    if (typeof key !== 'string' || key.length === 0 || key.length > MAX_KEY_LENGTH) return undefined;
    if (typeof count !== 'number' || !Number.isSafeInteger(count) || count < 1 || typeof endsAt !== 'number' || !Number.isFinite(endsAt)) return undefined;
    // No window lasts longer here than this limiter's own.
    windows.push([key, count, Math.min(endsAt, latestEnd)]);
  }
  return windows;
}

/**
 * Frees room in a full map whose insertion order is age order: ended entries go, then, while it is still above 90 % of
 * `max`, the oldest.
 */
export function makeRoom<V>(entries: Map<string, V>, max: number, ended: (value: V, key: string) => boolean): void {
  for (const [key, value] of entries) if (ended(value, key)) entries.delete(key);
  for (const key of entries.keys()) {
    if (entries.size < max * 0.9) break;
    entries.delete(key);
  }
}

/** `key` as limiters keep it: as it is up to MAX_KEY_LENGTH, else its digest, so an attacker's long text costs no memory. */
export function boundedKey(key: string): string {
  return key.length <= MAX_KEY_LENGTH ? key : `sha256:${hash('sha256', key, 'hex')}`;
}

/** What a limiter holds, read from outside for tests of its memory bound (the server has no use for it). */
import type { FixedWindowLimiter } from '../../src/http/rate-limit.js';

export function keysHeld(limiter: FixedWindowLimiter): string[] {
  return [...(limiter as unknown as { windows: Map<string, unknown> }).windows.keys()];
}

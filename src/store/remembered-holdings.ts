/**
 * What findGrantHolding read, kept while nothing could have changed it: a resource server presents the same person's
 * token again and again (one exchange per downstream call, /introspect on each request), and each would otherwise
 * read the same row. An entry holds only while the database's holdings version (driver.ts) is the one it was read
 * at, and only until the grant's expiry as read; a revocation, here or in another process, changes the version.
 */
import { grantLives } from './rules.js';
import type { GrantHolding } from './types.js';

/** Entries at most: each is a verified token's grant (and jti), so a stranger cannot add any; the oldest goes first. */
export const REMEMBERED_HOLDINGS_LIMIT = 10_000;

interface Entry {
  readonly holding: GrantHolding;
  /** The grant's expiry as read: past it, the grant no longer stands whatever the version says. */
  readonly expiresAt: number;
}

export class RememberedHoldings {
  readonly #entries = new Map<string, Entry>();
  #version: number | undefined;

  /** The holding read for `key` at `version`, while it is still that version and the grant has not expired at `now`. */
  find(key: string, version: number, now: number): GrantHolding | undefined {
    if (version !== this.#version) return undefined;
    const entry = this.#entries.get(key);
    return entry !== undefined && grantLives(entry, now) ? entry.holding : undefined;
  }

  /** Keeps what was read for `key` at `version` (read before the row was); a new version forgets every older entry. */
  keep(key: string, version: number, holding: GrantHolding, expiresAt: number): void {
    if (version !== this.#version) {
      this.#entries.clear();
      this.#version = version;
    }
    if (this.#entries.size >= REMEMBERED_HOLDINGS_LIMIT && !this.#entries.has(key)) {
      this.#entries.delete(this.#entries.keys().next().value as string);
    }
    this.#entries.set(key, { holding, expiresAt });
  }

  get size(): number {
    return this.#entries.size;
  }
}

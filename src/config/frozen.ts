/** A Map whose set, delete and clear throw: the loaded config must not change by accident. */
class FrozenMap<K, V> extends Map<K, V> {
  constructor(entries: Iterable<readonly [K, V]>) {
    super();
    // Map.prototype.set directly, since this class's set refuses.
    for (const [key, value] of entries) Map.prototype.set.call(this, key, value);
    Object.freeze(this);
  }

  override set(): this {
    throw new TypeError('the configuration is read-only');
  }

  override delete(): boolean {
    throw new TypeError('the configuration is read-only');
  }

  override clear(): void {
    throw new TypeError('the configuration is read-only');
  }
}

export function frozenMap<K, V>(entries: Iterable<readonly [K, V]>): ReadonlyMap<K, V> {
  return new FrozenMap(entries);
}

/**
 * Freezes a config all the way down: plain objects and arrays in place, each Map as a frozenMap of frozen entries. Also
 * how a config that another process received (structured clone: plain Maps, nothing frozen) is frozen again as loaded.
 * A frozen value, a frozenMap among them, is returned as it is.
 */
export function deepFreeze<T>(value: T): T {
  if (typeof value !== 'object' || value === null || Object.isFrozen(value)) return value;
  if (value instanceof Map) return frozenMap([...value].map(([key, item]) => [key, deepFreeze(item)] as const)) as T;
  for (const [key, child] of Object.entries(value)) (value as Record<string, unknown>)[key] = deepFreeze(child);
  return Object.freeze(value);
}

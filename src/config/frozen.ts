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

/** Freezes plain objects and arrays all the way down; maps are frozen with frozenMap. */
export function deepFreeze<T>(value: T): T {
  if (typeof value !== 'object' || value === null || Object.isFrozen(value)) return value;
  for (const child of Object.values(value)) deepFreeze(child);
  return Object.freeze(value);
}

/** A config as another process received it (structured clone: plain Maps, nothing frozen), frozen again as loaded. */
export function refreeze<T>(value: T): T {
  if (value instanceof Map) return frozenMap([...value].map(([key, item]) => [key, refreeze(item)] as const)) as T;
  if (typeof value !== 'object' || value === null || Object.isFrozen(value)) return value;
  for (const [key, child] of Object.entries(value)) (value as Record<string, unknown>)[key] = refreeze(child);
  return Object.freeze(value);
}

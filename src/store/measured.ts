/** A store whose every method's latency is recorded in a histogram, by method name (DESIGN.md §10 store operation latency). */
import type { Histogram } from 'prom-client';

/** The names of `store`'s methods and of its other properties, its own and its classes' (not Object's). */
function membersOf(store: object): { methods: string[]; values: string[] } {
  const methods = new Set<string>();
  const values = new Set<string>();
  for (let level: object | null = store; level !== null && level !== Object.prototype; level = Object.getPrototypeOf(level) as object | null) {
    for (const name of Object.getOwnPropertyNames(level)) {
      if (name === 'constructor' || methods.has(name) || values.has(name)) continue;
      const descriptor = Object.getOwnPropertyDescriptor(level, name);
      if (descriptor !== undefined && typeof descriptor.value === 'function') methods.add(name);
      else values.add(name);
    }
  }
  return { methods: [...methods], values: [...values] };
}

/**
 * `store` with each method's latency recorded under its name (one wrapper, not a line in every store). The wrappers
 * are made once, here: a Proxy would run its trap on every method read, and the store is on the /token path.
 */
export function measuredStore<S extends object>(store: S, operations: Histogram<'operation'>): S {
  const target = store as Record<string, unknown>;
  const measured: Record<string, unknown> = {};
  const { methods, values } = membersOf(store);
  for (const name of methods) {
    const histogram = operations.labels({ operation: name });
    const observe = (started: number): void => histogram.observe((performance.now() - started) / 1000);
    // The method is read at each call (not kept), so a store that changes its methods is measured as it is then.
    measured[name] = (...args: unknown[]): unknown => {
      const started = performance.now();
      const result = (target[name] as (...a: unknown[]) => unknown)(...args);
      if (!(result instanceof Promise)) {
        observe(started);
        return result;
      }
      return result.then(
        (value: unknown) => {
          observe(started);
          return value;
        },
        (error: unknown) => {
          observe(started);
          throw error;
        },
      );
    };
  }
  // Other members (a store's `description`) are read from the store itself, whose getters may use its private fields.
  for (const name of values) Object.defineProperty(measured, name, { get: () => target[name], enumerable: true });
  return measured as S;
}

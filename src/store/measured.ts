/** A store whose every method's latency is recorded in a histogram, by method name (DESIGN.md §10 store operation latency). */
import type { Histogram } from 'prom-client';

/** `store` with each method's latency recorded under its name (one wrapper, not a line in every store). */
export function measuredStore<S extends object>(store: S, operations: Histogram<'operation'>): S {
  // Each method is wrapped once, on first use, not on every call (the store is on the /token path).
  const wrapped = new Map<string, (...args: unknown[]) => unknown>();
  return new Proxy(store, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== 'function' || typeof property !== 'string') return value;
      let measured = wrapped.get(property);
      if (measured === undefined) {
        const histogram = operations.labels({ operation: property });
        const method = value as (...a: unknown[]) => unknown;
        measured = (...args: unknown[]) => {
          const end = histogram.startTimer();
          const result = method.apply(target, args);
          if (result instanceof Promise) return result.finally(end);
          end();
          return result;
        };
        wrapped.set(property, measured);
      }
      return measured;
    },
  });
}

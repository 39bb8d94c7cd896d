/** The two oidc-provider modules the benchmark reaches into (shipped without types): its own in-memory adapter and LRU. */
declare module 'oidc-provider/lib/adapters/memory_adapter.js' {
  export default class MemoryAdapter {
    constructor(model: string, store?: unknown, clockTolerance?: number);
  }
}

declare module 'oidc-provider/lib/helpers/lru.js' {
  export default class LRU {
    constructor(options: { maxSize: number });
  }
}

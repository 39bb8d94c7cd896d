/** Raised by every store when its backend cannot be reached, so routes answer 503 instead of 500 (DESIGN.md §7). */
export class StoreUnavailableError extends Error {
  constructor(cause: unknown) {
    super('state store unavailable', { cause });
    this.name = 'StoreUnavailableError';
  }
}

/** Shape checks for what workers and the primary send each other over IPC: nothing received is trusted as typed. */

export const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null;

/** A count or id: a safe integer, 0 or more. */
export const isWholeNumber = (value: unknown): value is number => typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;

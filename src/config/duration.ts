const UNIT_MS: Readonly<Record<string, number>> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

// "ms" is listed before "m" so that "500ms" is not read as 500 minutes followed by "s".
const WHOLE = /^(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ms|s|m|h|d))+$/;
const PART = /(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d)/g;

/**
 * Parses a Go-style duration (`90s`, `15m`, `1h30m`, `1.5h`, `500ms`) plus `d` for days into
 * milliseconds; undefined for anything else, including signs, spaces, values too big to count and,
 * unless `zero` is allowed (a grace period may be none: `0s` or `0`), zero.
 */
export function parseDuration(text: string, { zero = false }: { readonly zero?: boolean } = {}): number | undefined {
  if (zero && text === '0') return 0;
  if (!WHOLE.test(text)) return undefined;
  let total = 0;
  for (const [, amount, unit] of text.matchAll(PART)) {
    total += Number(amount) * (UNIT_MS[unit as string] as number);
  }
  const milliseconds = Math.round(total);
  if (!Number.isSafeInteger(milliseconds)) return undefined;
  if (milliseconds === 0 && zero && total === 0) return 0;
  return milliseconds > 0 ? milliseconds : undefined;
}

const DISPLAY_UNITS: readonly (readonly [string, number])[] = [
  ['h', 3_600_000],
  ['m', 60_000],
  ['s', 1000],
  ['ms', 1],
];

/** Milliseconds back to the Go style parseDuration reads (`720h`, `1h30m`, `1m30s`, `500ms`). */
export function formatDuration(milliseconds: number): string {
  let rest = Math.round(milliseconds);
  if (rest <= 0) return '0s';
  let text = '';
  for (const [unit, size] of DISPLAY_UNITS) {
    const amount = Math.floor(rest / size);
    if (amount > 0) text += `${amount}${unit}`;
    rest -= amount * size;
  }
  return text;
}

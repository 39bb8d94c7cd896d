import { z } from 'zod';

/**
 * A whole number from 1 to `max`, written without quotes (DESIGN.md §3): a limit, password_hashes, workers. `example`
 * goes in the type message; `note` ends the out-of-range one, e.g. why the bound is what it is.
 */
export function wholeNumber(max: number, example: number, note = '') {
  return z
    .number({ error: (issue) => (typeof issue.input === 'string' ? `must be a number without quotes, e.g. ${example}` : `must be a whole number, e.g. ${example}`) })
    .refine((value) => Number.isInteger(value) && value >= 1 && value <= max, {
      error: (issue) => `is ${String(issue.input)}; use a whole number from 1 to ${max}${note}`,
    });
}

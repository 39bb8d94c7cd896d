/** User codes of the device flow (RFC 8628 §6.1): their alphabet, stored form and shown form. */

/** Consonants only, so no words, and no 0/O or 1/I to confuse; 20^8 ≈ 2^34.6 codes. */
export const USER_CODE_ALPHABET = 'BCDFGHJKLMNPQRSTVWXZ';
export const USER_CODE_LENGTH = 8;

const USER_CODE = new RegExp(`^[${USER_CODE_ALPHABET}]{${USER_CODE_LENGTH}}$`);

/** The stored form of what a person typed (case, dashes and spaces ignored), or undefined when it cannot be a code. */
export function normaliseUserCode(typed: string): string | undefined {
  if (typed.length > 64) return undefined;
  const code = typed.replace(/[\s-]/g, '').toUpperCase();
  return USER_CODE.test(code) ? code : undefined;
}

/** XXXX-XXXX, as shown to people (RFC 8628 §6.1: easier to read and type). */
export function formatUserCode(code: string): string {
  return `${code.slice(0, 4)}-${code.slice(4)}`;
}

/** The one parameter parser: form bodies and query strings become name -> every value sent. */
import { OAuthError } from '../policy/oauth-error.js';

export type Params = ReadonlyMap<string, readonly string[]>;

/** DESIGN.md §7: a NUL byte in any parameter is invalid_request on every store (PostgreSQL text cannot hold one). */
const nulByte = (): OAuthError => new OAuthError('invalid_request', 'a parameter contains a NUL byte');

/** A name or value that may decode to other text: an escape, a '+', or a character outside ASCII (UTF-8 rules). */
const NEEDS_DECODING = /[%+\u0080-\uffff]/;
/** A surrogate: UTF-8 encoding (WHATWG) replaces a lone one, which decodeURIComponent would keep. */
const SURROGATE = /[\ud800-\udfff]/;
const PLUS = /\+/g;
const utf8Encoder = new TextEncoder();
/** WHATWG "UTF-8 decode without BOM": U+FFFD for each invalid sequence, a leading BOM kept. */
const utf8Decoder = new TextDecoder('utf-8', { ignoreBOM: true });

const hexValue = (byte: number): number => (byte <= 0x39 ? byte - 0x30 : (byte | 0x20) - 0x57);
const isHexDigit = (byte: number | undefined): boolean => byte !== undefined && ((byte >= 0x30 && byte <= 0x39) || ((byte | 0x20) >= 0x61 && (byte | 0x20) <= 0x66));

/** WHATWG percent-decode of the text's UTF-8 bytes, then UTF-8 decode: a '%' not before two hex digits stays a '%'. */
function percentDecoded(text: string): string {
  const bytes = utf8Encoder.encode(text);
  const out = new Uint8Array(bytes.length);
  let length = 0;
  for (let i = 0; i < bytes.length; i += 1) {
    const byte = bytes[i] as number;
    if (byte === 0x25 && isHexDigit(bytes[i + 1]) && isHexDigit(bytes[i + 2])) {
      out[length] = hexValue(bytes[i + 1] as number) * 16 + hexValue(bytes[i + 2] as number);
      i += 2;
    } else out[length] = byte;
    length += 1;
  }
  return utf8Decoder.decode(out.subarray(0, length));
}

/** '+' as a space, then decodeURIComponent: undefined for a malformed escape or escaped bytes that are not UTF-8. */
function strictlyDecoded(text: string): string | undefined {
  try {
    return decodeURIComponent(text.replace(PLUS, ' '));
  } catch {
    return undefined;
  }
}

/**
 * One form-urlencoded name or value, refused (undefined) when an escape in it is malformed: for credentials
 * (RFC 6749 §2.3.1 Basic), where a lenient decode would make another id or secret of what was sent.
 */
export const formDecodedStrictly = (text: string): string | undefined => (NEEDS_DECODING.test(text) ? strictlyDecoded(text) : text);

/**
 * One name or value as the WHATWG form parser decodes it: '+' is a space, then percent-decoding and UTF-8. Well-formed
 * text (nearly all) is decodeURIComponent's answer, which is the same; the rest (a malformed escape, invalid UTF-8, a
 * surrogate decodeURIComponent would keep alone) takes the byte-wise path. Node's own URLSearchParams is not used: on
 * Node 20 it decodes "é%3D%" to "\ufffd=%", not "é=%".
 */
function decoded(text: string): string {
  if (!NEEDS_DECODING.test(text)) return text;
  return (SURROGATE.test(text) ? undefined : strictlyDecoded(text)) ?? percentDecoded(text.replace(PLUS, ' '));
}

/**
 * application/x-www-form-urlencoded (WHATWG), keeping repeats so they can be refused or collected; throws on a NUL byte.
 * A value that needs no decoding (a JWT, a digest) is sliced as it is: no per-character work on the longest values.
 */
export function parseParams(text: string): Params {
  const params = new Map<string, string[]>();
  let pairs = 0;
  // As URLSearchParams(text) always did: one leading '?' is not part of the first name.
  for (let start = text.startsWith('?') ? 1 : 0; start < text.length; ) {
    const found = text.indexOf('&', start);
    const end = found === -1 ? text.length : found;
    if (end > start) {
      // A stranger's 64 KiB of distinct names cost milliseconds to decode and index: stop at once, as a malformed request.
      if ((pairs += 1) > LIMITS.parameterCount) throw new OAuthError('invalid_request', `more than ${LIMITS.parameterCount} parameters`);
      // '=' is looked for within the pair only: across the rest of the text, "a&a&a..." would cost quadratic time.
      const pair = text.slice(start, end);
      const equals = pair.indexOf('=');
      const name = decoded(equals === -1 ? pair : pair.slice(0, equals));
      const value = equals === -1 ? '' : decoded(pair.slice(equals + 1));
      const values = params.get(name);
      if (values === undefined) params.set(name, [value]);
      else values.push(value);
    }
    start = end + 1;
  }
  // Only a text holding %00 or a raw NUL can decode to one, so most requests pay one scan.
  if (text.includes('%00') || text.includes('\0')) {
    for (const [name, values] of params) if (name.includes('\0') || values.some((value) => value.includes('\0'))) throw nulByte();
  }
  return params;
}

export const EMPTY_PARAMS: Params = new Map();

/** A request URL without its query string (never logged), without splitting it. */
export function pathOf(rawUrl: string): string {
  const at = rawUrl.indexOf('?');
  return at === -1 ? rawUrl : rawUrl.slice(0, at);
}

/** The query string of a raw request URL ("" when none). */
export function queryOf(rawUrl: string): string {
  const at = rawUrl.indexOf('?');
  return at === -1 ? '' : rawUrl.slice(at + 1);
}

/** The first parameter (other than `except`) sent more than once, if any. */
export function repeatedParameter(params: Params, except: readonly string[] = []): string | undefined {
  for (const [name, values] of params) {
    if (values.length > 1 && !except.includes(name)) return name;
  }
  return undefined;
}

/** The one value of a parameter; empty values count as absent (RFC 6749 §3.1). */
export function single(params: Params, name: string): string | undefined {
  const value = params.get(name)?.[0];
  return value === undefined || value === '' ? undefined : value;
}

export function required(params: Params, name: string): string {
  const value = single(params, name);
  if (value === undefined) throw new OAuthError('invalid_request', `${name} is required`);
  return value;
}

/** Every value of a repeatable parameter (empty values included: `resource=` is a value, DESIGN.md §5). */
export function all(params: Params, name: string): readonly string[] {
  return params.get(name) ?? [];
}

/** DESIGN.md §4 limits on lengths and counts; no request of the protocol sends near 256 parameters (20 resources at most, some 20 other names). */
export const LIMITS = { valueLength: 2048, resourceCount: 20, parameterCount: 256, bodyBytes: 64 * 1024 } as const;

export function checkLimits(params: Params): OAuthError | undefined {
  for (const name of ['state', 'nonce']) {
    const value = params.get(name)?.[0];
    if (value !== undefined && value.length > LIMITS.valueLength) {
      return new OAuthError('invalid_request', `${name} is longer than ${LIMITS.valueLength} characters`);
    }
  }
  const resources = all(params, 'resource');
  if (resources.length > LIMITS.resourceCount) {
    return new OAuthError('invalid_request', `more than ${LIMITS.resourceCount} resource values`);
  }
  if (resources.some((resource) => resource.length > LIMITS.valueLength)) {
    return new OAuthError('invalid_request', `a resource is longer than ${LIMITS.valueLength} characters`);
  }
  return undefined;
}

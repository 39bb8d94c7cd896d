/** The parameter parser (http/params.ts) against URLSearchParams, the WHATWG parser it must agree with. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { parseParams } from '../src/http/params.js';

/** What URLSearchParams makes of `text`, as parseParams answers it: name -> every value, in first-seen order. */
function byUrlSearchParams(text: string): Map<string, string[]> {
  const params = new Map<string, string[]>();
  for (const [name, value] of new URLSearchParams(text)) params.set(name, [...(params.get(name) ?? []), value]);
  return params;
}

/**
 * The WHATWG application/x-www-form-urlencoded parser step by step, as the URL Standard writes it (bytes, then
 * sequences split on 0x26, the first 0x3D, 0x2B to 0x20, percent-decode, UTF-8 decode without BOM), plus the leading
 * '?' URLSearchParams drops: the reference on any text, where Node 20's URLSearchParams is wrong on some non-ASCII ones.
 */
function byTheStandard(text: string): Map<string, string[]> {
  const bytes = [...new TextEncoder().encode(text.startsWith('?') ? text.slice(1) : text)];
  const sequences: number[][] = [[]];
  for (const byte of bytes) {
    if (byte === 0x26) sequences.push([]);
    else (sequences.at(-1) as number[]).push(byte);
  }
  const isHex = (byte: number | undefined): boolean => byte !== undefined && /^[0-9A-Fa-f]$/.test(String.fromCharCode(byte));
  const decode = (sequence: number[]): string => {
    const spaced = sequence.map((byte) => (byte === 0x2b ? 0x20 : byte));
    const out: number[] = [];
    for (let i = 0; i < spaced.length; i += 1) {
      if (spaced[i] === 0x25 && isHex(spaced[i + 1]) && isHex(spaced[i + 2])) {
        out.push(Number.parseInt(String.fromCharCode(spaced[i + 1] as number, spaced[i + 2] as number), 16));
        i += 2;
      } else out.push(spaced[i] as number);
    }
    return new TextDecoder('utf-8', { ignoreBOM: true }).decode(new Uint8Array(out));
  };
  const params = new Map<string, string[]>();
  for (const sequence of sequences) {
    if (sequence.length === 0) continue;
    const equals = sequence.indexOf(0x3d);
    const name = decode(equals === -1 ? sequence : sequence.slice(0, equals));
    const value = equals === -1 ? '' : decode(sequence.slice(equals + 1));
    params.set(name, [...(params.get(name) ?? []), value]);
  }
  return params;
}

const entriesOf = (params: ReadonlyMap<string, readonly string[]>): [string, string[]][] => [...params].map(([name, values]) => [name, [...values]]);
const holdsNul = (entries: [string, string[]][]): boolean => entries.some(([name, values]) => name.includes('\0') || values.some((value) => value.includes('\0')));

/** parseParams(text) against `expected`: equal, or invalid_request when that holds a NUL byte (DESIGN.md §7). */
function assertParsedAs(text: string, expected: [string, string[]][]): void {
  if (holdsNul(expected)) assert.throws(() => parseParams(text), { code: 'invalid_request' }, JSON.stringify(text));
  else assert.deepEqual(entriesOf(parseParams(text)), expected, JSON.stringify(text));
}

const ASCII_PIECES = ['&', '=', '+', '%', '?', '%2', '%20', '%3D', '%26', '%2B', '%C3%A9', '%C3', '%ZZ', '%e2%82%ac', '%ED%A0%80', '%EF%BB%BF', '&&', '==', ' ', 'a', 'resource', 'x', '%00', '\0'];
const OTHER_PIECES = ['é', '€', '\u{1F600}', '\ud800', '\udc00', '\ufeff'];

/** parseParams against `reference` on 3,000 texts made of `piece`s. */
function agreesWith(reference: (text: string) => Map<string, string[]>, piece: fc.Arbitrary<string>): void {
  fc.assert(
    fc.property(fc.array(piece, { maxLength: 24 }), (pieces) => {
      const text = pieces.join('');
      assertParsedAs(text, entriesOf(reference(text)));
    }),
    { numRuns: 3000 },
  );
}

test('parseParams is the WHATWG form parser on every text: escapes good and bad, UTF-8 good and bad, non-ASCII, lone surrogates', () => {
  agreesWith(byTheStandard, fc.oneof(fc.constantFrom(...ASCII_PIECES, ...OTHER_PIECES), fc.string({ maxLength: 6 }), fc.string({ maxLength: 4, unit: 'grapheme' })));
});

test('parseParams agrees with URLSearchParams on ASCII text (what it replaced)', () => {
  agreesWith(byUrlSearchParams, fc.oneof(fc.constantFrom(...ASCII_PIECES), fc.string({ maxLength: 6, unit: 'binary-ascii' })));
});

test('parseParams decodes what Node 20\'s URLSearchParams gets wrong: a non-ASCII character before a good and a bad escape', () => {
  assert.deepEqual(entriesOf(parseParams('é%3D%=1')), [['é=%', ['1']]]);
  assert.deepEqual(entriesOf(parseParams('a=%C3%A9%zz%')), [['a', ['é%zz%']]]);
  assert.deepEqual(entriesOf(parseParams('a=%C3')), [['a', ['\ufffd']]]);
});

test('parseParams: repeats kept in order, empty pairs skipped, a pair without "=" is a name with an empty value', () => {
  const text = 'grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange&subject_token=eyJ.a-b_c.d&&resource=a&resource=b+c&flag&=v';
  assert.deepEqual(entriesOf(parseParams(text)), [
    ['grant_type', ['urn:ietf:params:oauth:grant-type:token-exchange']],
    ['subject_token', ['eyJ.a-b_c.d']],
    ['resource', ['a', 'b c']],
    ['flag', ['']],
    ['', ['v']],
  ]);
});

test('parseParams: a NUL byte, raw or escaped, in a name or a value is invalid_request', () => {
  for (const text of ['a=%00', 'a%00=1', 'a=b\0', 'x=1&a\0=2', 'a=%2500&b=%00']) {
    assert.throws(() => parseParams(text), { code: 'invalid_request', description: 'a parameter contains a NUL byte' }, JSON.stringify(text));
  }
  assert.deepEqual(entriesOf(parseParams('a=%2500')), [['a', ['%00']]]);
});

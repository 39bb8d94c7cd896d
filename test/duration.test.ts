/** parseDuration: Go-style durations plus days, and everything it must refuse. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { formatDuration, parseDuration } from '../src/config/duration.js';

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

describe('parseDuration accepts', () => {
  const accepted: [string, number][] = [
    ['90s', 90 * SECOND],
    ['15m', 15 * MINUTE],
    ['720h', 720 * HOUR],
    ['1h30m', HOUR + 30 * MINUTE],
    ['1.5h', 1.5 * HOUR],
    ['.5h', 30 * MINUTE],
    ['1.h', HOUR],
    ['500ms', 500],
    ['1m500ms', MINUTE + 500],
    ['30d', 30 * DAY],
    ['1d12h', DAY + 12 * HOUR],
    ['30m1h', HOUR + 30 * MINUTE],
    ['2h2h', 4 * HOUR],
    ['0h5m', 5 * MINUTE],
    ['1.0000001ms', 1],
    ['104249991d', 104249991 * DAY],
  ];
  for (const [text, milliseconds] of accepted) {
    test(`${JSON.stringify(text)} is ${milliseconds} ms`, () => {
      assert.equal(parseDuration(text), milliseconds);
    });
  }
});

describe('parseDuration refuses', () => {
  const refused: [string, string][] = [
    ['', 'empty'],
    ['0s', 'zero is meaningless for a lifetime'],
    ['0', 'zero without unit'],
    ['0h0m', 'zero made of parts'],
    ['0.4ms', 'less than a millisecond rounds to zero'],
    ['-1h', 'negative'],
    ['+1h', 'signed'],
    ['1h-30m', 'a negative part'],
    ['90', 'no unit'],
    ['h', 'no number'],
    ['.h', 'a lone dot'],
    ['30 days', 'a space and a word'],
    ['30days', 'a unit word'],
    [' 1h', 'a leading space'],
    ['1h ', 'a trailing space'],
    ['1h\n', 'a trailing newline'],
    ['1 h', 'a space before the unit'],
    ['1H', 'upper-case unit'],
    ['1y', 'unknown unit'],
    ['1w', 'weeks are not a unit'],
    ['1us', 'microseconds are finer than a lifetime'],
    ['1ns', 'nanoseconds are finer than a lifetime'],
    ['1e3s', 'exponent notation'],
    ['1..5h', 'two dots'],
    ['1,5h', 'a decimal comma'],
    ['NaN', 'not a number'],
    ['Infinityh', 'infinity'],
    ['\uff11h', 'a full-width digit'],
    ['99999999999999999999d', 'overflow beyond safe integers'],
    ['104249992d', 'just beyond Number.MAX_SAFE_INTEGER milliseconds'],
    [`${'9'.repeat(400)}h`, 'a number that is Infinity'],
  ];
  for (const [text, why] of refused) {
    test(`${JSON.stringify(text.length > 40 ? `${text.slice(0, 20)}...` : text)} (${why})`, () => {
      assert.equal(parseDuration(text), undefined);
    });
  }
});

describe('formatDuration', () => {
  test('writes the Go style back', () => {
    assert.equal(formatDuration(720 * HOUR), '720h');
    assert.equal(formatDuration(HOUR + 30 * MINUTE), '1h30m');
    assert.equal(formatDuration(90 * SECOND), '1m30s');
    assert.equal(formatDuration(500), '500ms');
    assert.equal(formatDuration(30 * DAY), '720h');
  });

  test('round-trips through parseDuration', () => {
    for (const text of ['90s', '15m', '720h', '1h30m', '1.5h', '500ms', '30d', '1d2h3m4s5ms']) {
      const milliseconds = parseDuration(text);
      assert.ok(milliseconds !== undefined, text);
      assert.equal(parseDuration(formatDuration(milliseconds)), milliseconds, text);
    }
  });
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseScope } from '../src/policy/scope.js';

test('parseScope: values split on spaces, repeats removed in order, empty parameter is no scope', () => {
  assert.deepEqual(parseScope(undefined), []);
  assert.deepEqual(parseScope(''), []);
  assert.deepEqual(parseScope('read'), ['read']);
  assert.deepEqual(parseScope(' read  write '), ['read', 'write']);
  assert.deepEqual(parseScope('read write read openid write'), ['read', 'write', 'openid']);
  assert.deepEqual(parseScope('https://api.example.org/x:read!#$'), ['https://api.example.org/x:read!#$']);
});

test('parseScope: a character outside RFC 6749 §3.3 NQCHAR anywhere makes the whole parameter malformed', () => {
  for (const raw of ['re"ad', 'read wr\\ite', 'read\twrite', 'read\nwrite', 'lecture é', 'read\u0000', '\u007f']) {
    assert.equal(parseScope(raw), undefined, JSON.stringify(raw));
  }
});

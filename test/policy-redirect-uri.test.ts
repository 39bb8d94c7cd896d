/** Redirect URI matching (DESIGN.md §3, RFC 8252 §7.3): exact, except loopback ports. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { redirectUriMatches } from '../src/policy/redirect-uri.js';

const CONFIGURED = 'when-registered-without-port';

describe('redirectUriMatches', () => {
  test('exact matches, and nothing else for non-loopback URIs', () => {
    assert.equal(redirectUriMatches(['https://app.example.org/cb'], 'https://app.example.org/cb', CONFIGURED), true);
    assert.equal(redirectUriMatches(['https://app.example.org/cb'], 'https://app.example.org/cb/', CONFIGURED), false, 'a trailing / is another URI');
    assert.equal(redirectUriMatches(['https://app.example.org/cb'], 'https://app.example.org:443/cb', CONFIGURED), false);
    assert.equal(redirectUriMatches(['https://app.example.org/cb'], 'https://app.example.org:8443/cb', 'always'), false, 'only loopback ports are free');
  });

  test('configured clients: a loopback URI registered without a port matches any port; with a port, only that one', () => {
    for (const host of ['127.0.0.1', '[::1]', 'localhost']) {
      assert.equal(redirectUriMatches([`http://${host}/callback`], `http://${host}:51234/callback`, CONFIGURED), true, host);
      assert.equal(redirectUriMatches([`http://${host}/callback`], `http://${host}/callback`, CONFIGURED), true);
    }
    assert.equal(redirectUriMatches(['http://127.0.0.1:9000/callback'], 'http://127.0.0.1:9001/callback', CONFIGURED), false);
    assert.equal(redirectUriMatches(['http://127.0.0.1:9000/callback'], 'http://127.0.0.1:9000/callback', CONFIGURED), true);
  });

  test('dynamic clients: any port, registered with a port or not', () => {
    assert.equal(redirectUriMatches(['http://127.0.0.1:9000/callback'], 'http://127.0.0.1:61000/callback', 'always'), true);
    assert.equal(redirectUriMatches(['http://localhost/callback'], 'http://localhost:3000/callback', 'always'), true);
  });

  test('everything but the port still matches exactly: host, path, trailing /, query, scheme', () => {
    const registered = ['http://127.0.0.1/callback?x=1'];
    assert.equal(redirectUriMatches(registered, 'http://127.0.0.1:5000/callback?x=1', 'always'), true);
    assert.equal(redirectUriMatches(registered, 'http://127.0.0.1:5000/callback/?x=1', 'always'), false);
    assert.equal(redirectUriMatches(registered, 'http://127.0.0.1:5000/callback?x=2', 'always'), false);
    assert.equal(redirectUriMatches(registered, 'http://localhost:5000/callback?x=1', 'always'), false, 'another loopback host is another URI');
    assert.equal(redirectUriMatches(registered, 'https://127.0.0.1:5000/callback?x=1', 'always'), false);
    assert.equal(redirectUriMatches(registered, 'http://127.0.0.1:5000@evil.example/callback?x=1', 'always'), false);
    assert.equal(redirectUriMatches(['http://127.0.0.1/'], 'http://127.0.0.1:5000', 'always'), false);
    assert.equal(redirectUriMatches(['http://127.0.0.1'], 'http://127.0.0.1:5000', 'always'), true);
  });
});

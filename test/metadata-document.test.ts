/** Client ID metadata documents (DESIGN.md §9): fetched from a real HTTPS server on 127.0.0.1, checked and cached. */
import assert from 'node:assert/strict';
import type { LookupAddress } from 'node:dns';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { after, before, describe, test, type TestContext } from 'node:test';
import { checkDocument, documentUrlProblem, freshnessMs, MetadataDocuments, type MetadataDocumentsOptions } from '../src/clients/metadata-document.js';
import { isPublicAddress, publicOnlyLookup } from '../src/clients/safe-fetch.js';
import { startHttpsServer, type HttpsTestServer } from './helpers/https-server.js';

const MINUTE = 60_000;
const BOUNDED = { timeout: 15_000 };

type Route = (request: IncomingMessage, response: ServerResponse) => void;
const routes = new Map<string, Route>();
const hits = new Map<string, number>();
/** Responses held open by slow routes, ended when the server stops. */
const held: ServerResponse[] = [];
let connections = 0;
let documentServer: HttpsTestServer;
let origin = '';
let cert: Buffer;

before(async () => {
  documentServer = await startHttpsServer((request, response) => {
    const path = request.url ?? '';
    hits.set(path, (hits.get(path) ?? 0) + 1);
    const route = routes.get(path);
    if (route === undefined) response.writeHead(404).end();
    else route(request, response);
  }, 'IP:127.0.0.1,IP:::1,DNS:localhost');
  documentServer.server.on('connection', () => (connections += 1));
  ({ origin, cert } = documentServer);
});

after(async () => {
  for (const response of held) response.destroy();
  await documentServer.close();
});

let paths = 0;
/** A path no other test uses, so counts and caches never mix. */
const freshPath = (name: string): string => `/t${(paths += 1)}/${name}.json`;
const hitsOf = (path: string): number => hits.get(path) ?? 0;

function documentFor(path: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { client_id: `${origin}${path}`, redirect_uris: ['https://app.example/callback'], ...extra };
}

/** Serves `body` as JSON at a new path and returns that path. */
function serveJson(name: string, body: (path: string) => unknown, headers: Record<string, string> = {}): string {
  const path = freshPath(name);
  routes.set(path, (_request, response) => {
    response.writeHead(200, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body(path)));
  });
  return path;
}

function documents(t: TestContext, options: MetadataDocumentsOptions = {}): MetadataDocuments {
  const resolver = new MetadataDocuments({ allowPrivateAddresses: true, ca: cert, ...options });
  t.after(() => resolver.close());
  return resolver;
}

async function refusal(resolver: MetadataDocuments, url: string): Promise<string> {
  const resolution = await resolver.resolve(url);
  assert.equal(resolution.ok, false, `expected ${url} to be refused`);
  return resolution.ok ? '' : resolution.reason;
}

describe('fetching and checking a document', () => {
  test('a good document is fetched with Accept: application/json and its fields are kept', BOUNDED, async (t) => {
    let accept: string | undefined;
    const path = freshPath('good');
    routes.set(path, (request, response) => {
      accept = request.headers.accept;
      response.writeHead(200, { 'content-type': 'application/json; charset=utf-8' }).end(JSON.stringify(documentFor(path, {
        redirect_uris: ['https://app.example/callback', 'http://127.0.0.1/callback', 'cursor://anysphere.cursor-mcp/oauth/callback', 'com.example.app:/cb'],
        client_name: 'Example MCP host',
        client_uri: 'https://app.example',
        logo_uri: 'https://app.example/logo.png',
        scope: 'openid mcp',
        grant_types: ['authorization_code', 'refresh_token'],
        token_endpoint_auth_method: 'none',
        software_id: 'ignored',
      })));
    });
    const resolution = await documents(t).resolve(`${origin}${path}`);
    assert.deepEqual(resolution, {
      ok: true,
      fetched: true,
      document: {
        client_id: `${origin}${path}`,
        redirect_uris: ['https://app.example/callback', 'http://127.0.0.1/callback', 'cursor://anysphere.cursor-mcp/oauth/callback', 'com.example.app:/cb'],
        client_name: 'Example MCP host',
        client_uri: 'https://app.example',
        logo_uri: 'https://app.example/logo.png',
        scope: 'openid mcp',
        grant_types: ['authorization_code', 'refresh_token'],
        token_endpoint_auth_method: 'none',
      },
    });
    assert.equal(accept, 'application/json');
  });

  test("a document whose client_id is not its URL is refused", BOUNDED, async (t) => {
    const path = serveJson('mismatch', (own) => documentFor(own, { client_id: `${origin}/other.json` }));
    assert.match(await refusal(documents(t), `${origin}${path}`), /client_id is not the URL it was fetched from/);
  });

  test('a document without redirect_uris is refused', BOUNDED, async (t) => {
    const path = serveJson('no-redirects', (own) => ({ client_id: `${origin}${own}` }));
    assert.match(await refusal(documents(t), `${origin}${path}`), /redirect_uris is required/);
  });

  test('a document with a javascript: redirect URI is refused', BOUNDED, async (t) => {
    const path = serveJson('javascript', (own) => documentFor(own, { redirect_uris: ['https://app.example/cb', 'javascript:alert(1)'] }));
    assert.match(await refusal(documents(t), `${origin}${path}`), /redirect_uris\[1\] must not use the javascript: scheme/);
  });

  test('a document cannot make its client confidential: client_secret_basic is refused', BOUNDED, async (t) => {
    const path = serveJson('confidential', (own) => documentFor(own, { token_endpoint_auth_method: 'client_secret_basic' }));
    assert.match(await refusal(documents(t), `${origin}${path}`), /token_endpoint_auth_method must be "none"/);
  });

  test('a body over 5 KiB is refused, with a Content-Length and without one', BOUNDED, async (t) => {
    const padding = 'x'.repeat(6 * 1024);
    const declared = serveJson('large', (own) => documentFor(own, { client_name: padding }));
    const streamed = freshPath('streamed');
    routes.set(streamed, (_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' });
      // Chunked transfer: no Content-Length, so only counting the bytes can stop it.
      const text = JSON.stringify(documentFor(streamed, { client_name: padding }));
      for (let start = 0; start < text.length; start += 1024) response.write(text.slice(start, start + 1024));
      response.end();
    });
    const resolver = documents(t);
    assert.match(await refusal(resolver, `${origin}${declared}`), /larger than 5120 bytes/);
    assert.match(await refusal(resolver, `${origin}${streamed}`), /larger than 5120 bytes/);
  });

  test('a redirect is not followed: the 3xx itself is the refusal', BOUNDED, async (t) => {
    const target = serveJson('target', (own) => documentFor(own));
    const path = freshPath('redirect');
    routes.set(path, (_request, response) => response.writeHead(302, { location: `${origin}${target}` }).end());
    assert.match(await refusal(documents(t), `${origin}${path}`), /redirect \(HTTP 302\); redirects are not followed/);
    assert.equal(hitsOf(path), 1);
    assert.equal(hitsOf(target), 0);
  });

  test('other statuses, other content types and broken JSON are refused', BOUNDED, async (t) => {
    const resolver = documents(t);
    assert.match(await refusal(resolver, `${origin}${freshPath('missing')}`), /answered HTTP 404, not 200/);
    const html = freshPath('html');
    routes.set(html, (_request, response) => response.writeHead(200, { 'content-type': 'text/html' }).end(JSON.stringify(documentFor(html))));
    assert.match(await refusal(resolver, `${origin}${html}`), /not served as application\/json/);
    const broken = freshPath('broken');
    routes.set(broken, (_request, response) => response.writeHead(200, { 'content-type': 'application/json' }).end('{"client_id":'));
    assert.match(await refusal(resolver, `${origin}${broken}`), /not valid JSON/);
    const list = serveJson('list', (own) => [documentFor(own)]);
    assert.match(await refusal(resolver, `${origin}${list}`), /the document is not a JSON object/);
  });

  test('a server that is too slow, before the headers or in the body, is a timeout', BOUNDED, async (t) => {
    const silent = freshPath('silent');
    routes.set(silent, (_request, response) => void held.push(response));
    const trickling = freshPath('trickling');
    routes.set(trickling, (_request, response) => {
      held.push(response);
      response.writeHead(200, { 'content-type': 'application/json' });
      response.write('{"client_id":');
    });
    const resolver = documents(t, { timeoutMs: 300 });
    for (const path of [silent, trickling]) {
      const started = performance.now();
      assert.match(await refusal(resolver, `${origin}${path}`), /no complete answer within 0.3 s/);
      assert.ok(performance.now() - started < 2000, 'the timeout cut the fetch short');
    }
  });

  test('a certificate the server does not trust is a refusal', BOUNDED, async (t) => {
    const path = serveJson('untrusted', (own) => documentFor(own));
    const resolver = new MetadataDocuments({ allowPrivateAddresses: true });
    t.after(() => resolver.close());
    assert.match(await refusal(resolver, `${origin}${path}`), /could not be fetched: its host could not be reached$/);
  });
});

describe('client_id URLs that are never fetched', () => {
  test('http, no path, a fragment, user info or a non-normal form is refused without a request', BOUNDED, async (t) => {
    const resolver = documents(t);
    const before = connections;
    const path = serveJson('never', (own) => documentFor(own));
    const refused: Array<[string, RegExp]> = [
      [`${origin.replace('https:', 'http:')}${path}`, /must use https/],
      [origin, /must have a path/],
      [`${origin}/`, /must have a path/],
      [`${origin}${path}#x`, /must not contain a fragment/],
      [`${origin.replace('://', '://user:pass@')}${path}`, /user name or password/],
      [`${origin}/a/../${path.slice(1)}`, /normal form/],
      [origin.replace('127.0.0.1', '127.0.0.1.') + path, /normal form|resolves/],
      [`${origin.toUpperCase()}${path}`, /normal form/],
      ['not a url', /not a URL/],
    ];
    for (const [url, reason] of refused) {
      const resolution = await resolver.resolve(url);
      assert.equal(resolution.ok, false, url);
      if (!resolution.ok) assert.match(resolution.reason, reason, url);
      assert.equal(resolution.fetched, false, url);
    }
    assert.equal(hitsOf(path), 0);
    assert.equal(connections, before);
  });

  test('documentUrlProblem accepts a normal https URL with a path and a query', () => {
    assert.equal(documentUrlProblem('https://app.example/oauth/client.json'), undefined);
    assert.equal(documentUrlProblem('https://app.example:8443/c?v=1'), undefined);
  });
});

describe('caching', () => {
  test('a document is reused for 5 minutes when the answer has no Cache-Control', BOUNDED, async (t) => {
    let clock = 1_000_000;
    const resolver = documents(t, { now: () => clock });
    const path = serveJson('default', (own) => documentFor(own));
    const url = `${origin}${path}`;
    assert.equal((await resolver.resolve(url)).fetched, true);
    const again = await resolver.resolve(url);
    assert.equal(again.ok, true);
    assert.equal(again.fetched, false);
    assert.equal(hitsOf(path), 1);
    clock += 5 * MINUTE - 1;
    await resolver.resolve(url);
    assert.equal(hitsOf(path), 1);
    clock += 1;
    assert.equal((await resolver.resolve(url)).fetched, true);
    assert.equal(hitsOf(path), 2);
  });

  test('Cache-Control max-age is honoured, and capped at 24 hours', BOUNDED, async (t) => {
    let clock = 1_000_000;
    const resolver = documents(t, { now: () => clock });
    const short = serveJson('short', (own) => documentFor(own), { 'cache-control': 'public, max-age=60' });
    const long = serveJson('long', (own) => documentFor(own), { 'cache-control': 'max-age=31536000' });
    await resolver.resolve(`${origin}${short}`);
    await resolver.resolve(`${origin}${long}`);
    clock += 59_000;
    await resolver.resolve(`${origin}${short}`);
    assert.equal(hitsOf(short), 1);
    clock += 1_000;
    await resolver.resolve(`${origin}${short}`);
    assert.equal(hitsOf(short), 2);
    clock += 24 * 60 * MINUTE - 60_000 - 1;
    await resolver.resolve(`${origin}${long}`);
    assert.equal(hitsOf(long), 1);
    clock += 1;
    await resolver.resolve(`${origin}${long}`);
    assert.equal(hitsOf(long), 2);
  });

  test('a no-store document is fetched every time', BOUNDED, async (t) => {
    const resolver = documents(t);
    const path = serveJson('no-store', (own) => documentFor(own), { 'cache-control': 'no-store' });
    for (let round = 0; round < 3; round += 1) {
      const resolution = await resolver.resolve(`${origin}${path}`);
      assert.equal(resolution.ok, true);
      assert.equal(resolution.fetched, true);
    }
    assert.equal(hitsOf(path), 3);
  });

  test('ten concurrent resolves of one URL share one fetch', BOUNDED, async (t) => {
    const path = freshPath('single-flight');
    routes.set(path, (_request, response) => {
      setTimeout(() => response.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' }).end(JSON.stringify(documentFor(path))), 100);
    });
    const resolver = documents(t);
    const resolutions = await Promise.all(Array.from({ length: 10 }, () => resolver.resolve(`${origin}${path}`)));
    assert.equal(hitsOf(path), 1);
    assert.ok(resolutions.every((resolution) => resolution.ok));
    assert.equal(resolutions.filter((resolution) => resolution.fetched).length, 1);
  });

  test('a failure is remembered for 60 s, even when the answer says no-store', BOUNDED, async (t) => {
    let clock = 1_000_000;
    const resolver = documents(t, { now: () => clock });
    const path = freshPath('failing');
    routes.set(path, (_request, response) => response.writeHead(500, { 'cache-control': 'no-store' }).end());
    const url = `${origin}${path}`;
    const first = await resolver.resolve(url);
    assert.equal(first.fetched, true);
    const second = await resolver.resolve(url);
    assert.deepEqual(second, { ...first, fetched: false });
    clock += 60_000 - 1;
    await resolver.resolve(url);
    assert.equal(hitsOf(path), 1);
    clock += 1;
    await resolver.resolve(url);
    assert.equal(hitsOf(path), 2);
  });

  test('the cache keeps at most maxEntries URLs, forgetting the oldest', BOUNDED, async (t) => {
    const resolver = documents(t, { maxEntries: 2 });
    const [a, b, c] = ['a', 'b', 'c'].map((name) => serveJson(name, (own) => documentFor(own))) as [string, string, string];
    for (const path of [a, b, c, b, c]) await resolver.resolve(`${origin}${path}`);
    assert.deepEqual([hitsOf(a), hitsOf(b), hitsOf(c)], [1, 1, 1]);
    await resolver.resolve(`${origin}${a}`);
    assert.equal(hitsOf(a), 2);
  });
});

describe('the address check', () => {
  const port = (): string => new URL(origin).port;

  test('an IP-literal loopback host is refused before any connection', BOUNDED, async (t) => {
    const resolver = documents(t, { allowPrivateAddresses: false });
    const path = serveJson('literal', (own) => documentFor(own));
    const before = connections;
    // DESIGN.md §7: the page names no address (the log does; see metadata-document-dns-oracle.test.ts).
    for (const url of [`${origin}${path}`, `https://[::1]:${port()}${path}`, `https://[::ffff:7f00:1]:${port()}${path}`]) {
      assert.equal(await refusal(resolver, url), "the client's metadata document could not be fetched: its host could not be reached");
    }
    assert.equal(hitsOf(path), 0);
    assert.equal(connections, before);
  });

  test('a name that resolves to loopback (localhost) is refused before any connection', BOUNDED, async (t) => {
    const resolver = documents(t, { allowPrivateAddresses: false });
    const path = freshPath('named');
    routes.set(path, (_request, response) => response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({
      client_id: `https://localhost:${port()}${path}`, redirect_uris: ['https://app.example/cb'],
    })));
    const before = connections;
    assert.match(await refusal(resolver, `https://localhost:${port()}${path}`), /could not be fetched: its host could not be reached$/);
    assert.equal(hitsOf(path), 0);
    assert.equal(connections, before);
    // The same URL is fine when private addresses are allowed, so the refusal above was the address check.
    const allowed = await documents(t).resolve(`https://localhost:${port()}${path}`);
    assert.equal(allowed.ok, true);
  });

  test('the lookup refuses a name when any one of its addresses is not public', async () => {
    const answer = (addresses: LookupAddress[]) =>
      publicOnlyLookup(((_host: string, _options: unknown, callback: (error: null, addresses: LookupAddress[]) => void) => callback(null, addresses)) as never);
    const run = (addresses: LookupAddress[], all: boolean) =>
      new Promise<{ error: (Error & { code?: string }) | null; address: unknown; family?: number }>((resolve) =>
        answer(addresses)('host.example', { all }, (error, address, family) => resolve({ error, address, family })));
    const mixed = await run([{ address: '93.184.215.14', family: 4 }, { address: '10.0.0.5', family: 4 }], true);
    assert.equal((mixed.error as (Error & { detail?: string }) | null)?.detail, 'the host resolves to 10.0.0.5, a loopback, private, link-local or reserved address');
    assert.equal(mixed.error?.message, 'its host could not be reached', 'a person is told no address (DESIGN.md §7)');
    const metadata = await run([{ address: '2606:4700::1', family: 6 }, { address: 'fd00:ec2::254', family: 6 }], false);
    assert.match((metadata.error as (Error & { detail?: string }) | null)?.detail ?? '', /fd00:ec2::254/);
    const good = [{ address: '93.184.215.14', family: 4 }, { address: '2606:4700::1', family: 6 }];
    assert.deepEqual(await run(good, true), { error: null, address: good, family: undefined });
    assert.deepEqual(await run(good, false), { error: null, address: '93.184.215.14', family: 4 });
  });

  test('isPublicAddress refuses every special-purpose range and IPv4 hidden in IPv6', () => {
    const refused = [
      '127.0.0.1', '127.255.0.9', '10.1.2.3', '172.16.0.1', '172.31.255.255', '192.168.1.1', '169.254.169.254', '169.254.0.1',
      '100.64.0.1', '100.127.255.255', '0.0.0.0', '0.1.2.3', '224.0.0.1', '239.255.255.250', '255.255.255.255', '240.0.0.1',
      '192.0.0.170', '192.0.2.1', '198.18.0.1', '198.51.100.7', '203.0.113.9', '192.88.99.1',
      '::', '::1', '::127.0.0.1', '::ffff:127.0.0.1', '::ffff:7f00:1', '::ffff:169.254.169.254', '::ffff:10.0.0.1', '64:ff9b::a9fe:a9fe',
      '64:ff9b::10.0.0.1', '64:ff9b:1::1', 'fc00::1', 'fd00:ec2::254', 'fe80::1', 'fe80::1%eth0', 'febf::1', 'fec0::1', 'ff02::1',
      '2001:db8::1', '2001::1', '2002:7f00:1::1', '100::1', '3fff::1', '5f00::1', '::ffff:0:7f00:1', '::ffff:0:8.8.8.8',
      'localhost', 'example.com', '', '1.2.3',
    ];
    for (const address of refused) assert.equal(isPublicAddress(address), false, address);
    const allowed = ['1.1.1.1', '8.8.8.8', '93.184.215.14', '100.63.255.255', '100.128.0.1', '172.32.0.1', '169.253.0.1', '2606:4700:4700::1111',
      '2a00:1450:4001::200e', '::ffff:8.8.8.8', '64:ff9b::808:808'];
    for (const address of allowed) assert.equal(isPublicAddress(address), true, address);
  });
});

describe('document rules without the network', () => {
  const url = 'https://app.example/client.json';
  const check = (extra: Record<string, unknown>) => checkDocument(url, { client_id: url, redirect_uris: ['https://app.example/cb'], ...extra });
  const reasonOf = (extra: Record<string, unknown>): string => {
    const result = check(extra);
    return result.ok ? '' : result.reason;
  };

  test('redirect URIs: https, loopback http and private-use schemes pass; dangerous ones do not', () => {
    for (const uri of ['https://app.example/cb', 'http://127.0.0.1:33418/cb', 'http://[::1]/cb', 'http://localhost:8080/cb', 'cursor://cb', 'com.example.app:/cb', 'vscode://vscode.github-authentication/did-authenticate', 'claude://callback', 'msteams.example:/cb']) {
      assert.equal(check({ redirect_uris: [uri] }).ok, true, uri);
    }
    const refused: Array<[string, RegExp]> = [
      ['javascript:alert(1)', /javascript: scheme/],
      ['JavaScript:alert(1)', /javascript: scheme/],
      ['data:text/html,hi', /data: scheme/],
      ['file:///etc/passwd', /file: scheme/],
      ['vbscript:msgbox(1)', /vbscript: scheme/],
      // The operating system's own handlers, launched from this server's origin: Follina, search to a remote share.
      ['ms-msdt:/id PCWDiagnostic', /ms-msdt: scheme \(a handler of the operating system/],
      ['MS-OfficeCmd:{"id":3}', /ms-officecmd: scheme/],
      ['search-ms:query=invoice&crumb=location:\\\\evil.example\\share', /search-ms: scheme/],
      ['shell:startup', /shell: scheme/],
      ['intent://scan/?package=com.example', /intent: scheme/],
      ['smb://evil.example/share', /smb: scheme/],
      ['chrome://settings', /chrome: scheme/],
      ['http://app.example/cb', /plain http only for a loopback host/],
      ['https://app.example/cb#frag', /fragment/],
      ['/relative/cb', /not an absolute URI/],
      ['https://user@app.example/cb', /user name or password/],
    ];
    for (const [uri, reason] of refused) assert.match(reasonOf({ redirect_uris: [uri] }), reason, uri);
    assert.match(reasonOf({ redirect_uris: [] }), /redirect_uris must list at least one URI/);
    assert.match(reasonOf({ redirect_uris: 'https://app.example/cb' }), /redirect_uris is required/);
    assert.match(reasonOf({ redirect_uris: [42] }), /redirect_uris\[0\] must be a string/);
  });

  test('names and links are bounded strings; logo_uri and client_uri are web URLs; secrets never pass', () => {
    assert.equal(check({ client_name: 'n'.repeat(200) }).ok, true);
    assert.match(reasonOf({ client_name: 'n'.repeat(201) }), /client_name must be at most 200 characters/);
    assert.match(reasonOf({ client_name: 7 }), /client_name must be a string/);
    assert.match(reasonOf({ logo_uri: 'javascript:alert(1)' }), /logo_uri must be an https/);
    assert.match(reasonOf({ client_uri: `https://app.example/${'x'.repeat(2048)}` }), /client_uri must be at most 2048 characters/);
    assert.match(reasonOf({ token_endpoint_auth_method: 'client_secret_post' }), /must be "none"/);
    assert.match(reasonOf({ client_secret: 'shh' }), /client_secret must not appear/);
    assert.match(reasonOf({ grant_types: 'authorization_code' }), /grant_types must be a list/);
    assert.match(reasonOf({ scope: ['openid'] }), /scope must be a string/);
    assert.match(reasonOf({ client_id: `${url}/` }), /client_id is not the URL/);
    assert.match(reasonOf({ client_id: undefined }), /client_id is required/);
  });

  test('freshness follows Cache-Control, up to 24 hours', () => {
    assert.equal(freshnessMs(undefined, undefined), 5 * MINUTE);
    assert.equal(freshnessMs('public', undefined), 5 * MINUTE);
    assert.equal(freshnessMs('max-age=120', undefined), 120_000);
    assert.equal(freshnessMs('public, max-age=120', '20'), 100_000);
    assert.equal(freshnessMs(['public', 'max-age=30'], undefined), 30_000);
    assert.equal(freshnessMs('max-age=999999999', undefined), 24 * 60 * MINUTE);
    assert.equal(freshnessMs('max-age=0', undefined), 0);
    assert.equal(freshnessMs('max-age=600, no-store', undefined), 0);
    assert.equal(freshnessMs('no-cache', undefined), 0);
  });
});

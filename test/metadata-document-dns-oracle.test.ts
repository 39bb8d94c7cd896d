/**
 * DESIGN.md §7 (rules added after the third outside review): what the fetcher of metadata documents says to a person
 * never names a resolved address or a resolver error (those go to the log), and a host that resolves only to
 * non-public addresses gets the same words as one that does not resolve, so the /authorize error page is no DNS
 * oracle for internal names. Without allow_private_addresses. Nothing leaves loopback: `localhost` comes from
 * /etc/hosts and is refused before any connection; `.invalid` names are answered "not found" here, as RFC 6761 §6.4
 * asks every resolver to, instead of asking this machine's (non-loopback) name server.
 */
import assert from 'node:assert/strict';
import { lookup as dnsLookup } from 'node:dns';
import { Writable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../src/app.js';
import { loadSigningKeys } from './helpers/keys.js';
import { MetadataDocuments } from '../src/clients/metadata-document.js';
import { MemoryStore } from '../src/store/memory.js';
import { authorizeUrl, pkce, testConfig } from './helpers/app.js';

/** node:dns lookup, except that `.invalid` names fail at once with ENOTFOUND (RFC 6761 §6.4), never reaching a name server. */
const offlineLookup = ((hostname: string, options: unknown, callback: (...args: unknown[]) => void) => {
  if (hostname.endsWith('.invalid')) {
    const error = Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND', hostname });
    process.nextTick(() => callback(error, []));
    return;
  }
  dnsLookup(hostname, options as never, callback as never);
}) as typeof dnsLookup;

const PRIVATE = 'https://localhost/pinpoint-client.json';
const UNRESOLVABLE = 'https://no-such-host.pinpoint-test.invalid/pinpoint-client.json';
const LITERAL = 'https://10.0.0.5/pinpoint-client.json';

/** The pino lines written during the test, parsed. */
const logLines: Record<string, unknown>[] = [];
const logger = pino(
  { level: 'info' },
  new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString('utf8').split('\n').filter(Boolean)) logLines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  }),
);

function authorize(app: FastifyInstance, clientId: string) {
  return app.inject({
    url: authorizeUrl([
      ['response_type', 'code'],
      ['client_id', clientId],
      ['redirect_uri', 'http://127.0.0.1:5555/cb'],
      ['scope', 'openid'],
      ['state', 'st'],
      ['code_challenge', pkce().challenge],
      ['code_challenge_method', 'S256'],
    ]),
  });
}

/** The page with the client_id it echoes taken out: what remains must not depend on how the host resolved. */
const withoutClientId = (body: string, clientId: string): string => body.replaceAll(clientId, 'CLIENT_ID');

describe('the /authorize error page for a metadata document host that is private or does not resolve', () => {
  let app: FastifyInstance;
  let documents: MetadataDocuments;
  before(async () => {
    const config = await testConfig({
      dynamicClients: {
        audience: ['https://mcp.example.org/mcp'],
        metadataDocuments: true,
        registration: 'off',
        scopes: ['openid', 'profile', 'mcp'],
        refreshReuseGraceMs: 0,
        allowPrivateAddresses: false,
      },
    });
    documents = new MetadataDocuments({ allowPrivateAddresses: false, lookup: offlineLookup, log: logger, timeoutMs: 2000 });
    const store = new MemoryStore();
    ({ app } = await buildApp({ config, store, keys: await loadSigningKeys(store), documents }));
    await app.ready();
  });
  after(async () => {
    await app.close();
    await documents.close();
  });

  test('a localhost host, an unresolvable .invalid host and a private IP literal get the same words, naming no address or resolver error', async () => {
    const pages = new Map<string, string>();
    for (const clientId of [PRIVATE, UNRESOLVABLE, LITERAL]) {
      const response = await authorize(app, clientId);
      assert.equal(response.statusCode, 400, response.body.slice(0, 300));
      assert.equal(response.headers.location, undefined);
      assert.match(response.body, /could not be fetched: its host could not be reached/);
      pages.set(clientId, withoutClientId(response.body, clientId));
    }
    assert.equal(pages.get(PRIVATE), pages.get(UNRESOLVABLE), 'a private host and a host that does not resolve read the same');
    assert.equal(pages.get(LITERAL), pages.get(UNRESOLVABLE));
    for (const page of pages.values()) {
      assert.doesNotMatch(page, /127\.0\.0\.1|::1|10\.0\.0\.5|resolves|ENOTFOUND|getaddrinfo|EAI_|loopback|private/i);
    }
    // The same again, from the failure cache: still the same words.
    assert.equal(withoutClientId((await authorize(app, PRIVATE)).body, PRIVATE), pages.get(UNRESOLVABLE));
  });

  test('the detail (the resolved address, the resolver error) goes to the log at warn, bounded', async () => {
    const [privateHost, unresolvable, literal] = [PRIVATE, UNRESOLVABLE, LITERAL].map((url) => url.replace('.json', '-logged.json')) as [string, string, string];
    const long = `https://localhost/${'p'.repeat(600)}.json`;
    for (const clientId of [privateHost, unresolvable, literal, long]) assert.equal((await authorize(app, clientId)).statusCode, 400);
    const failures = logLines.filter((line) => line['event'] === 'metadata_document_fetch');
    const about = (clientId: string) => failures.find((line) => line['client_id'] === clientId);
    assert.equal(about(privateHost)?.['level'], 40, 'warn');
    assert.match(String(about(privateHost)?.['detail']), /resolves to (127\.0\.0\.1|::1)/);
    assert.match(String(about(unresolvable)?.['detail']), /ENOTFOUND/);
    assert.match(String(about(literal)?.['detail']), /resolves to 10\.0\.0\.5/);
    const bounded = failures.find((line) => String(line['client_id']).startsWith('https://localhost/ppp'));
    assert.ok(bounded, 'the long client_id was logged');
    assert.ok(String(bounded['client_id']).length <= 257, 'cut to 256 characters');
  });
});

/**
 * examples/mcp-server with Pinpoint and the MCP SDK's own client: the SDK finds Pinpoint through the example's RFC 9728
 * metadata, registers (RFC 7591) or names a client ID metadata document served over HTTPS on loopback, sends a
 * person through sign-in and consent in a real headless Chromium, calls the example's tool, and refreshes.
 * Also pins which `resource` the SDK sends for a given MCP server URL (what operators write in the audience).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { decodeJwt } from 'jose';
import { chromium, type Browser } from 'playwright-core';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { auth, UnauthorizedError, type OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js';
import { PASSWORD } from './helpers/app.js';
import { freePort, killAll, removeDeployment, type Deployment, type PinpointProcess } from './helpers/process.js';
// A self-signed certificate for 127.0.0.1, its own CA: NODE_EXTRA_CA_CERTS points at it.
import { makeCertificate } from './helpers/https-server.js';
import {
  BrowserAuthProvider,
  closeServer,
  DocumentServer,
  ExampleServer,
  LoopbackCallback,
  recordingFetch,
  RefreshBarrier,
  startPinpointWith,
  writeDynamicDeployment,
  type SeenRequest,
} from './helpers/mcp.js';

const CHROMIUM = '/usr/bin/chromium';
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-quic', '--no-first-run', '--disable-component-update', '--disable-sync'];
const ARTIFACTS = join(import.meta.dirname, 'artifacts');
const STEP_TIMEOUT_MS = 10_000;

function missingPrerequisite(): string | false {
  if (!existsSync(CHROMIUM)) return `no Chromium at ${CHROMIUM} (apt-get install chromium)`;
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore', timeout: 5000 });
  } catch {
    return 'openssl is not available to make the metadata document server a certificate';
  }
  return false;
}
const skip = missingPrerequisite();
if (skip !== false) console.log(`# MCP tests with Pinpoint skipped: ${skip}`);

// --- What the SDK sends as `resource`: auth() against canned metadata, no network ---------------------------------

/** The `resource` of the authorization URL the SDK builds for `serverUrl` when the server's RFC 9728 metadata says `published`. */
async function resourceSent(serverUrl: string, published: string | undefined): Promise<string | null> {
  const json = (body: unknown): Response => new Response(JSON.stringify(body), { status: 200, headers: { 'content-type': 'application/json' } });
  const fetchFn: typeof fetch = async (input) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    if (url.pathname.startsWith('/.well-known/oauth-protected-resource')) {
      return published === undefined ? new Response('', { status: 404 }) : json({ resource: published, authorization_servers: ['https://auth.example.org'] });
    }
    if (url.pathname === '/.well-known/oauth-authorization-server') {
      const issuer = url.origin;
      return json({
        issuer,
        authorization_endpoint: `${issuer}/authorize`,
        token_endpoint: `${issuer}/token`,
        response_types_supported: ['code'],
        code_challenge_methods_supported: ['S256'],
        client_id_metadata_document_supported: true,
      });
    }
    return new Response('', { status: 404 });
  };
  let authorizationUrl: URL | undefined;
  let client: Parameters<NonNullable<OAuthClientProvider['saveClientInformation']>>[0] | undefined;
  const provider: OAuthClientProvider = {
    redirectUrl: 'http://127.0.0.1:33418/callback',
    clientMetadataUrl: 'https://host.example/client.json',
    clientMetadata: { redirect_uris: ['http://127.0.0.1:33418/callback'], token_endpoint_auth_method: 'none' },
    clientInformation: () => client,
    saveClientInformation: (information) => void (client = information),
    tokens: () => undefined,
    saveTokens: () => undefined,
    redirectToAuthorization: (url) => void (authorizationUrl = url),
    saveCodeVerifier: () => undefined,
    codeVerifier: () => 'unused',
  };
  assert.equal(await auth(provider, { serverUrl, fetchFn }), 'REDIRECT');
  assert.ok(authorizationUrl);
  return authorizationUrl.searchParams.get('resource');
}

describe('the resource the MCP SDK sends', () => {
  test('is the resource of the MCP server’s protected-resource metadata, verbatim', { timeout: 10_000 }, async () => {
    assert.equal(await resourceSent('https://mcp.example.org/mcp', 'https://mcp.example.org/mcp'), 'https://mcp.example.org/mcp');
    assert.equal(await resourceSent('https://mcp.example.org/mcp/', 'https://mcp.example.org/mcp/'), 'https://mcp.example.org/mcp/');
    // A metadata resource that is a path prefix of the URL the host was given is accepted, and sent as published.
    assert.equal(await resourceSent('https://mcp.example.org/mcp/', 'https://mcp.example.org/mcp'), 'https://mcp.example.org/mcp');
    assert.equal(await resourceSent('https://mcp.example.org/mcp', 'https://mcp.example.org'), 'https://mcp.example.org');
    // Not normalised: a bare origin keeps its missing "/" (SDK 1.31 and later; 1.30 and earlier sent new URL(resource).href).
    assert.equal(await resourceSent('https://mcp.example.org', 'https://mcp.example.org'), 'https://mcp.example.org');
  });

  test('is refused when the metadata names a resource the URL is not under, e.g. only by a trailing /', { timeout: 10_000 }, async () => {
    await assert.rejects(resourceSent('https://mcp.example.org/mcp', 'https://mcp.example.org/mcp/'), /does not match expected/);
    await assert.rejects(resourceSent('https://mcp.example.org/mcp', 'https://other.example.org/mcp'), /does not match expected/);
  });

  test('is not sent at all when the MCP server has no protected-resource metadata', { timeout: 10_000 }, async () => {
    assert.equal(await resourceSent('https://mcp.example.org/mcp', undefined), null);
  });
});

// --- The example MCP server, Pinpoint and the SDK client, through a real browser -----------------------------------

interface WhoAmI {
  sub?: string;
  client_id?: string;
  scope?: string;
  aud?: string | string[];
}

describe('the example MCP server with Pinpoint and the MCP SDK client', { skip }, () => {
  let folder = '';
  let deployment: Deployment | undefined;
  let pinpoint: PinpointProcess;
  let example: ExampleServer | undefined;
  let documents: DocumentServer | undefined;
  let callback: LoopbackCallback | undefined;
  let browser: Browser | undefined;
  let mcpUrl = '';
  let failed = false;

  before(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    folder = await mkdtemp(join(tmpdir(), 'pinpoint-mcp-tls-'));
    const certificate = await makeCertificate(folder);
    documents = await new DocumentServer(certificate).start();
    callback = await LoopbackCallback.start();
    const mcpPort = await freePort();
    mcpUrl = `http://127.0.0.1:${mcpPort}/mcp`;
    deployment = await writeDynamicDeployment({ port: await freePort(), audience: [mcpUrl] });
    // Pinpoint trusts the test's certificate the way an operator would trust a private CA.
    pinpoint = await startPinpointWith(deployment, { NODE_EXTRA_CA_CERTS: certificate.certFile });
    example = await ExampleServer.start({ PINPOINT_ISSUER: pinpoint.baseUrl, MCP_PORT: String(mcpPort), MCP_URL: mcpUrl });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, timeout: 20_000 });
  });

  after(async () => {
    await registered?.client.close();
    await browser?.close();
    await example?.stop();
    await killAll();
    await closeServer(documents?.server);
    await closeServer(callback?.server);
    if (failed && pinpoint !== undefined) console.log(`# pinpoint output:\n${pinpoint.output.split('\n').slice(-40).join('\n')}`);
    if (failed && example !== undefined) console.log(`# example output:\n${example.output.join('\n')}`);
    await removeDeployment(deployment);
    if (folder !== '') await rm(folder, { recursive: true, force: true });
  });

  /** Runs `body`, noting a failure so `after` prints the servers' output. */
  function step(name: string, body: () => Promise<void>): void {
    test(name, { timeout: 60_000 }, async () => {
      try {
        await body();
      } catch (error) {
        failed = true;
        throw error;
      }
    });
  }

  /**
   * A person in a fresh browser: the sign-in form, then the consent page (checked for what it must name; `consent`
   * undefined: consent is remembered and no page may come), then back at the host's `callbackUrl`.
   */
  function signInAndConsent(callbackUrl: string, consent: { names: readonly string[]; shot: string } | undefined): (url: URL) => Promise<void> {
    return async (url) => {
      assert.ok(browser);
      const context = await browser.newContext();
      context.setDefaultTimeout(STEP_TIMEOUT_MS);
      await context.route((target) => target.hostname !== '127.0.0.1', (route) => route.abort());
      try {
        const page = await context.newPage();
        await page.goto(url.href);
        let consented = false;
        for (let hop = 0; hop < 4 && !page.url().startsWith(callbackUrl); hop += 1) {
          const here = page.url();
          if ((await page.locator('input[name=password]').count()) > 0) {
            await page.getByLabel('Username').fill('alice');
            await page.getByLabel('Password').fill(PASSWORD);
            await Promise.all([page.waitForURL((next) => next.href !== here), page.click('button[type=submit]')]);
          } else if ((await page.getByRole('button', { name: /allow/i }).count()) > 0) {
            assert.ok(consent, `consent was asked again although it is remembered:\n${await page.locator('body').innerText()}`);
            const text = await page.locator('body').innerText();
            for (const expected of consent.names) assert.ok(text.includes(expected), `the consent page does not name ${expected}:\n${text}`);
            await page.screenshot({ path: join(ARTIFACTS, `${consent.shot}.png`), fullPage: true });
            await Promise.all([page.waitForURL((next) => next.href.startsWith(callbackUrl)), page.getByRole('button', { name: /allow/i }).click()]);
            consented = true;
          } else {
            throw new Error(`neither a sign-in form nor a consent page at ${here}:\n${await page.locator('body').innerText()}`);
          }
        }
        assert.ok(page.url().startsWith(callbackUrl), `the browser did not reach the host's callback; it is at ${page.url()}`);
        assert.equal(consented, consent !== undefined, 'a dynamic client gets a consent page unless it is remembered');
      } finally {
        await context.close();
      }
    };
  }

  /** What an MCP host does: connect, get 401, sign the person in, finish with the code, connect again. */
  async function connectThroughSignIn(provider: BrowserAuthProvider, seen: SeenRequest[], callback: LoopbackCallback, barrier?: RefreshBarrier): Promise<Client> {
    const arrivals = callback.arrivals.length;
    const first = new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: provider, fetch: recordingFetch(seen) });
    await assert.rejects(new Client({ name: 'pinpoint-test-host', version: '1.0.0' }).connect(first), UnauthorizedError);
    const landed = await callback.next(arrivals);
    assert.equal(landed.searchParams.get('error'), null, `the authorization failed: ${landed.search}`);
    assert.equal(landed.searchParams.get('state'), provider.lastState);
    assert.equal(landed.searchParams.get('iss'), pinpoint.baseUrl);
    const code = landed.searchParams.get('code');
    assert.ok(code, landed.href);
    await first.finishAuth(code);
    await first.close();
    const client = new Client({ name: 'pinpoint-test-host', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: provider, fetch: recordingFetch(seen, barrier) }));
    return client;
  }

  async function whoami(client: Client): Promise<WhoAmI> {
    const result = await client.callTool({ name: 'whoami', arguments: {} });
    const content = result.content as { type: string; text?: string }[];
    assert.equal(content[0]?.type, 'text');
    return JSON.parse(content[0]?.text ?? '{}') as WhoAmI;
  }

  /** The tool answers for alice, for this MCP server; the SDK asked for exactly the MCP server URL everywhere. */
  async function callAndRefresh(provider: BrowserAuthProvider, client: Client, seen: SeenRequest[]): Promise<void> {
    const answer = await whoami(client);
    assert.equal(answer.sub, 'alice');
    assert.equal(answer.aud, mcpUrl);
    assert.equal(answer.scope, 'mcp');
    const tokens = provider.tokens();
    assert.ok(tokens?.refresh_token, 'dynamic_clients.refresh_lifetime gives refresh tokens');
    assert.equal(decodeJwt(tokens.access_token).aud, mcpUrl, 'aud is the MCP server URL exactly');
    const authorization = provider.authorizationUrls.at(-1);
    assert.equal(authorization?.searchParams.get('resource'), mcpUrl);
    const exchange = seen.find((request) => request.form?.get('grant_type') === 'authorization_code');
    assert.equal(exchange?.form?.get('resource'), mcpUrl);
    assert.equal(exchange?.status, 200);
    console.log(`# the MCP SDK sent resource=${authorization?.searchParams.get('resource')} for the server URL ${mcpUrl}`);

    // A token the server refuses (as an expired one would be): 401, the SDK refreshes by itself and calls again.
    provider.spoilAccessToken();
    const saved = provider.savedTokens.length;
    const again = await whoami(client);
    assert.equal(again.sub, 'alice');
    assert.equal(again.aud, mcpUrl);
    const refresh = seen.filter((request) => request.form?.get('grant_type') === 'refresh_token');
    assert.equal(refresh.length, 1, 'one refresh');
    assert.equal(refresh[0]?.status, 200);
    assert.equal(refresh[0]?.form?.get('resource'), mcpUrl);
    assert.equal(provider.savedTokens.length, saved + 1);
    const refreshed = provider.tokens();
    assert.ok(refreshed?.refresh_token);
    assert.notEqual(refreshed.refresh_token, tokens.refresh_token, 'the refresh token rotates');
    assert.equal(decodeJwt(refreshed.access_token).aud, mcpUrl);
  }

  step('Pinpoint advertises registration and client ID metadata documents; the example names Pinpoint and asks for a token', async () => {
    const metadata = (await (await fetch(`${pinpoint.baseUrl}/.well-known/oauth-authorization-server`)).json()) as Record<string, unknown>;
    assert.equal(metadata.registration_endpoint, `${pinpoint.baseUrl}/register`);
    assert.equal(metadata.client_id_metadata_document_supported, true);

    const resourceMetadataUrl = `${new URL(mcpUrl).origin}/.well-known/oauth-protected-resource/mcp`;
    for (const where of [resourceMetadataUrl, `${new URL(mcpUrl).origin}/.well-known/oauth-protected-resource`]) {
      const published = (await (await fetch(where)).json()) as Record<string, unknown>;
      assert.equal(published.resource, mcpUrl, where);
      assert.deepEqual(published.authorization_servers, [pinpoint.baseUrl], where);
    }
    const refused = await fetch(mcpUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    await refused.arrayBuffer();
    assert.equal(refused.status, 401);
    assert.match(refused.headers.get('www-authenticate') ?? '', new RegExp(`^Bearer .*resource_metadata="${resourceMetadataUrl}"`));
  });

  /** The registered host of (1), kept for the steps after it as a host keeps its registration across runs. */
  let registered: { provider: BrowserAuthProvider; client: Client; seen: SeenRequest[]; barrier: RefreshBarrier } | undefined;

  step('(1) dynamic registration: the SDK registers, the person signs in and consents, the tool answers, the SDK refreshes', async () => {
    assert.ok(callback);
    const seen: SeenRequest[] = [];
    const name = 'Pinpoint MCP test host';
    const provider = new BrowserAuthProvider(callback.url, name, signInAndConsent(callback.url, { names: [name, mcpUrl], shot: 'mcp-consent-registered' }));
    const barrier = new RefreshBarrier();
    const client = await connectThroughSignIn(provider, seen, callback, barrier);
    registered = { provider, client, seen, barrier };
    const registration = seen.find((request) => request.method === 'POST' && request.url.href === `${pinpoint.baseUrl}/register`);
    assert.equal(registration?.status, 201, 'the SDK registered at the registration_endpoint');
    const clientId = provider.clientInformation()?.client_id;
    assert.ok(clientId !== undefined && !clientId.startsWith('https://'));
    assert.equal(provider.authorizationUrls[0]?.searchParams.get('client_id'), clientId);
    await callAndRefresh(provider, client, seen);
    assert.equal((await whoami(client)).client_id, clientId);
  });

  step('(1b) two calls refused at once: the SDK refreshes twice with one refresh token, both within refresh_reuse_grace succeed', async () => {
    assert.ok(registered, 'needs (1)');
    const { provider, client, seen, barrier } = registered;
    const before = seen.filter((request) => request.form?.get('grant_type') === 'refresh_token').length;
    provider.spoilAccessToken();
    barrier.arm(2);
    const answers = await Promise.all([whoami(client), whoami(client)]);
    for (const answer of answers) assert.equal(answer.sub, 'alice');
    const refreshes = seen.filter((request) => request.form?.get('grant_type') === 'refresh_token').slice(before);
    assert.equal(refreshes.length, 2, 'each refused call refreshed');
    assert.equal(refreshes[0]?.form?.get('refresh_token'), refreshes[1]?.form?.get('refresh_token'), 'with the same refresh token');
    assert.deepEqual(refreshes.map((request) => request.status), [200, 200]);
    // The grant was not revoked: the refresh token the SDK kept still refreshes.
    provider.spoilAccessToken();
    assert.equal((await whoami(client)).sub, 'alice');
    assert.equal(seen.at(-2)?.form?.get('grant_type'), 'refresh_token');
    assert.equal(seen.at(-2)?.status, 200);
  });

  step('(1c) the next run of the host: same registration, another loopback port, consent remembered', async () => {
    assert.ok(registered, 'needs (1)');
    await registered.client.close();
    const elsewhere = await LoopbackCallback.start();
    try {
      assert.notEqual(elsewhere.url, registered.provider.callbackUrl);
      const seen: SeenRequest[] = [];
      const provider = new BrowserAuthProvider(elsewhere.url, 'Pinpoint MCP test host', signInAndConsent(elsewhere.url, undefined));
      const information = registered.provider.clientInformation();
      assert.ok(information);
      provider.saveClientInformation(information);
      const client = await connectThroughSignIn(provider, seen, elsewhere);
      try {
        assert.equal(seen.filter((request) => request.url.pathname === '/register').length, 0, 'no new registration');
        assert.equal(provider.authorizationUrls[0]?.searchParams.get('redirect_uri'), elsewhere.url);
        const answer = await whoami(client);
        assert.equal(answer.sub, 'alice');
        assert.equal(answer.client_id, information.client_id);
        assert.equal(answer.aud, mcpUrl);
      } finally {
        await client.close();
      }
    } finally {
      await closeServer(elsewhere.server);
    }
  });

  step('(2) client ID metadata document over HTTPS on loopback: no registration, sign-in, consent, the tool, a refresh', async () => {
    assert.ok(callback && documents);
    const path = '/mcp-host/client-metadata.json';
    const documentUrl = `${documents.origin}${path}`;
    const name = 'Pinpoint MCP test host (metadata document)';
    documents.documents.set(path, {
      client_id: documentUrl,
      client_name: name,
      // Without a port, as native hosts publish it: a dynamic client's loopback redirect URI matches on any port.
      redirect_uris: [`http://127.0.0.1${new URL(callback.url).pathname}`],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    });
    const seen: SeenRequest[] = [];
    const provider = new BrowserAuthProvider(callback.url, name, signInAndConsent(callback.url, { names: [name, new URL(documentUrl).host, mcpUrl], shot: 'mcp-consent-document' }), documentUrl);
    const client = await connectThroughSignIn(provider, seen, callback);
    try {
      assert.equal(seen.filter((request) => request.url.pathname === '/register').length, 0, 'no registration');
      assert.equal(provider.authorizationUrls[0]?.searchParams.get('client_id'), documentUrl);
      const fetched = documents.requests.filter((request) => request.path === path);
      assert.ok(fetched.length > 0, 'Pinpoint fetched the metadata document');
      assert.match(fetched[0]?.accept ?? '', /application\/json/);
      await callAndRefresh(provider, client, seen);
      assert.equal((await whoami(client)).client_id, documentUrl);
    } finally {
      await client.close();
    }
  });
});

/**
 * An MCP server protected by Pinpoint (copy it and change the tool).
 *
 *   PINPOINT_ISSUER=http://127.0.0.1:8080 MCP_URL=http://127.0.0.1:3000/mcp npx tsx examples/mcp-server/server.ts
 *
 * It listens on MCP_HOST (127.0.0.1) at MCP_PORT, by default the port of MCP_URL (3000 when MCP_URL has none).
 * - GET /.well-known/oauth-protected-resource/mcp (RFC 9728) tells MCP hosts which authorization server to ask and
 *   which `resource` to ask a token for: MCP_URL, exactly. Pinpoint's `dynamic_clients.audience` must hold that string.
 * - Every request to MCP_URL needs `Authorization: Bearer <access token>`; without a valid one the answer is 401 with
 *   `WWW-Authenticate: Bearer ..., resource_metadata="..."`, which starts the host's sign-in.
 * - A token is valid when Pinpoint signed it (its /jwks), it is an access token (typ at+jwt), it has not expired,
 *   its `aud` holds MCP_URL exactly and its scope holds MCP_SCOPE.
 */
import { createRemoteJWKSet, errors, jwtVerify } from 'jose';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { metadataHandler } from '@modelcontextprotocol/sdk/server/auth/handlers/metadata.js';
import { requireBearerAuth } from '@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js';
import { getOAuthProtectedResourceMetadataUrl } from '@modelcontextprotocol/sdk/server/auth/router.js';
import { InvalidTokenError } from '@modelcontextprotocol/sdk/server/auth/errors.js';
import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';

const ISSUER = process.env.PINPOINT_ISSUER ?? 'http://127.0.0.1:8080'; // Pinpoint's base_url, no trailing slash
const HOST = process.env.MCP_HOST ?? '127.0.0.1';
// The URL hosts are given, and this server's resource identifier: the audience entry tokens must carry.
const MCP_URL = process.env.MCP_URL ?? `http://127.0.0.1:${process.env.MCP_PORT ?? 3000}/mcp`;
// MCP_URL's own port unless MCP_PORT says otherwise; a URL without one (a proxy's https URL) leaves 3000.
const PORT = Number(process.env.MCP_PORT ?? (new URL(MCP_URL).port || 3000));
const SCOPE = process.env.MCP_SCOPE ?? 'mcp';

const jwks = createRemoteJWKSet(new URL(`${ISSUER}/jwks`));

/** Pinpoint's access tokens are JWTs: checked here against /jwks, no request to Pinpoint per call. */
async function verifyAccessToken(token: string): Promise<AuthInfo> {
  try {
    const { payload } = await jwtVerify(token, jwks, { issuer: ISSUER, audience: MCP_URL, typ: 'at+jwt' });
    return {
      token,
      clientId: String(payload.client_id),
      scopes: typeof payload.scope === 'string' ? payload.scope.split(' ') : [],
      ...(payload.exp !== undefined && { expiresAt: payload.exp }),
      resource: new URL(MCP_URL),
      extra: { sub: payload.sub, aud: payload.aud },
    };
  } catch (error) {
    // A bad, expired or foreign token is the client's problem (401); anything else (Pinpoint unreachable) is ours (500).
    if (error instanceof errors.JOSEError) throw new InvalidTokenError(error.message);
    throw error;
  }
}

/** A new MCP server per request (stateless Streamable HTTP), with one tool. */
function mcpServer(): McpServer {
  const server = new McpServer({ name: 'pinpoint-example', version: '1.0.0' });
  server.registerTool('whoami', { description: 'Who the access token was issued to, for what and with which scope' }, (extra) => {
    const auth = extra.authInfo;
    const answer = { sub: auth?.extra?.sub, client_id: auth?.clientId, scope: auth?.scopes.join(' '), aud: auth?.extra?.aud };
    return { content: [{ type: 'text', text: JSON.stringify(answer) }] };
  });
  return server;
}

const mcpPath = new URL(MCP_URL).pathname;
const resourceMetadataUrl = getOAuthProtectedResourceMetadataUrl(new URL(MCP_URL));
const resourceMetadata = {
  resource: MCP_URL, // the `resource` hosts send to Pinpoint, verbatim
  authorization_servers: [ISSUER],
  scopes_supported: [SCOPE],
  bearer_methods_supported: ['header'],
  resource_name: 'Pinpoint example MCP server',
};

// createMcpExpressApp checks the Host header (DNS rebinding protection) against the host of MCP_URL.
const app = createMcpExpressApp({ host: HOST, allowedHosts: [new URL(MCP_URL).hostname] });
app.use(new URL(resourceMetadataUrl).pathname, metadataHandler(resourceMetadata)); // where MCP hosts look first
app.use('/.well-known/oauth-protected-resource', metadataHandler(resourceMetadata)); // for clients that only try the root
const bearer = requireBearerAuth({ verifier: { verifyAccessToken }, requiredScopes: [SCOPE], resourceMetadataUrl });
app.post(mcpPath, bearer, async (req, res) => {
  const server = mcpServer();
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
  res.on('close', () => {
    void transport.close();
    void server.close();
  });
  await server.connect(transport);
  await transport.handleRequest(req, res, req.body);
});
// Stateless: no server-to-client stream (GET) and no session to end (DELETE).
app.all(mcpPath, (_req, res) => {
  res.status(405).set('allow', 'POST').json({ jsonrpc: '2.0', error: { code: -32000, message: 'Method not allowed.' }, id: null });
});

const listener = app.listen(PORT, HOST, (error) => {
  if (error) throw error;
  console.log(`MCP server at ${MCP_URL} (resource metadata ${resourceMetadataUrl}, authorization server ${ISSUER})`);
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => listener.close(() => process.exit(0)));

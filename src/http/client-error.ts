/**
 * Answers to requests Node's HTTP parser refuses (bad bytes in the URL or headers, a malformed request line):
 * 400 in the contract's shape with `Connection: close`, and the socket closed only after the answer is flushed
 * and what the client sent is drained, so a keep-alive client reads the answer instead of a reset (DESIGN.md §4).
 */
import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { bounded } from '../log.js';
import { errorPageHtml, RAW_PAGE_HEADERS } from './pages.js';
import { pathOf } from './params.js';

/** DESIGN.md §4: these answer JSON; every other path is a page. */
const API_PATHS = ['/token', '/par', '/device_authorization', '/revoke', '/introspect', '/register', '/userinfo', '/jwks', '/healthz', '/readyz'];

/** True for the contract's API paths under `basePath` (metadata under /.well-known/ included). */
export function isApiPath(path: string, basePath: string): boolean {
  if (path.startsWith('/.well-known/')) return true;
  if (!path.startsWith(basePath)) return false;
  const rest = path.slice(basePath.length);
  return API_PATHS.includes(rest) || rest.startsWith('/.well-known/');
}

/** How long a refused connection may keep sending before it is cut. */
const DRAIN_MS = 5000;

const STATUS: Record<string, { status: number; reason: string; description: string; outcome: string }> = {
  ERR_HTTP_REQUEST_TIMEOUT: { status: 408, reason: 'Request Timeout', description: 'the request took too long to arrive', outcome: 'request_timeout' },
  HPE_HEADER_OVERFLOW: { status: 431, reason: 'Request Header Fields Too Large', description: 'the request headers are too large', outcome: 'malformed_request' },
};
const MALFORMED = { status: 400, reason: 'Bad Request', description: 'the request is malformed', outcome: 'malformed_request' };

/** Where the access line of a refused request goes (the app's logger). */
export interface AccessLog {
  info(fields: Record<string, unknown>, message: string): void;
}

/**
 * The request each socket last started, for an error that comes after its headers were read (a body that takes too
 * long): the error then carries no bytes to read its path from. Weak, so a closed socket takes its entry along.
 */
export class RequestsBeingReceived {
  readonly #latest = new WeakMap<Socket, ServerResponse>();

  /** Notes the request `response` answers as its socket's latest (from onRequest: headers read, the body maybe not). */
  started(response: ServerResponse): void {
    this.#latest.set(response.req.socket, response);
  }

  /**
   * The request `socket` is still receiving the body of: its method and path, and whether it was answered already (a
   * refusal that needs no body, such as 415, goes out before the body is in).
   */
  receiving(socket: Socket): { method: string; path: string; answered: boolean } | undefined {
    const response = this.#latest.get(socket);
    if (response === undefined || response.req.complete) return undefined;
    return { method: response.req.method ?? '', path: pathOf(response.req.url ?? ''), answered: response.headersSent };
  }
}

/**
 * Fastify's clientErrorHandler for a server whose routes live under `basePath`. Like every answer, it names its
 * request (X-Request-Id) and writes one access line (DESIGN.md §10): the socket's address, no header being trusted.
 */
export function clientErrorHandler(options: {
  readonly basePath: string;
  readonly log: AccessLog;
  readonly requests: RequestsBeingReceived;
  /** Whether an address is a trusted proxy's: its refused requests are its clients', so they count against nobody. */
  readonly trusted: (address: string | undefined) => boolean;
  /** Counts a refused request against its address (DESIGN.md §4: malformed requests are failures too). */
  readonly countFailure: (address: string, status: number) => void;
  /** The HSTS header line every answer of an https issuer carries (DESIGN.md §7), or undefined. */
  readonly strictTransport: string | undefined;
}): (error: Error & { code?: string; rawPacket?: unknown }, socket: Socket) => void {
  const { basePath, log, requests } = options;
  // A socket answered here gets no second answer (nor access line) when the client then closes mid-request.
  const answered = new WeakSet<Socket>();
  return (error, socket) => {
    if (error.code === 'ECONNRESET' || socket.destroyed || answered.has(socket)) return;
    answered.add(socket);
    const received = requests.receiving(socket);
    // Its answer (and access line) went out already: a second answer would be read as the next request's.
    if (received?.answered === true) {
      socket.destroy();
      return;
    }
    const { status, reason, description, outcome } = STATUS[error.code ?? ''] ?? MALFORMED;
    // No header is believed here: the socket's address is the client's only when no trusted proxy sent it.
    const address = socket.remoteAddress;
    if (address !== undefined && !options.trusted(address)) options.countFailure(address, status);
    // The request line, when the parser got that far, says whether a page or an API was asked for; once the headers
    // were read (a body too slow to arrive), the request Fastify was given says it.
    // Node hands over the raw bytes as a Buffer (Fastify's type says otherwise).
    const raw = Buffer.isBuffer(error.rawPacket) ? error.rawPacket.toString('latin1', 0, 2048) : '';
    const path = received?.path ?? /^[A-Z]+ (\/[^ ?\r\n]*)/.exec(raw)?.[1] ?? '';
    const api = isApiPath(path, basePath);
    const body = api ? JSON.stringify({ error: 'invalid_request', error_description: description }) : errorPageHtml('invalid_request', description);
    const requestId = randomUUID();
    const headers = [
      ...(api ? ['Content-Type: application/json; charset=utf-8', 'Cache-Control: no-store'] : RAW_PAGE_HEADERS),
      ...(options.strictTransport === undefined ? [] : [options.strictTransport]),
      `X-Request-Id: ${requestId}`,
    ];
    const method = received?.method ?? /^([A-Z]{1,16}) /.exec(raw)?.[1];
    log.info({ reqId: requestId, ...(method !== undefined && { method }), path: bounded(path), status, address, outcome }, 'request');
    if (socket.writable) {
      socket.end(
        `HTTP/1.1 ${status} ${reason}\r\n${headers.join('\r\n')}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
    }
    // Closing with unread input makes the kernel send a reset that can overtake the answer: read it away first.
    socket.resume();
    socket.setTimeout(DRAIN_MS, () => socket.destroy());
  };
}

/**
 * Answers to requests Node's HTTP parser refuses (bad bytes in the URL or headers, a malformed request line):
 * 400 in the contract's shape with `Connection: close`, and the socket closed only after the answer is flushed
 * and what the client sent is drained, so a keep-alive client reads the answer instead of a reset (DESIGN.md §4).
 */
import { randomUUID } from 'node:crypto';
import type { Socket } from 'node:net';
import { bounded } from '../log.js';
import { errorPageHtml, RAW_PAGE_HEADERS } from './pages.js';

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

const STATUS: Record<string, { status: number; reason: string; description: string }> = {
  ERR_HTTP_REQUEST_TIMEOUT: { status: 408, reason: 'Request Timeout', description: 'the request took too long to arrive' },
  HPE_HEADER_OVERFLOW: { status: 431, reason: 'Request Header Fields Too Large', description: 'the request headers are too large' },
};

/** Where the access line of a refused request goes (the app's logger). */
export interface AccessLog {
  info(fields: Record<string, unknown>, message: string): void;
}

/**
 * Fastify's clientErrorHandler for a server whose routes live under `basePath`. Like every answer, it names its
 * request (X-Request-Id) and writes one access line (DESIGN.md §10): the socket's address, no header being trusted.
 */
export function clientErrorHandler(basePath: string, log: AccessLog): (error: Error & { code?: string; rawPacket?: unknown }, socket: Socket) => void {
  return (error, socket) => {
    if (error.code === 'ECONNRESET' || socket.destroyed) return;
    const { status, reason, description } = STATUS[error.code ?? ''] ?? { status: 400, reason: 'Bad Request', description: 'the request is malformed' };
    // The request line, when the parser got that far, says whether a page or an API was asked for.
    // Node hands over the raw bytes as a Buffer (Fastify's type says otherwise).
    const raw = Buffer.isBuffer(error.rawPacket) ? error.rawPacket.toString('latin1', 0, 2048) : '';
    const path = /^[A-Z]+ (\/[^ ?\r\n]*)/.exec(raw)?.[1] ?? '';
    const api = isApiPath(path, basePath);
    const body = api ? JSON.stringify({ error: 'invalid_request', error_description: description }) : errorPageHtml('invalid_request', description);
    const requestId = randomUUID();
    const headers = [...(api ? ['Content-Type: application/json; charset=utf-8', 'Cache-Control: no-store'] : RAW_PAGE_HEADERS), `X-Request-Id: ${requestId}`];
    const method = /^([A-Z]{1,16}) /.exec(raw)?.[1];
    log.info({ reqId: requestId, ...(method !== undefined && { method }), path: bounded(path), status, address: socket.remoteAddress, outcome: 'malformed_request' }, 'request');
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

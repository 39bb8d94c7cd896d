/**
 * How a serving process lets go of its connections when it stops, refusing no request (DESIGN.md §11): it stops
 * accepting, answers every request with `Connection: close` so that clients stop reusing their connections, and
 * closes a connection only once nothing has arrived on it for a quiet moment, or when the drain's deadline passes.
 * http.Server#close closes every idle keep-alive connection at once instead, and so resets the request a client is
 * sending on one at that instant (an outside audit: 3-5 of 14,000 keep-alive requests per reload).
 */
import type { Server, ServerResponse } from 'node:http';
import { Server as NetServer, type Socket } from 'node:net';
import { Server as TlsServer } from 'node:tls';

/**
 * A connection quiet this long while draining is closed. Measured: a busy keep-alive connection here is quiet at most
 * 74 ms between an answer and the next request (p99.9 10 ms, 40,000 requests); a client across an ocean adds its
 * round trip (up to about 300 ms).
 */
export const QUIET_MS = 1_000;
/** A drain that still has connections after this closes them, whatever they carry: a hung request holds no stop. */
export const DRAIN_DEADLINE_MS = 25_000;
/** How often a drain looks for quiet connections; a connection is closed within QUIET_MS and this of its last byte. */
const CHECK_EVERY_MS = 100;

/** One open connection, as HTTP sees it (for TLS, the decrypted socket). */
interface Connection {
  readonly socket: Socket;
  /** Answers begun on it and not yet finished. */
  readonly answering: Set<ServerResponse>;
  /** socket.bytesRead when its last answer was finished: more is another request arriving. */
  bytesAnswered: number;
  /** socket.bytesRead when last looked at. */
  bytesSeen: number;
  quietSince: number;
}

export interface DrainTimes {
  readonly quietMs: number;
  readonly deadlineMs: number;
}

/** Connections of one server that can be drained. */
export interface DrainableConnections {
  /** Stops accepting, then closes each connection as described above; resolves once none is left. */
  drain(): Promise<void>;
}

/** Follows the connections of `server` from now on (call it before `listen`), so that they can be drained. */
export function drainableConnections(server: Server, times: DrainTimes = { quietMs: QUIET_MS, deadlineMs: DRAIN_DEADLINE_MS }): DrainableConnections {
  const connections = new Map<Socket, Connection>();
  // Every accepted socket, TLS handshakes included, for the deadline.
  const accepted = new Set<Socket>();
  let draining = false;
  const closeAfterAnswer = (response: ServerResponse): void => {
    if (!response.headersSent) response.setHeader('Connection', 'close');
  };
  server.on('connection', (socket: Socket) => {
    accepted.add(socket);
    socket.once('close', () => accepted.delete(socket));
  });
  server.on(server instanceof TlsServer ? 'secureConnection' : 'connection', (socket: Socket) => {
    connections.set(socket, { socket, answering: new Set(), bytesAnswered: 0, bytesSeen: 0, quietSince: performance.now() });
    socket.once('close', () => connections.delete(socket));
  });
  // First of the request listeners: a route that answers at once must already see the header.
  server.prependListener('request', (request, response: ServerResponse) => {
    if (draining) closeAfterAnswer(response);
    const connection = connections.get(request.socket);
    if (connection === undefined) return;
    connection.answering.add(response);
    // Emitted once: `on` spares the wrapper `once` makes, on every request.
    response.on('close', () => {
      connection.answering.delete(response);
      connection.bytesAnswered = connection.socket.bytesRead;
      connection.quietSince = performance.now();
    });
  });

  return {
    drain: () =>
      new Promise<void>((resolve) => {
        draining = true;
        const startedAt = performance.now();
        for (const connection of connections.values()) {
          // A client may be sending on it right now: its quiet moment starts with the drain.
          connection.quietSince = startedAt;
          for (const response of connection.answering) closeAfterAnswer(response);
        }
        const closeQuietOnes = (): void => {
          const now = performance.now();
          for (const connection of connections.values()) {
            const { socket } = connection;
            if (connection.answering.size > 0 || socket.bytesRead !== connection.bytesSeen) {
              connection.bytesSeen = socket.bytesRead;
              connection.quietSince = now;
            }
            // A request still arriving, however slowly, is for Node's own timeouts to end (headers, request, keep-alive).
            const arriving = socket.bytesRead > connection.bytesAnswered;
            if (!arriving && now - connection.quietSince >= times.quietMs) socket.destroy();
          }
        };
        const check = setInterval(closeQuietOnes, CHECK_EVERY_MS);
        const deadline = setTimeout(() => {
          for (const socket of accepted) socket.destroy();
        }, times.deadlineMs);
        // Emitted once the listener is closed and no accepted socket is left.
        server.once('close', () => {
          clearInterval(check);
          clearTimeout(deadline);
          resolve();
        });
        // Only the listener closes here: http.Server#close would also close every idle connection at once.
        NetServer.prototype.close.call(server);
      }),
  };
}

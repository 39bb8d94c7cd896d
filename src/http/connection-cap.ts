/**
 * At most `limits.address_connections` open connections per client address (an IPv6 /64 counts as one address,
 * as for every other limit): each idle connection holds memory for up to its timeout, so one address must not be
 * able to open thousands. A trusted proxy's connections carry many clients and are not counted. The counts live
 * only as long as their connections, so their memory is bounded by the connections open.
 */
import type { Server, Socket } from 'node:net';
import { limitedAddress } from './failure-limit.js';

export interface ConnectionCap {
  /** Connections one address may hold open at once. */
  readonly perAddress: number;
  /** Whether an address is a trusted proxy's (DESIGN.md §3): never capped. */
  readonly trusted: (address: string) => boolean;
  /** Told of each connection closed at once because its address holds `perAddress` already. */
  readonly refused: (address: string) => void;
}

/** Counts connections by address on `server` and closes, before any byte is read, one over the cap. */
export function capConnectionsPerAddress(server: Server, cap: ConnectionCap): void {
  const open = new Map<string, number>();
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress;
    if (address === undefined || cap.trusted(address)) return;
    const key = limitedAddress(address);
    const held = open.get(key) ?? 0;
    if (held >= cap.perAddress) {
      cap.refused(key);
      socket.destroy();
      return;
    }
    open.set(key, held + 1);
    socket.once('close', () => {
      const left = (open.get(key) ?? 1) - 1;
      if (left <= 0) open.delete(key);
      else open.set(key, left);
    });
  });
}

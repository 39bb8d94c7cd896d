/** A TCP relay in front of the test PostgreSQL, so an outage can be made without stopping the machine's server. */
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';

/** A TCP relay to PostgreSQL that can be cut (every connection dropped, port closed) and restored on the same port. */
export class Relay {
  #server: Server | undefined;
  readonly #sockets = new Set<Socket>();
  port = 0;

  constructor(private readonly target: { host: string; port: number }) {}

  async start(): Promise<void> {
    const server = createServer((inbound) => {
      const outbound = connect(this.target.port, this.target.host);
      for (const socket of [inbound, outbound]) {
        this.#sockets.add(socket);
        socket.on('error', () => undefined);
        socket.on('close', () => {
          this.#sockets.delete(socket);
          inbound.destroy();
          outbound.destroy();
        });
      }
      inbound.pipe(outbound).pipe(inbound);
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', resolve);
    });
    this.port = (server.address() as AddressInfo).port;
    this.#server = server;
  }

  async stop(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    for (const socket of this.#sockets) socket.destroy();
    if (server !== undefined) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /** `databaseUrl` with its host and port swapped for the relay's, so a client connects through it. */
  urlFor(databaseUrl: string): string {
    const viaRelay = new URL(databaseUrl);
    viaRelay.hostname = '127.0.0.1';
    viaRelay.port = String(this.port);
    return viaRelay.toString();
  }
}

/** A started relay to the PostgreSQL server `databaseUrl` names. */
export async function startRelay(databaseUrl: string): Promise<Relay> {
  const target = new URL(databaseUrl);
  const relay = new Relay({ host: target.hostname, port: Number(target.port || 5432) });
  await relay.start();
  return relay;
}

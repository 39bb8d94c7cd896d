/** One serving process (a worker, DESIGN.md §11): open the store, load keys, listen, keep house if asked, and close gracefully. */
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { buildApp } from './app.js';
import type { Config } from './config/types.js';
import { KeyRing } from './crypto/keys.js';
import { MetadataDocuments } from './clients/metadata-document.js';
import { drainableConnections } from './http/connection-drain.js';
import type { Metrics } from './http/metrics.js';
import type { LimiterLink } from './http/shared-limiter.js';
import { startHousekeeping } from './housekeeping.js';
import { openStore } from './store/open.js';

export interface ServerOptions {
  readonly logger: Logger;
  readonly metrics: Metrics;
  /** The certificate and key for tls mode "terminate", as the primary read them. */
  readonly https?: { readonly cert: Buffer; readonly key: Buffer };
  /** Shares limiter counts with the other workers (DESIGN.md §11). */
  readonly limiterLink?: LimiterLink;
  /** How many workers serve the config, this one included (DESIGN.md §11). */
  readonly workers?: number;
  /** Whether this server sweeps the store and writes the key_rotation audit line (one worker does); true by default. */
  readonly housekeeper?: boolean;
}

export interface RunningServer {
  readonly app: FastifyInstance;
  /** The store as the start line names it (no password). */
  readonly state: string;
  /** The published key ids at start. */
  readonly keyIds: readonly string[];
  /**
   * Stops accepting and drains the connections (connection-drain.ts: every request on them answered, each with
   * `Connection: close`), then lets go of the store and everything else.
   */
  close(): Promise<void>;
}

/** Starts serving `config` on its listen address; a server that cannot listen lets go of everything before it rejects. */
export async function startServer(config: Config, options: ServerOptions): Promise<RunningServer> {
  const { logger } = options;
  // The loader already warned about in-memory state; the store's own warnings are about connections.
  const store = await openStore(config.state, { warn: (message) => logger.warn(message) }).catch((error: unknown) => {
    // An outage carries the driver's error as its cause; anything else (a newer schema, a file that is no database,
    // a folder that cannot be made) says why itself.
    const reason = (error as Error).cause instanceof Error ? ((error as Error).cause as Error).message : (error as Error).message;
    throw new Error(`cannot open the state store (${describeState(config)}): ${reason}`);
  });
  const keys = await KeyRing.open(store);
  // DESIGN.md §9: client ID metadata documents are fetched only when dynamic_clients turns them on.
  const dynamic = config.dynamicClients;
  const documents = dynamic?.metadataDocuments === true ? new MetadataDocuments({ allowPrivateAddresses: dynamic.allowPrivateAddresses, log: logger }) : undefined;
  const { app } = await buildApp({
    config,
    store,
    keys,
    logger,
    metrics: options.metrics,
    ...(options.https !== undefined && { https: { cert: options.https.cert, key: options.https.key } }),
    ...(documents !== undefined && { documents }),
    ...(options.limiterLink !== undefined && { limiterLink: options.limiterLink }),
    ...(options.workers !== undefined && { workers: options.workers }),
  });

  const stopHousekeeping = startHousekeeping({ store, keys, logger, housekeeper: options.housekeeper ?? true });
  const connections = drainableConnections(app.server);
  const close = async (): Promise<void> => {
    stopHousekeeping();
    // Before app.close(), whose http.Server#close would close the idle keep-alive connections at once.
    await connections.drain();
    await app.close();
    await documents?.close();
    await store.close();
  };

  // DESIGN.md §11: a worker that starts later serves only once it counts what the serving ones count.
  const caughtUp = await options.limiterLink?.catchUp?.();
  if (caughtUp?.outcome === 'taken') logger.info({ from: caughtUp.giver, windows: caughtUp.windows }, 'failure counts taken over from a serving worker');
  else if (caughtUp !== undefined && caughtUp.outcome !== 'none serving') logger.warn({ outcome: caughtUp.outcome }, 'no failure counts taken over: this worker counts from zero');

  try {
    await app.listen({ host: config.listen.host, port: config.listen.port });
  } catch (error) {
    // A server that cannot listen must not live on half-open (key reloads, the store): its supervisor sees it gone.
    await close().catch(() => undefined);
    throw error;
  }
  return { app, state: store.description, keyIds: keys.current.jwks.keys.flatMap((key) => (key.kid === undefined ? [] : [key.kid])), close };
}

/** The store as the operator configured it, without a password: the store cannot name itself when it did not open. */
function describeState(config: Config): string {
  const state = config.state;
  if (state.kind === 'memory') return 'memory';
  if (state.kind === 'sqlite') return `sqlite ${state.path}`;
  const url = new URL(state.url);
  return `postgres ${url.hostname}:${url.port || '5432'}${url.pathname}`;
}

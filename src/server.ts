/** `pinpoint serve`: open the store, load keys, listen, sweep, and shut down gracefully. */
import { readFile } from 'node:fs/promises';
import { buildApp } from './app.js';
import type { Config } from './config/types.js';
import { MetadataDocuments } from './clients/metadata-document.js';
import { createMetrics, serveMetrics } from './http/metrics.js';
import { createLogger } from './log.js';
import { VERSION } from './version.js';
import { openStore } from './store/open.js';
import { KeyRing } from './crypto/keys.js';

/** How often expired state is swept (DESIGN.md §6). */
const SWEEP_INTERVAL_MS = 60_000;

export async function serve(config: Config, warnings: readonly string[]): Promise<void> {
  const logger = createLogger(config.logLevel);
  // DESIGN.md §2: the start line and the warnings are printed whatever log_level says, short of "silent".
  const announcer = config.logLevel === 'silent' ? logger : logger.child({}, { level: 'info' });
  for (const warning of warnings) announcer.warn(warning);
  // DESIGN.md §2: warnings are printed at once, not when the 4 KiB log buffer fills.
  logger.flush();
  // The loader already warned about in-memory state; the store's own warnings are about connections.
  const store = await openStore(config.state, { warn: (message) => logger.warn(message) }).catch((error: unknown) => {
    const cause = (error as Error).cause instanceof Error ? `: ${((error as Error).cause as Error).message}` : '';
    throw new Error(`cannot open the state store (${describeState(config)})${cause}`);
  });
  const keys = await KeyRing.open(store);
  keys.start(
    (error) => logger.warn({ err: { message: (error as Error).message } }, 'signing keys could not be re-read; the keys in use stay'),
    (change) => logger.info({ audit: true, event: 'key_rotation', ...change }, 'signing keys changed'),
  );
  const https =
    config.tls.mode === 'terminate' && config.tls.certFile !== undefined && config.tls.keyFile !== undefined
      ? { cert: await readFile(config.tls.certFile), key: await readFile(config.tls.keyFile) }
      : undefined;
  const metrics = createMetrics({ processMetrics: true });
  // DESIGN.md §9: client ID metadata documents are fetched only when dynamic_clients turns them on.
  const dynamic = config.dynamicClients;
  const documents = dynamic?.metadataDocuments === true ? new MetadataDocuments({ allowPrivateAddresses: dynamic.allowPrivateAddresses, log: logger }) : undefined;
  const { app } = await buildApp({ config, store, keys, logger, https, metrics, ...(documents !== undefined && { documents }) });
  // DESIGN.md §4: /metrics lives on its own listener, never on the public one.
  const metricsServer = config.metrics === undefined ? undefined : await serveMetrics(metrics, config.metrics.listen);

  const sweep = setInterval(() => {
    store.sweep(Date.now()).catch((error: unknown) => logger.warn({ err: { message: (error as Error).message } }, 'sweep failed'));
  }, SWEEP_INTERVAL_MS);
  sweep.unref();

  /** Lets go of everything serve opened; app.close() stops accepting and waits for in-flight requests, then the store can go. */
  const release = async (): Promise<void> => {
    clearInterval(sweep);
    keys.stop();
    await app.close();
    await new Promise<void>((resolve) => (metricsServer === undefined ? resolve() : metricsServer.close(() => resolve())));
    await documents?.close();
    await store.close();
  };

  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'stopping: finishing in-flight requests');
    release()
      .then(() => {
        logger.info('stopped');
        logger.flush();
        process.exit(0);
      })
      .catch((error: unknown) => {
        logger.error({ err: { message: (error as Error).message } }, 'error while stopping');
        logger.flush();
        process.exit(1);
      });
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));

  try {
    await app.listen({ host: config.listen.host, port: config.listen.port });
  } catch (error) {
    // A server that cannot listen must not live on half-open (metrics, key reloads): a supervisor then sees it gone.
    await release().catch(() => undefined);
    throw error;
  }
  announcer.info(
    {
      version: VERSION,
      issuer: config.baseUrl,
      listen: `${config.listen.host}:${config.listen.port}`,
      state: store.description,
      tls: config.tls.mode,
      keys: keys.current.jwks.keys.map((key) => key.kid),
      ...(config.metrics !== undefined && { metrics: `${config.metrics.listen.host}:${config.metrics.listen.port}` }),
    },
    'pinpoint is serving',
  );
  // The start line goes out at once; request logging stays asynchronous.
  logger.flush();
}

/** The store as the operator configured it, without a password. */
function describeState(config: Config): string {
  const state = config.state;
  if (state.kind === 'memory') return 'memory';
  if (state.kind === 'sqlite') return `sqlite ${state.path}`;
  const url = new URL(state.url);
  return `postgres ${url.hostname}:${url.port || '5432'}${url.pathname}`;
}

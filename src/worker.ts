/**
 * A cluster worker (DESIGN.md §11), started by the primary (supervisor.ts): serves the config the primary sends,
 * shares its limiter counts and metrics with it, and on `stop` (or its own SIGTERM/SIGINT) drains its connections
 * (every request on them answered), sends the primary its last figures and exits 0. It never reads the config file itself.
 */
import type { Logger } from 'pino';
import { deepFreeze } from './config/frozen.js';
import { answerMetricsRequests, createMetrics, type FiguresForPrimary } from './http/metrics.js';
import { workerLink } from './http/shared-limiter.js';
import { createLogger } from './log.js';
import { startServer, type RunningServer } from './server.js';
import { isPrimaryMessage, type StartMessage, type WorkerMessage } from './worker-protocol.js';

/** Sends to the primary; `then` runs once the message is written (or the channel is gone). */
function tell(message: WorkerMessage, then: () => void = () => undefined): void {
  if (!process.connected || process.send === undefined) return then();
  process.send(message, undefined, {}, () => then());
}

/** How long a stopped worker stays to refuse connections handed to it as it closed (node:cluster round-robin). */
const HANDOFF_GRACE_MS = 500;

let server: RunningServer | undefined;
let logger: Logger | undefined;
let figures: FiguresForPrimary | undefined;
let stopping = false;

function stop(reason: string): void {
  if (stopping) return;
  stopping = true;
  // Nothing served yet: nothing to finish.
  if (server === undefined) process.exit(0);
  logger?.info({ reason }, 'stopping: finishing in-flight requests');
  server
    .close()
    // What it counted since the primary last asked is not lost with it (DESIGN.md §11: metrics across workers).
    .then(() => figures?.sendLast())
    .then(
      () => {
        logger?.info('stopped');
        logger?.flush();
        // A connection the primary handed over just before it saw our listener close is still on its way: stay long
        // enough to refuse it, so the primary gives it to another worker instead of holding it unanswered.
        setTimeout(() => process.exit(0), HANDOFF_GRACE_MS);
      },
      (error: unknown) => {
        logger?.error({ err: { message: (error as Error).message } }, 'error while stopping');
        logger?.flush();
        process.exit(1);
      },
    );
}

async function begin(start: StartMessage): Promise<void> {
  const config = deepFreeze(start.config);
  logger = createLogger(config.logLevel);
  // Process figures only where something reads them: their event-loop monitor wakes the process about 100 times a second.
  const metrics = createMetrics({ processMetrics: config.metrics !== undefined, worker: String(start.slot) });
  figures = answerMetricsRequests(metrics.registry);
  const https = start.https === undefined ? undefined : { cert: Buffer.from(start.https.cert), key: Buffer.from(start.https.key) };
  try {
    server = await startServer(config, { logger, metrics, limiterLink: workerLink(), workers: start.workers, housekeeper: start.housekeeper === true, ...(https !== undefined && { https }) });
  } catch (error) {
    logger.flush();
    tell({ pinpoint: 'failed', message: error instanceof Error ? error.message : String(error) }, () => process.exit(1));
    return;
  }
  tell({ pinpoint: 'ready', state: server.state, keyIds: server.keyIds });
}

process.on('message', (message: unknown) => {
  if (!isPrimaryMessage(message)) return;
  if (message.pinpoint === 'stop') stop('asked by the primary');
  else if (server === undefined && !stopping) void begin(message);
});
process.once('SIGTERM', () => stop('SIGTERM'));
process.once('SIGINT', () => stop('SIGINT'));
tell({ pinpoint: 'hello' });

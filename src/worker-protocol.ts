/** What the primary and its workers say to each other over cluster IPC (DESIGN.md §11), besides limiter and metrics messages. */
import type { Config } from './config/types.js';

/** The primary's answer to `hello`: the validated config (structured clone, so no worker reads another file version). */
export interface StartMessage {
  readonly pinpoint: 'start';
  readonly config: Config;
  /** PEM text of tls mode "terminate", read by the primary with the config. */
  readonly https?: { readonly cert: string; readonly key: string };
  /** Which of the N workers this is (0..N-1): the `worker` label of its process metrics. */
  readonly slot: number;
  /** How many workers serve this config, for each one's share of the limits (DESIGN.md §11). */
  readonly workers: number;
  /** Whether this worker sweeps the store and writes the key_rotation audit line: one does, for the whole server. */
  readonly housekeeper: boolean;
}

/** Finish the requests in flight and exit 0. */
export interface StopMessage {
  readonly pinpoint: 'stop';
}

export type PrimaryMessage = StartMessage | StopMessage;

export type WorkerMessage =
  /** Listening for the primary's messages: send the config. */
  | { readonly pinpoint: 'hello' }
  /** Serving: the store and the key ids, for the start line. */
  | { readonly pinpoint: 'ready'; readonly state: string; readonly keyIds: readonly string[] }
  /** Could not start (the store, the listen address...): why, before it exits 1. */
  | { readonly pinpoint: 'failed'; readonly message: string };

const kindOf = (message: unknown): unknown => (typeof message === 'object' && message !== null ? (message as { pinpoint?: unknown }).pinpoint : undefined);

export const isPrimaryMessage = (message: unknown): message is PrimaryMessage => kindOf(message) === 'start' || kindOf(message) === 'stop';

export const isWorkerMessage = (message: unknown): message is WorkerMessage => ['hello', 'ready', 'failed'].includes(kindOf(message) as string);

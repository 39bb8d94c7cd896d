/** pino logger settings: JSON lines in 4 KiB batches, and nothing secret at any level (DESIGN.md §7, §10). */
import { fstatSync } from 'node:fs';
import pino, { type Logger } from 'pino';
import type { Config } from './config/types.js';

/** Values that are secrets wherever a log object carries them, at the top level or one level down. */
const SECRET_KEYS = ['password', 'client_secret', 'client_assertion', 'code', 'code_verifier', 'refresh_token', 'access_token', 'id_token', 'device_code', 'request_uri'] as const;
/** Header paths in pino's path syntax (brackets for the hyphenated name); a DPoP proof is a credential of its request. */
const SECRET_HEADERS = ['.authorization', '.cookie', '["set-cookie"]', '.dpop'] as const;

/**
 * pino's own redaction (compiled once): what routes log is chosen fields anyway; this is the net under them. Exact
 * paths only: a wildcard makes every line walk every key, which cost more CPU per request than the rest of the log.
 */
const REDACT_PATHS = [
  ...SECRET_KEYS,
  ...SECRET_HEADERS.map((header) => `headers${header}`),
  ...SECRET_HEADERS.map((header) => `req.headers${header}`),
];

/** At most this much of any text taken from a request reaches a log line (DESIGN.md §10). */
export const LOGGED_VALUE_LIMIT = 256;

/** Cuts attacker-chosen text to LOGGED_VALUE_LIMIT characters. */
export const bounded = (text: string | undefined): string | undefined =>
  text === undefined || text.length <= LOGGED_VALUE_LIMIT ? text : `${text.slice(0, LOGGED_VALUE_LIMIT)}…`;

/**
 * Errors are logged by kind and message only: never Node's `rawPacket` (the raw bytes of a request the HTTP parser
 * refused, Basic header and cookie included), never a body, never headers.
 */
function serializeError(error: unknown): Record<string, unknown> | unknown {
  if (typeof error !== 'object' || error === null) return error;
  const { name, message, code, statusCode, stack } = error as { name?: unknown; message?: unknown; code?: unknown; statusCode?: unknown; stack?: unknown };
  return {
    type: typeof name === 'string' ? name : 'Error',
    message: typeof message === 'string' ? bounded(message) : undefined,
    ...(typeof code === 'string' && { code }),
    ...(typeof statusCode === 'number' && { statusCode }),
    // Our own failures (500s) need the stack; a stack holds code locations, not request data.
    ...(typeof stack === 'string' && typeof statusCode !== 'number' && { stack }),
  };
}

/** A request as a log line may show it: method and path, never the query, headers or body. */
function serializeRequest(request: { method?: string; url?: string }): Record<string, unknown> {
  return { method: request.method, path: bounded(request.url?.split('?')[0]) };
}

/** A response as a log line may show it: the status only. */
function serializeResponse(reply: { statusCode?: number }): Record<string, unknown> {
  return { status: reply.statusCode };
}

/** Linux's PIPE_BUF: a write to a pipe up to this long is never interleaved with another process's. */
const PIPE_BUF = 4096;

/**
 * Whether log writes to `fd` are made on the event loop: yes for a regular file, whose write lands in the page cache at
 * once (a hop to libuv's thread pool costs more than the write, and competes with jose's signatures there); no for a
 * pipe, socket or terminal, whose reader can stall and must never stall the requests with it.
 */
export function writesSynchronously(fd: number): boolean {
  try {
    return fstatSync(fd).isFile();
  } catch {
    return false;
  }
}

/** The process's one stdout destination, shared by its loggers (one buffer, one exit flush). */
let stdout: pino.DestinationStream | undefined;

function stdoutDestination(): pino.DestinationStream {
  if (stdout !== undefined) return stdout;
  // Lines are written in 4 KiB batches under load (one write per batch, not per line), and at most 200 ms after they
  // happen when traffic is light (DESIGN.md §10: written as they happen, not held until the buffer fills). No write is
  // longer than PIPE_BUF, so the workers sharing one stdout pipe never tear each other's lines (POSIX: atomic writes).
  const sync = writesSynchronously(1);
  const stream = pino.destination({ dest: 1, sync, minLength: PIPE_BUF - 1, maxWrite: PIPE_BUF, periodicFlush: 200 });
  // pino flushes an asynchronous destination at exit; a synchronous one still holds up to a batch, so do it here.
  if (sync) {
    process.once('exit', () => {
      try {
        stream.flushSync();
      } catch {
        // Exiting anyway: a file that can no longer be written loses its last batch, not the exit code.
      }
    });
  }
  stdout = stream;
  return stream;
}

export function createLogger(level: Config['logLevel'], destination?: pino.DestinationStream): Logger {
  const stream = destination ?? stdoutDestination();
  return pino(
    {
      level,
      // DESIGN.md §11: every line names its process; pino's own base (pid, hostname) is replaced, so pid is named here.
      base: { service: 'pinpoint', pid: process.pid },
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      serializers: { err: serializeError, error: serializeError, req: serializeRequest, res: serializeResponse },
    },
    stream,
  );
}

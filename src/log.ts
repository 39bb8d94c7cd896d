/** pino logger settings: JSON lines, asynchronous writes, and nothing secret (DESIGN.md §7). */
import pino, { type Logger } from 'pino';
import type { Config } from './config/types.js';

const CENSOR = '[redacted]';

/** Keys blanked wherever they sit one level down (pino redact paths `*.password`, ...); routes log only chosen fields anyway. */
const SECRET_KEYS: readonly string[] = ['password', 'client_secret', 'code', 'code_verifier', 'refresh_token', 'access_token', 'id_token', 'device_code'];

/** Headers blanked in `headers` and `req.headers` (paths `headers.authorization`, `req.headers.cookie`, ...). */
const SECRET_HEADERS: readonly string[] = ['authorization', 'cookie'];

type Fields = Record<string, unknown>;

const isObject = (value: unknown): value is Fields => typeof value === 'object' && value !== null;

/** A shallow copy keeping the prototype, so the copy serialises as the original would. */
function copyOf(value: Fields): Fields {
  return Array.isArray(value) ? Object.assign([], value) : Object.assign(Object.create(Object.getPrototypeOf(value) as object | null) as Fields, value);
}

/** `value` with its own properties named in `keys` censored; a copy only when one is present. */
function censored(value: Fields, keys: readonly string[]): Fields {
  let copy: Fields | undefined;
  for (const key of keys) {
    if (!Object.hasOwn(value, key)) continue;
    copy ??= copyOf(value);
    copy[key] = CENSOR;
  }
  return copy ?? value;
}

/**
 * What pino's `redact` option did with the paths above, as a formatter of every line and every child's
 * bindings that copies nothing unless an object value holds one of the keys: pino's redact cost about
 * 6 µs of CPU per request (bench/RESULTS.md). The caller's objects are never changed.
 */
export function redactSecrets(fields: Fields): Fields {
  let copy: Fields | undefined;
  for (const key in fields) {
    const value = fields[key];
    // `err` is censored after pino's error serializer has run (createLogger), as redact did.
    if (key === 'err' || !Object.hasOwn(fields, key) || !isObject(value)) continue;
    let next = censored(value, SECRET_KEYS);
    if (key === 'headers') next = censored(next, SECRET_HEADERS);
    if (key === 'req' && isObject(next.headers)) {
      const headers = censored(next.headers, SECRET_HEADERS);
      if (headers !== next.headers) {
        if (next === value) next = copyOf(value);
        next.headers = headers;
      }
    }
    if (next !== value) (copy ??= { ...fields })[key] = next;
  }
  return copy ?? fields;
}

const serializeError = pino.stdSerializers.err;

type ChildFactory = (this: Logger, bindings: pino.Bindings, options?: pino.ChildLoggerOptions) => Logger;

export function createLogger(level: Config['logLevel'], destination?: pino.DestinationStream): Logger {
  const stream = destination ?? pino.destination({ dest: 1, sync: false, minLength: 4096 });
  const logger = pino(
    {
      level,
      base: { service: 'pinpoint' },
      formatters: { log: redactSecrets },
      serializers: { err: (error: unknown) => (isObject(error) ? censored(serializeError(error as unknown as Error) as unknown as Fields, SECRET_KEYS) : error) },
    },
    stream,
  );
  // pino formats a child's bindings without formatters.bindings, so they are censored on the way in; children inherit this.
  const pinoChild = logger.child as unknown as ChildFactory;
  const child: ChildFactory = function child(bindings, options) {
    return pinoChild.call(this, redactSecrets(bindings), options);
  };
  logger.child = child as unknown as Logger['child'];
  return logger;
}

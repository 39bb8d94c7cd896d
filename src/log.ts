/** pino logger settings: JSON lines, asynchronous writes, and nothing secret (DESIGN.md §7). */
import pino, { type Logger } from 'pino';
import type { Config } from './config/types.js';

/** Paths pino blanks out should a caller ever pass such an object; routes log only chosen fields anyway. */
const REDACT = [
  'req.headers.authorization',
  'req.headers.cookie',
  'headers.authorization',
  'headers.cookie',
  '*.password',
  '*.client_secret',
  '*.code',
  '*.code_verifier',
  '*.refresh_token',
  '*.access_token',
  '*.id_token',
  '*.device_code',
];

export function createLogger(level: Config['logLevel'], destination?: pino.DestinationStream): Logger {
  const stream = destination ?? pino.destination({ dest: 1, sync: false, minLength: 4096 });
  return pino({ level, redact: { paths: REDACT, censor: '[redacted]' }, base: { service: 'pinpoint' } }, stream);
}

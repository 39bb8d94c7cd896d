/** What the benchmark's processes share: the one client both servers know, and a small IPC request/reply protocol. */
import { spawnSync } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:net';

export const CLIENT_ID = 'bench';
export const CLIENT_SECRET = 'bench-secret-4f1c2b7e9a';
/** The resource named at /token in the refresh and code cases. */
export const API = 'https://api.example.org/';
export const FILES = 'https://files.example.org/';
/** The client's audience; /authorize named both, so the grants are bound to both (DESIGN.md §5). */
export const AUDIENCE: readonly string[] = [API, FILES];
export const REDIRECT_URI = 'http://127.0.0.1:9000/callback';
/** A resource-server scope; without `openid` no ID token is signed, on either server. */
export const SCOPE = 'read';
export const REFRESH_LIFETIME_MS = 30 * 24 * 3600_000;
/**
 * The one upstream Pinpoint's benchmark config names. Seeded grants are for people who signed in through it: a grant's
 * subject must be known to the config (DESIGN.md §6), and local users are a handful, not a million.
 */
export const UPSTREAM = 'campus';
/** The subject of the `index`-th seeded grant, as a federated sign-in names it (`<upstream>:<subject there>`). */
export const subjectOf = (index: number): string => `${UPSTREAM}:user-${index}`;
/** Seeded codes outlive a whole case group on both servers (the 60 s of real codes could lapse between segments). */
export const SEEDED_CODE_LIFETIME_MS = 30 * 60_000;
export const BASIC_AUTH = `Basic ${Buffer.from(`${CLIENT_ID}:${CLIENT_SECRET}`).toString('base64')}`;

/**
 * Token exchange (RFC 8693, DESIGN.md §12), Pinpoint only: the resource server at API, a configured confidential client
 * of its own, exchanges the access tokens for API it receives (the bench client's) for tokens addressed to DOWNSTREAM.
 */
export const EXCHANGE_CLIENT_ID = 'bench-api';
export const EXCHANGE_CLIENT_SECRET = 'bench-api-secret-7d2e91c4b0';
export const EXCHANGE_BASIC_AUTH = `Basic ${Buffer.from(`${EXCHANGE_CLIENT_ID}:${EXCHANGE_CLIENT_SECRET}`).toString('base64')}`;
export const DOWNSTREAM = 'https://inventory.example.org/';
/** The exchanging client's audience: whom it may call on a person's behalf, one `resource` at a time. */
export const EXCHANGE_AUDIENCE: readonly string[] = [DOWNSTREAM, 'https://billing.example.org/'];

/** What a pool line holds: a refresh token, "code verifier", or an access token to introspect (reused, not spent). */
export type PoolKind = 'refresh' | 'code' | 'access';

/** A request over IPC carries an id; the reply echoes it. */
export interface RpcRequest {
  readonly id: number;
  readonly cmd: string;
  readonly [field: string]: unknown;
}
export type RpcReply = { readonly id: number; readonly ok: true; readonly value: unknown } | { readonly id: number; readonly ok: false; readonly error: string };

/** In a child: answer RPC requests from the parent with `handlers`; `ready` is sent once listening. */
export function serveRpc(handlers: Record<string, (request: RpcRequest) => Promise<unknown> | unknown>): void {
  process.on('message', (message: RpcRequest) => {
    const handler = handlers[message.cmd];
    Promise.resolve()
      .then(() => {
        if (handler === undefined) throw new Error(`unknown command ${message.cmd}`);
        return handler(message);
      })
      .then(
        (value) => process.send?.({ id: message.id, ok: true, value } satisfies RpcReply),
        (error: unknown) => process.send?.({ id: message.id, ok: false, error: error instanceof Error ? (error.stack ?? error.message) : String(error) }),
      );
  });
  // The parent going away ends the child, so no server outlives an interrupted run.
  process.on('disconnect', () => process.exit(0));
}

/** A loopback port that is free right now. */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}

/** True when util-linux taskset can pin processes here. */
export function tasksetAvailable(): boolean {
  return spawnSync('taskset', ['-c', '0', 'true']).status === 0;
}

/** The JWT payload, decoded without verification (the driver checks `aud`, not signatures). */
export function jwtPayload(jwt: string): Record<string, unknown> {
  const part = jwt.split('.')[1];
  if (part === undefined) throw new Error('not a JWT');
  return JSON.parse(Buffer.from(part, 'base64url').toString('utf8')) as Record<string, unknown>;
}

/** `map` of every item, `size` of them in flight at a time, answers in the items' order. */
export async function mapInBatches<T, R>(items: readonly T[], size: number, map: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = [];
  for (let done = 0; done < items.length; done += size) results.push(...(await Promise.all(items.slice(done, done + size).map(map))));
  return results;
}

/** The same items in random order (Fisher-Yates), in place. */
export function shuffled<T>(items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i -= 1) {
    const j = Math.floor(Math.random() * (i + 1));
    [items[i], items[j]] = [items[j] as T, items[i] as T];
  }
  return items;
}

/** The node flags `npm start` gives Pinpoint (its young-generation size); the benchmark runs every server with them. */
export async function startNodeFlags(): Promise<string[]> {
  const manifest = JSON.parse(await readFile(new URL('../package.json', import.meta.url), 'utf8')) as { scripts: { start: string } };
  const words = manifest.scripts.start.split(/\s+/);
  const afterNode = words.slice(words.indexOf('node') + 1);
  const script = afterNode.findIndex((word) => !word.startsWith('--'));
  return afterNode.slice(0, script === -1 ? afterNode.length : script);
}

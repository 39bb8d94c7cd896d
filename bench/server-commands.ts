/** The RPC commands Pinpoint's and oidc-provider's benchmark servers answer alike, so the runner drives both the same way. */
import { writeFile } from 'node:fs/promises';
import type { PoolKind, RpcRequest } from './common.js';

/** Makes `count` lines of a pool: one refresh token, "code verifier" or access token a line. */
export type Seeder = (count: number) => Promise<string[]>;

/** `seed` writes a pool file with the server's own seeders and says how long it took; `memory` reports this process's usage. */
export function serverCommands(seeders: Readonly<Record<PoolKind, Seeder>>): Record<string, (request: RpcRequest) => Promise<unknown> | unknown> {
  return {
    async seed(request) {
      const kind = request.kind as PoolKind;
      const count = request.count as number;
      const started = performance.now();
      const lines = await seeders[kind](count);
      await writeFile(request.file as string, `${lines.join('\n')}\n`);
      return { count: lines.length, ms: performance.now() - started };
    },
    memory() {
      return process.memoryUsage();
    },
  };
}

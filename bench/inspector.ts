/** RPC commands that run the V8 CPU profiler inside a server, so a profile covers the measured requests and nothing else. */
import { writeFile } from 'node:fs/promises';
import { Session } from 'node:inspector/promises';
import type { RpcRequest } from './common.js';

export function profilerCommands(): Record<string, (request: RpcRequest) => Promise<unknown>> {
  let session: Session | undefined;
  return {
    async profileStart() {
      session = new Session();
      session.connect();
      await session.post('Profiler.enable');
      await session.post('Profiler.start');
      return true;
    },
    async profileStop(request) {
      if (session === undefined) throw new Error('the profiler was not started');
      const { profile } = await session.post('Profiler.stop');
      await writeFile(request.file as string, JSON.stringify(profile));
      session.disconnect();
      session = undefined;
      return true;
    },
  };
}

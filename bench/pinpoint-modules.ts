/**
 * Pinpoint's modules as `npm start` runs them: compiled by tsc into dist/ (`npm run bench` builds first),
 * not transpiled on load by tsx, whose output differs (e.g. a __name() call each time a named closure is made).
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

// BENCH_PINPOINT_DIST: another build's dist/ folder (run.ts --baseline), to compare two builds side by side.
const otherDist = process.env.BENCH_PINPOINT_DIST;
const dist = otherDist === undefined ? new URL('../dist/', import.meta.url) : pathToFileURL(`${resolve(otherDist)}/`);
const built = (module: string): string => new URL(`${module}.js`, dist).href;

/** The module that signs every JWT (bench/legacy-signing.ts swaps it for the "jose cost" line). */
export const JWT_MODULE = built('crypto/jwt');

export const { buildApp } = (await import(built('app'))) as typeof import('../src/app.js');
export const { deepFreeze, frozenMap } = (await import(built('config/frozen'))) as typeof import('../src/config/frozen.js');
export const { createLogger } = (await import(built('log'))) as typeof import('../src/log.js');
export const { openStore } = (await import(built('store/open'))) as typeof import('../src/store/open.js');
export const { KeyRing } = (await import(built('crypto/keys'))) as typeof import('../src/crypto/keys.js');
export const { createMetrics } = (await import(built('http/metrics'))) as typeof import('../src/http/metrics.js');
export const { newRefreshToken } = (await import(built('crypto/refresh-token'))) as typeof import('../src/crypto/refresh-token.js');
export const { newSecret } = (await import(built('crypto/random'))) as typeof import('../src/crypto/random.js');

/**
 * Pinpoint's modules as `npm start` runs them: compiled by tsc into dist/ (`npm run bench` builds first),
 * not transpiled on load by tsx, whose output differs (e.g. a __name() call each time a named closure is made).
 */
const built = (module: string): string => new URL(`../dist/${module}.js`, import.meta.url).href;

export const { buildApp } = (await import(built('app'))) as typeof import('../src/app.js');
export const { deepFreeze, frozenMap } = (await import(built('config/frozen'))) as typeof import('../src/config/frozen.js');
export const { createLogger } = (await import(built('log'))) as typeof import('../src/log.js');
export const { openStore } = (await import(built('store/open'))) as typeof import('../src/store/open.js');
export const { loadSigningKeys } = (await import(built('tokens/keys'))) as typeof import('../src/tokens/keys.js');
export const { newRefreshToken, newSecret } = (await import(built('tokens/mint'))) as typeof import('../src/tokens/mint.js');

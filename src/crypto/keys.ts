/**
 * Signing keys: ES256 for access tokens, RS256 for ID tokens (the OIDC default every RP accepts). Keys live in the
 * store so every instance signs with the same ones; each instance re-reads them on a timer, so a rotation or a
 * retirement made by `pinpoint keys` reaches every instance within KEY_TIMING.reloadMs, without a restart.
 */
import { calculateJwkThumbprint, exportJWK, generateKeyPair, importJWK, type JWK } from 'jose';

export type SigningAlgorithm = 'ES256' | 'RS256';

/** A signing key as the store keeps it (store/ implements KeyStore). */
export interface StoredKey {
  readonly kid: string;
  readonly alg: 'ES256' | 'RS256';
  /** Private JWK as JSON text. */
  readonly privateJwk: string;
  readonly createdAt: number;
  /** Set by `pinpoint keys retire`: no longer published, and tokens it signed no longer verify. */
  readonly retiredAt?: number;
}

export interface KeyStore {
  /**
   * Returns the stored keys (retired ones included); when none is stored yet, stores `candidates` and returns them.
   * Safe when several instances start at once: all of them end up with the same keys.
   */
  loadOrCreateKeys(candidates: readonly StoredKey[]): Promise<StoredKey[]>;
  /** Every stored key, retired ones included, oldest first (then by kid). */
  listKeys(): Promise<StoredKey[]>;
  /** Adds new keys (a rotation) in one transaction. */
  addKeys(keys: readonly StoredKey[]): Promise<void>;
  /** Marks the key retired at `now`; false when no such key or it was already retired. */
  retireKey(kid: string, now: number): Promise<boolean>;
  /**
   * Records `events` once for every process sharing the store and returns those no process had recorded, so one
   * key_rotation audit line is written per change, whichever worker or instance sees it first (DESIGN.md §10, §11).
   * The first call on a store records what it is given and returns none: the keys a server starts with are no change.
   */
  recordKeyEvents(events: readonly KeyEvent[], now: number): Promise<KeyEvent[]>;
}

/** A step in a key's life, each happening once: published (stored), signing (its lead time passed), unpublished (retired). */
export interface KeyEvent {
  readonly kid: string;
  readonly event: 'published' | 'signing' | 'unpublished';
}

export const SIGNING_ALGORITHMS: readonly SigningAlgorithm[] = ['ES256', 'RS256'];

export interface SigningKey {
  readonly kid: string;
  readonly alg: SigningAlgorithm;
  /** Imported once as a CryptoKey: jose would convert a KeyObject on every signature. */
  readonly privateKey: CryptoKey;
  readonly publicKey: CryptoKey;
  readonly publicJwk: JWK;
}

export interface SigningKeys {
  readonly accessToken: SigningKey;
  readonly idToken: SigningKey;
  /** Every published (not retired) key by kid, for verification. */
  readonly byKid: ReadonlyMap<string, SigningKey>;
  readonly jwks: { readonly keys: readonly JWK[] };
}

/**
 * How keys move between instances. A new key is published at once (at the next reload, within reloadMs) but signs
 * only `leadMs` after its creation. The lead covers the reload plus the 30 s a resource server using jose's
 * createRemoteJWKSet waits before it re-fetches a JWKS for an unknown kid (its cooldown), so no resource server
 * meets a kid it cannot find: published within 10 s, signing within 55 s (DESIGN.md §2: both within 60 s).
 */
export interface KeyTiming {
  readonly reloadMs: number;
  readonly leadMs: number;
  readonly jwksMaxAgeSeconds: number;
}

export const KEY_TIMING: KeyTiming = { reloadMs: 10_000, leadMs: 45_000, jwksMaxAgeSeconds: 10 };

export type KeyState = 'signing' | 'published' | 'retired';

/** A change of keys as the key_rotation audit line lists it: kids newly published, no longer published, newly signing. */
export interface KeyChange {
  readonly published: readonly string[];
  readonly unpublished: readonly string[];
  readonly signing: readonly string[];
}

/**
 * The state of each stored key at `now` (DESIGN.md §2 `keys list`): per algorithm, the newest key created at least
 * `leadMs` ago signs (or the oldest live one, when every live key is newer: the first start); other live keys are
 * published; retired keys are neither.
 */
export function keyStates(stored: readonly StoredKey[], now: number, leadMs: number): Map<string, KeyState> {
  const states = new Map<string, KeyState>();
  for (const alg of SIGNING_ALGORITHMS) {
    const live = stored.filter((key) => key.alg === alg && key.retiredAt === undefined).sort((a, b) => a.createdAt - b.createdAt || (a.kid < b.kid ? -1 : 1));
    const ready = live.filter((key) => key.createdAt <= now - leadMs);
    const signing = ready.at(-1) ?? live[0];
    for (const key of live) states.set(key.kid, key === signing ? 'signing' : 'published');
  }
  for (const key of stored) if (key.retiredAt !== undefined) states.set(key.kid, 'retired');
  return states;
}

/**
 * The steps each stored key has taken by the states of one moment. A key that signed and was then followed by a
 * newer one is published again, so its `signing` step is recorded only by a process that saw it sign.
 */
export function keyEvents(states: ReadonlyMap<string, KeyState>): KeyEvent[] {
  const events: KeyEvent[] = [];
  for (const [kid, state] of states) {
    events.push({ kid, event: 'published' });
    if (state === 'signing') events.push({ kid, event: 'signing' });
    if (state === 'retired') events.push({ kid, event: 'unpublished' });
  }
  return events;
}

/** Key events as the key_rotation audit line lists them. */
export function changeOf(events: readonly KeyEvent[]): KeyChange {
  const kidsOf = (event: KeyEvent['event']): string[] => events.filter((candidate) => candidate.event === event).map((candidate) => candidate.kid);
  return { published: kidsOf('published'), unpublished: kidsOf('unpublished'), signing: kidsOf('signing') };
}

/** A fresh key pair of `alg`, as the store keeps it (kid: the JWK thumbprint, RFC 7638). */
export async function newStoredKey(alg: SigningAlgorithm, now: number): Promise<StoredKey> {
  const { privateKey } = await generateKeyPair(alg, { extractable: true, modulusLength: 2048 });
  const jwk = await exportJWK(privateKey);
  const kid = await calculateJwkThumbprint(jwk);
  return { kid, alg, privateJwk: JSON.stringify({ ...jwk, kid, alg }), createdAt: now };
}

/** JWK members that are private (RFC 7518 §6.2.2, §6.3.2). */
const PRIVATE_MEMBERS = new Set(['d', 'p', 'q', 'dp', 'dq', 'qi', 'oth', 'key_ops', 'ext']);

async function importStoredKey(stored: StoredKey): Promise<SigningKey> {
  const jwk = JSON.parse(stored.privateJwk) as JWK;
  const publicMembers = Object.fromEntries(Object.entries(jwk).filter(([name]) => !PRIVATE_MEMBERS.has(name)));
  const publicJwk: JWK = { ...publicMembers, kid: stored.kid, alg: stored.alg, use: 'sig' };
  const privateKey = (await importJWK(jwk, stored.alg)) as CryptoKey;
  const publicKey = (await importJWK(publicJwk, stored.alg)) as CryptoKey;
  return { kid: stored.kid, alg: stored.alg, privateKey, publicKey, publicJwk };
}

/** The keys in use by `states` (of one moment): every live key imported (once: `imported` keeps them across reloads), the signing ones picked. */
async function keysInUse(stored: readonly StoredKey[], states: ReadonlyMap<string, KeyState>, imported: Map<string, SigningKey>): Promise<SigningKeys> {
  const live = stored.filter((key) => states.get(key.kid) !== 'retired');
  const keys = await Promise.all(
    live.map(async (key) => {
      let signingKey = imported.get(key.kid);
      if (signingKey === undefined) imported.set(key.kid, (signingKey = await importStoredKey(key)));
      return signingKey;
    }),
  );
  const signing = (alg: SigningAlgorithm): SigningKey => {
    const key = keys.find((candidate) => candidate.alg === alg && states.get(candidate.kid) === 'signing');
    if (key === undefined) throw new Error(`no ${alg} signing key in the store`);
    return key;
  };
  return {
    accessToken: signing('ES256'),
    idToken: signing('RS256'),
    byKid: new Map(keys.map((key) => [key.kid, key])),
    jwks: { keys: keys.map((key) => key.publicJwk) },
  };
}

/** The keys an instance uses now, re-read from the store on a timer; `current` is swapped whole, never mutated. */
export class KeyRing {
  #current: SigningKeys;
  /** Every stored key's state at the last load, retired ones included: what events() reads. */
  #states: ReadonlyMap<string, KeyState>;
  #timer: NodeJS.Timeout | undefined;

  private constructor(
    private readonly store: KeyStore,
    private readonly timing: KeyTiming,
    private readonly clock: () => number,
    private readonly imported: Map<string, SigningKey>,
    loaded: { readonly current: SigningKeys; readonly states: ReadonlyMap<string, KeyState> },
  ) {
    this.#current = loaded.current;
    this.#states = loaded.states;
  }

  /** Loads the keys, creating them on the first start (the first instance's keys win). */
  static async open(store: KeyStore, options: { timing?: KeyTiming; now?: () => number } = {}): Promise<KeyRing> {
    const clock = options.now ?? Date.now;
    const timing = options.timing ?? KEY_TIMING;
    const now = clock();
    const candidates = await Promise.all(SIGNING_ALGORITHMS.map((alg) => newStoredKey(alg, now)));
    const stored = await store.loadOrCreateKeys(candidates);
    const imported = new Map<string, SigningKey>();
    const states = keyStates(stored, now, timing.leadMs);
    return new KeyRing(store, timing, clock, imported, { current: await keysInUse(stored, states, imported), states });
  }

  get current(): SigningKeys {
    return this.#current;
  }

  get jwksMaxAgeSeconds(): number {
    return this.timing.jwksMaxAgeSeconds;
  }

  /** Re-reads the keys; on a store failure the keys in use stay (the next reload tries again). True when a key's state changed. */
  async reload(): Promise<boolean> {
    const stored = await this.store.listKeys();
    const states = keyStates(stored, this.clock(), this.timing.leadMs);
    this.#current = await keysInUse(stored, states, this.imported);
    const before = this.#states;
    this.#states = states;
    return states.size !== before.size || [...states].some(([kid, state]) => before.get(kid) !== state);
  }

  /** The steps the stored keys had taken at the last load (keyEvents), for the key_rotation audit line. */
  events(): KeyEvent[] {
    return keyEvents(this.#states);
  }

  /** Reloads every timing.reloadMs until stop(); `onError` hears failed reloads, `onReloaded` each reload that worked (whether a key's state changed). */
  start(onError: (error: unknown) => void, onReloaded: (changed: boolean) => void | Promise<void> = () => undefined): void {
    const tick = async (): Promise<void> => {
      await onReloaded(await this.reload());
    };
    this.#timer = setInterval(() => void tick().catch(onError), this.timing.reloadMs);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
  }
}

/** `pinpoint keys rotate`: a new key per algorithm, published at once and signing after the lead time. */
export async function rotateKeys(store: KeyStore, now: number): Promise<StoredKey[]> {
  const keys = await Promise.all(SIGNING_ALGORITHMS.map((alg) => newStoredKey(alg, now)));
  await store.addKeys(keys);
  return keys;
}

/**
 * Why the signing key `kid` cannot be retired: rotate first, or, once rotated, which key takes over first and from
 * when it may be retired (once every instance has reloaded after the switch).
 */
function signingKeyRefusal(stored: readonly StoredKey[], kid: string, timing: KeyTiming): string {
  const key = stored.find((candidate) => candidate.kid === kid) as StoredKey;
  const successor = stored
    .filter((candidate) => candidate.alg === key.alg && candidate.retiredAt === undefined && candidate.createdAt > key.createdAt)
    .sort((a, b) => a.createdAt - b.createdAt)[0];
  if (successor === undefined) return `key ${kid} signs new tokens; rotate first, then retire it once the new key signs`;
  const retirable = new Date(successor.createdAt + timing.leadMs + timing.reloadMs).toISOString();
  return `key ${kid} signs new tokens until key ${successor.kid}, published by a rotation, takes over; retire it from ${retirable}`;
}

/** `pinpoint keys retire KID`: refused for a key that signs or does not exist (DESIGN.md §2). */
export async function retireKey(store: KeyStore, kid: string, now: number, timing: KeyTiming = KEY_TIMING): Promise<{ ok: true } | { ok: false; reason: string }> {
  const stored = await store.listKeys();
  const state = keyStates(stored, now, timing.leadMs).get(kid);
  if (state === undefined) return { ok: false, reason: `there is no key ${kid}` };
  if (state === 'retired') return { ok: false, reason: `key ${kid} is already retired` };
  if (state === 'signing') return { ok: false, reason: signingKeyRefusal(stored, kid, timing) };
  // An instance holds the states of its last reload, up to reloadMs old: a key that signed then may sign there still.
  if (keyStates(stored, now - timing.reloadMs, timing.leadMs).get(kid) === 'signing') {
    return { ok: false, reason: `key ${kid} signed new tokens less than ${timing.reloadMs / 1000} s ago, and running instances may still sign with it; retire it later` };
  }
  return (await store.retireKey(kid, now)) ? { ok: true } : { ok: false, reason: `key ${kid} could not be retired (retired meanwhile?)` };
}

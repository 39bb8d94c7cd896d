import {
  DEVICE_EXPIRY_SLACK_MS,
  extendedExpiry,
  grantExtension,
  grantKeptUntil,
  grantLives,
  grantMatches,
  MAX_SESSIONS_PER_SUBJECT,
  mayNeedExtension,
  oldestGrantFirst,
  oldestKeyFirst,
  type GrantExtension,
} from './rules.js';
import type {
  AuthorizationCodeRecord,
  CodeLookup,
  ConsentRecord,
  DeviceAuthorizationRecord,
  FederationStateRecord,
  Grant,
  GrantFilter,
  GrantHolding,
  GrantSummary,
  KeyEvent,
  LoginRequestRecord,
  PushedRequestRecord,
  RefreshLookup,
  RefreshTokenRecord,
  RegisteredClientRecord,
  ReplayKind,
  SessionRecord,
  Store,
  StoredKey,
  SubjectClaims,
  UsedOnceEntry,
  UsedOnceOutcome,
} from './types.js';

/** A used-once record's key: kind and id as JSON, so no id can pass for another kind's. */
const usedOnceKey = (kind: ReplayKind, id: string): string => JSON.stringify([kind, id]);

interface CodeEntry {
  readonly record: AuthorizationCodeRecord;
  used: boolean;
}

interface RefreshEntry {
  readonly record: RefreshTokenRecord;
  status: 'active' | 'rotated';
  rotatedAt?: number;
}

/** JSON text, so a value reads back as it would from SQLite or PostgreSQL (undefined members dropped). */
interface JsonEntry {
  readonly json: string;
  readonly expiresAt: number;
}

interface AttemptWindow {
  count: number;
  readonly windowEndsAt: number;
}

const freezeGrant = (grant: Grant): Grant =>
  Object.freeze({ ...grant, scope: [...grant.scope], resources: [...grant.resources], claims: { ...grant.claims } });

const freezeDevice = (record: DeviceAuthorizationRecord): DeviceAuthorizationRecord =>
  Object.freeze({ ...record, scope: [...record.scope], ...(record.claims ? { claims: { ...record.claims } } : {}) });

const consentKey = (subject: string, clientId: string, redirectOrigin: string): string => JSON.stringify([subject, clientId, redirectOrigin]);

const fromJson = <T>(entry: JsonEntry | undefined, now: number): T | undefined =>
  entry !== undefined && entry.expiresAt > now ? (JSON.parse(entry.json) as T) : undefined;

/** All state in Maps: lost when the process stops (DESIGN.md §6, no `state` block). */
export class MemoryStore implements Store {
  readonly description = 'memory';
  #keys: StoredKey[] | undefined;
  readonly #grants = new Map<string, Grant>();
  readonly #codes = new Map<string, CodeEntry>();
  readonly #refreshTokens = new Map<string, RefreshEntry>();
  readonly #devices = new Map<string, DeviceAuthorizationRecord>();
  /** userCode -> deviceCodeDigest. */
  readonly #userCodes = new Map<string, string>();
  readonly #sessions = new Map<string, SessionRecord>();
  /** jti -> when the token expires. */
  readonly #revokedAccessTokens = new Map<string, number>();
  readonly #loginRequests = new Map<string, JsonEntry>();
  readonly #federationStates = new Map<string, FederationStateRecord>();
  readonly #subjectClaims = new Map<string, JsonEntry>();
  readonly #attempts = new Map<string, AttemptWindow>();
  /** clientId -> the registration as JSON text, so it reads back as from SQLite or PostgreSQL. */
  readonly #registeredClients = new Map<string, JsonEntry>();
  /** consentKey(subject, clientId, redirectOrigin) -> the consent as JSON text. */
  readonly #consents = new Map<string, string>();
  /** JSON [kind, id] -> until when it counts as used. */
  readonly #usedOnce = new Map<string, number>();
  /** request_uri digest -> the pushed request as JSON text. */
  readonly #pushedRequests = new Map<string, JsonEntry>();
  /** JSON [kid, event] of each key event recorded (recordKeyEvents); undefined until the first call, which sets the baseline. */
  #keyEvents: Set<string> | undefined;

  async loadOrCreateKeys(candidates: readonly StoredKey[]): Promise<StoredKey[]> {
    if (this.#keys === undefined || this.#keys.length === 0) {
      this.#keys = candidates.map((key) => Object.freeze({ ...key })).sort(oldestKeyFirst);
    }
    return [...this.#keys];
  }

  async listKeys(): Promise<StoredKey[]> {
    return [...(this.#keys ?? [])];
  }

  async addKeys(keys: readonly StoredKey[]): Promise<void> {
    const stored = this.#keys ?? [];
    const kids = new Set(stored.map((key) => key.kid));
    for (const key of keys) {
      if (kids.has(key.kid)) throw new Error('key id already exists');
      kids.add(key.kid);
    }
    this.#keys = [...stored, ...keys.map((key) => Object.freeze({ ...key }))].sort(oldestKeyFirst);
  }

  async retireKey(kid: string, now: number): Promise<boolean> {
    const index = this.#keys?.findIndex((key) => key.kid === kid) ?? -1;
    const key = this.#keys?.[index];
    if (this.#keys === undefined || key === undefined || key.retiredAt !== undefined) return false;
    this.#keys[index] = Object.freeze({ ...key, retiredAt: now });
    return true;
  }

  async recordKeyEvents(events: readonly KeyEvent[]): Promise<KeyEvent[]> {
    const baseline = this.#keyEvents === undefined;
    const recorded = (this.#keyEvents ??= new Set());
    const fresh = events.filter((event) => {
      const name = JSON.stringify([event.kid, event.event]);
      if (recorded.has(name)) return false;
      recorded.add(name);
      return true;
    });
    return baseline ? [] : fresh;
  }

  async revokeGrant(grantId: string): Promise<void> {
    this.#grants.delete(grantId);
    for (const [digest, entry] of this.#codes) if (entry.record.grantId === grantId) this.#codes.delete(digest);
    for (const [digest, entry] of this.#refreshTokens) if (entry.record.grantId === grantId) this.#refreshTokens.delete(digest);
  }

  async findGrant(grantId: string, now: number): Promise<Grant | undefined> {
    const grant = this.#grants.get(grantId);
    return grant !== undefined && grantLives(grant, now) ? grant : undefined;
  }

  async findGrantHolding(grantId: string, jti: string | undefined, now: number): Promise<GrantHolding | undefined> {
    const grant = this.#grants.get(grantId);
    if (grant === undefined || !grantLives(grant, now)) return undefined;
    return { clientId: grant.clientId, subject: grant.subject, tokenRevoked: jti !== undefined && (await this.isAccessTokenRevoked(jti, now)) };
  }

  async listGrants(filter: GrantFilter, now: number): Promise<GrantSummary[]> {
    const lastRefresh = new Map<string, number>();
    for (const { record } of this.#refreshTokens.values()) {
      lastRefresh.set(record.grantId, Math.max(record.issuedAt, lastRefresh.get(record.grantId) ?? -Infinity));
    }
    return [...this.#grants.values()]
      .filter((grant) => grantLives(grant, now) && grantMatches(grant, filter))
      .sort(oldestGrantFirst)
      .map((grant) => {
        const lastRefreshAt = lastRefresh.get(grant.id);
        return lastRefreshAt === undefined ? { grant } : { grant, lastRefreshAt };
      });
  }

  async revokeGrants(filter: GrantFilter): Promise<number> {
    if (filter.clientId !== undefined) this.#deleteConsentsOf(filter.clientId, filter.subject);
    const matching = [...this.#grants.values()].filter((grant) => grantMatches(grant, filter));
    for (const grant of matching) await this.revokeGrant(grant.id);
    return matching.length;
  }

  async revokeAccessToken(jti: string, expiresAt: number): Promise<void> {
    if (!this.#revokedAccessTokens.has(jti)) this.#revokedAccessTokens.set(jti, expiresAt);
  }

  async isAccessTokenRevoked(jti: string, now: number): Promise<boolean> {
    const expiresAt = this.#revokedAccessTokens.get(jti);
    return expiresAt !== undefined && expiresAt > now;
  }

  async createGrantWithCode(grant: Grant, code: AuthorizationCodeRecord): Promise<void> {
    if (this.#grants.has(grant.id)) throw new Error('grant id already exists');
    if (this.#codes.has(code.digest)) throw new Error('authorization code digest already exists');
    this.#grants.set(grant.id, freezeGrant(grant));
    this.#codes.set(code.digest, { record: Object.freeze({ ...code }), used: false });
  }

  async findCode(digest: string, now: number): Promise<CodeLookup> {
    const entry = this.#codes.get(digest);
    const grant = entry === undefined ? undefined : this.#grants.get(entry.record.grantId);
    if (entry === undefined || grant === undefined) return { status: 'unknown' };
    // Used stays used past the code's expiry, for as long as its grant lives (DESIGN.md §6).
    if (entry.used) return { status: 'used', code: entry.record };
    return entry.record.expiresAt > now ? { status: 'active', code: entry.record, grant } : { status: 'unknown' };
  }

  async consumeCode(digest: string, now: number, grantUntil: number, firstRefresh?: RefreshTokenRecord): Promise<boolean> {
    const entry = this.#codes.get(digest);
    if (entry === undefined || entry.used || entry.record.expiresAt <= now) return false;
    if (firstRefresh !== undefined && this.#refreshTokens.has(firstRefresh.digest)) throw new Error('refresh token digest already exists');
    entry.used = true;
    if (firstRefresh !== undefined) this.#insertRefreshToken(firstRefresh);
    // After the refresh token's extension, as the SQL stores do: the grant lives until the later of the two.
    const kept = grantKeptUntil(grantUntil);
    if (mayNeedExtension(firstRefresh?.expiresAt, kept)) this.#extendGrant(entry.record.grantId, kept);
    return true;
  }

  async findRefreshToken(grantId: string, digest: string, now: number): Promise<RefreshLookup> {
    const entry = this.#refreshTokens.get(digest);
    if (entry === undefined || entry.record.grantId !== grantId || entry.record.expiresAt <= now) return { status: 'unknown' };
    const grant = this.#grants.get(entry.record.grantId);
    if (grant === undefined) return { status: 'unknown' };
    if (entry.status === 'rotated') {
      const bound = entry.record.boundKey === undefined ? {} : { boundKey: entry.record.boundKey };
      return { status: 'rotated', grantId: grant.id, clientId: grant.clientId, rotatedAt: entry.rotatedAt ?? 0, ...bound };
    }
    return { status: 'active', token: entry.record, grant };
  }

  /** Adds an active token and extends its grant to outlive it (rules.ts), unless the grant's known expiry already does. */
  #insertRefreshToken(token: RefreshTokenRecord, grantExpiresAt?: number): void {
    this.#refreshTokens.set(token.digest, { record: Object.freeze({ ...token }), status: 'active' });
    const extension = grantExtension(token);
    if (mayNeedExtension(grantExpiresAt, extension)) this.#extendGrant(token.grantId, extension);
  }

  #extendGrant(grantId: string, extension: GrantExtension): void {
    const grant = this.#grants.get(grantId);
    if (grant === undefined) return;
    const expiresAt = extendedExpiry(grant.expiresAt, extension);
    if (expiresAt !== grant.expiresAt) this.#grants.set(grant.id, Object.freeze({ ...grant, expiresAt }));
  }

  async rotateRefreshToken(oldDigest: string, next: RefreshTokenRecord, now: number, grantExpiresAt?: number): Promise<boolean> {
    const old = this.#refreshTokens.get(oldDigest);
    if (old === undefined || old.record.grantId !== next.grantId || old.status !== 'active' || old.record.expiresAt <= now) return false;
    if (this.#refreshTokens.has(next.digest)) throw new Error('refresh token digest already exists');
    old.status = 'rotated';
    old.rotatedAt = now;
    this.#insertRefreshToken(next, grantExpiresAt);
    return true;
  }

  async addRefreshToken(token: RefreshTokenRecord, now: number): Promise<boolean> {
    const grant = this.#grants.get(token.grantId);
    if (grant === undefined || !grantLives(grant, now)) return false;
    if (this.#refreshTokens.has(token.digest)) throw new Error('refresh token digest already exists');
    this.#insertRefreshToken(token);
    return true;
  }

  async createDeviceAuthorization(record: DeviceAuthorizationRecord): Promise<void> {
    if (this.#devices.has(record.deviceCodeDigest)) throw new Error('device code digest already exists');
    const holder = this.#userCodes.get(record.userCode);
    if (holder !== undefined) {
      const existing = this.#devices.get(holder);
      // An expired record gives its user code up; a live one keeps it (the caller draws another code).
      if (existing !== undefined && existing.expiresAt > record.createdAt) throw new Error('user code already in use');
      this.#devices.delete(holder);
    }
    this.#devices.set(record.deviceCodeDigest, freezeDevice(record));
    this.#userCodes.set(record.userCode, record.deviceCodeDigest);
  }

  async findByUserCode(userCode: string, now: number): Promise<DeviceAuthorizationRecord | undefined> {
    const digest = this.#userCodes.get(userCode);
    const record = digest === undefined ? undefined : this.#devices.get(digest);
    return record !== undefined && record.expiresAt > now ? record : undefined;
  }

  async findByDeviceCode(deviceCodeDigest: string): Promise<DeviceAuthorizationRecord | undefined> {
    return this.#devices.get(deviceCodeDigest);
  }

  async recordPoll(deviceCodeDigest: string, now: number, tooFast: boolean): Promise<void> {
    const record = this.#devices.get(deviceCodeDigest);
    if (record === undefined) return;
    const intervalSeconds = tooFast ? record.intervalSeconds + 5 : record.intervalSeconds;
    this.#devices.set(deviceCodeDigest, Object.freeze({ ...record, lastPolledAt: now, intervalSeconds }));
  }

  async decideDeviceAuthorization(
    userCode: string,
    decision: { approved: true; subject: string; claims: SubjectClaims; authTime: number } | { approved: false },
    now: number,
  ): Promise<boolean> {
    const record = await this.findByUserCode(userCode, now);
    if (record === undefined || record.status !== 'pending') return false;
    const decided: DeviceAuthorizationRecord = decision.approved
      ? { ...record, status: 'approved', subject: decision.subject, claims: { ...decision.claims }, authTime: decision.authTime }
      : { ...record, status: 'denied' };
    this.#devices.set(record.deviceCodeDigest, Object.freeze(decided));
    return true;
  }

  async redeemDeviceCode(
    deviceCodeDigest: string,
    grant: Grant,
    refresh: RefreshTokenRecord | undefined,
    now: number,
  ): Promise<boolean> {
    const record = this.#devices.get(deviceCodeDigest);
    if (record === undefined || record.status !== 'approved' || record.expiresAt <= now) return false;
    if (this.#grants.has(grant.id)) throw new Error('grant id already exists');
    if (refresh !== undefined && this.#refreshTokens.has(refresh.digest)) throw new Error('refresh token digest already exists');
    this.#devices.set(deviceCodeDigest, Object.freeze({ ...record, status: 'redeemed' }));
    this.#grants.set(grant.id, freezeGrant(grant));
    if (refresh !== undefined) this.#insertRefreshToken(refresh);
    return true;
  }

  async createSession(session: SessionRecord, replaces?: string): Promise<void> {
    if (replaces !== undefined) this.#sessions.delete(replaces);
    this.#sessions.set(session.digest, Object.freeze({ ...session, claims: { ...session.claims } }));
    // As the SQL stores trim (rules.ts MAX_SESSIONS_PER_SUBJECT): the subject's sessions that expire last stay.
    const own = [...this.#sessions.values()].filter((held) => held.subject === session.subject);
    if (own.length <= MAX_SESSIONS_PER_SUBJECT) return;
    own.sort((a, b) => b.expiresAt - a.expiresAt || (a.digest < b.digest ? -1 : a.digest > b.digest ? 1 : 0));
    for (const ended of own.slice(MAX_SESSIONS_PER_SUBJECT)) this.#sessions.delete(ended.digest);
  }

  async findSession(digest: string, now: number): Promise<SessionRecord | undefined> {
    const session = this.#sessions.get(digest);
    return session !== undefined && session.expiresAt > now ? session : undefined;
  }

  async deleteSession(digest: string): Promise<void> {
    this.#sessions.delete(digest);
  }

  async deleteSessionsOf(subject: string): Promise<number> {
    let ended = 0;
    for (const [digest, session] of this.#sessions) {
      if (session.subject === subject) {
        this.#sessions.delete(digest);
        ended += 1;
      }
    }
    return ended;
  }

  async saveLoginRequest(record: LoginRequestRecord): Promise<void> {
    if (this.#loginRequests.has(record.id)) throw new Error('login request id already exists');
    this.#loginRequests.set(record.id, { json: JSON.stringify(record), expiresAt: record.expiresAt });
  }

  async findLoginRequest(id: string, now: number): Promise<LoginRequestRecord | undefined> {
    return fromJson(this.#loginRequests.get(id), now);
  }

  async takeLoginRequest(id: string, now: number): Promise<LoginRequestRecord | undefined> {
    const entry = this.#loginRequests.get(id);
    this.#loginRequests.delete(id);
    return fromJson(entry, now);
  }

  async saveFederationState(record: FederationStateRecord): Promise<void> {
    if (this.#federationStates.has(record.state)) throw new Error('federation state already exists');
    this.#federationStates.set(record.state, Object.freeze({ ...record }));
  }

  async findFederationState(state: string, now: number): Promise<FederationStateRecord | undefined> {
    const record = this.#federationStates.get(state);
    return record !== undefined && record.expiresAt > now ? record : undefined;
  }

  async takeFederationState(state: string, now: number): Promise<FederationStateRecord | undefined> {
    const record = this.#federationStates.get(state);
    this.#federationStates.delete(state);
    return record !== undefined && record.expiresAt > now ? record : undefined;
  }

  async saveSubjectClaims(subject: string, claims: SubjectClaims, expiresAt: number): Promise<void> {
    this.#subjectClaims.set(subject, { json: JSON.stringify(claims), expiresAt });
  }

  async findSubjectClaims(subject: string, now: number): Promise<SubjectClaims | undefined> {
    return fromJson(this.#subjectClaims.get(subject), now);
  }

  async saveRegisteredClient(record: RegisteredClientRecord): Promise<void> {
    if (this.#registeredClients.has(record.clientId)) throw new Error('client id already registered');
    this.#registeredClients.set(record.clientId, { json: JSON.stringify(record), expiresAt: record.expiresAt });
  }

  async findRegisteredClient(clientId: string): Promise<RegisteredClientRecord | undefined> {
    const entry = this.#registeredClients.get(clientId);
    return entry === undefined ? undefined : (JSON.parse(entry.json) as RegisteredClientRecord);
  }

  async keepRegisteredClient(clientId: string, until: number): Promise<void> {
    const entry = this.#registeredClients.get(clientId);
    if (entry === undefined || entry.expiresAt >= until) return;
    this.#registeredClients.set(clientId, { json: JSON.stringify({ ...(JSON.parse(entry.json) as RegisteredClientRecord), expiresAt: until }), expiresAt: until });
  }

  async deleteRegisteredClient(clientId: string): Promise<boolean> {
    this.#deleteConsentsOf(clientId);
    return this.#registeredClients.delete(clientId);
  }

  async findConsent(subject: string, clientId: string, redirectOrigin: string): Promise<ConsentRecord | undefined> {
    const json = this.#consents.get(consentKey(subject, clientId, redirectOrigin));
    return json === undefined ? undefined : (JSON.parse(json) as ConsentRecord);
  }

  async saveConsent(record: ConsentRecord): Promise<void> {
    this.#consents.set(consentKey(record.subject, record.clientId, record.redirectOrigin), JSON.stringify(record));
  }

  #deleteConsentsOf(clientId: string, subject?: string): void {
    for (const [key, json] of this.#consents) {
      const consent = JSON.parse(json) as ConsentRecord;
      if (consent.clientId === clientId && (subject === undefined || consent.subject === subject)) this.#consents.delete(key);
    }
  }

  async countAttempt(key: string, now: number, windowMs: number): Promise<number> {
    const window = this.#attempts.get(key);
    if (window === undefined || window.windowEndsAt <= now) {
      this.#attempts.set(key, { count: 1, windowEndsAt: now + windowMs });
      return 1;
    }
    window.count += 1;
    return window.count;
  }

  async peekAttempts(key: string, now: number): Promise<number> {
    const window = this.#attempts.get(key);
    return window !== undefined && window.windowEndsAt > now ? window.count : 0;
  }

  async forgiveAttempt(key: string, now: number): Promise<void> {
    const window = this.#attempts.get(key);
    if (window !== undefined && window.windowEndsAt > now && window.count > 0) window.count -= 1;
    // Forgiven back to nothing: no entry left, as the SQL stores delete the row.
    if (window !== undefined && window.count <= 0) this.#attempts.delete(key);
  }

  async clearAttempts(key: string): Promise<void> {
    this.#attempts.delete(key);
  }

  async markAllUsedOnce(entries: readonly UsedOnceEntry[], now: number): Promise<UsedOnceOutcome> {
    // Every entry is checked before any is set, with no await between: a refused batch records nothing.
    for (const { kind, id } of entries) {
      const until = this.#usedOnce.get(usedOnceKey(kind, id));
      if (until !== undefined && until > now) return { ok: false, used: kind };
    }
    for (const { kind, id, expiresAt } of entries) this.#usedOnce.set(usedOnceKey(kind, id), expiresAt);
    return { ok: true };
  }

  async isUsedOnce(kind: ReplayKind, id: string, now: number): Promise<boolean> {
    const until = this.#usedOnce.get(usedOnceKey(kind, id));
    return until !== undefined && until > now;
  }

  async savePushedRequest(record: PushedRequestRecord): Promise<void> {
    if (this.#pushedRequests.has(record.digest)) throw new Error('pushed request digest already exists');
    this.#pushedRequests.set(record.digest, { json: JSON.stringify(record), expiresAt: record.expiresAt });
  }

  async findPushedRequest(digest: string, clientId: string, now: number): Promise<PushedRequestRecord | undefined> {
    const record = fromJson<PushedRequestRecord>(this.#pushedRequests.get(digest), now);
    return record?.clientId === clientId ? record : undefined;
  }

  async takePushedRequest(digest: string, clientId: string, now: number): Promise<boolean> {
    if ((await this.findPushedRequest(digest, clientId, now)) === undefined) return false;
    return this.#pushedRequests.delete(digest);
  }

  async ping(): Promise<void> {}

  /** As the SQL stores sweep (sql-store.ts): a used code and every token stay while their grant does, and go with it. */
  async sweep(now: number): Promise<void> {
    const expiredGrants = new Set<string>();
    for (const [id, grant] of this.#grants) if (grant.expiresAt < now) expiredGrants.add(id);
    for (const [digest, { record, used }] of this.#codes) {
      if ((record.expiresAt < now && !used) || expiredGrants.has(record.grantId)) this.#codes.delete(digest);
    }
    for (const [digest, { record }] of this.#refreshTokens) {
      if (record.expiresAt < now || expiredGrants.has(record.grantId)) this.#refreshTokens.delete(digest);
    }
    for (const id of expiredGrants) this.#grants.delete(id);
    const clientsWithGrants = new Set([...this.#grants.values()].map((grant) => grant.clientId));
    for (const [clientId, entry] of this.#registeredClients) {
      if (entry.expiresAt < now && !clientsWithGrants.has(clientId)) {
        this.#deleteConsentsOf(clientId);
        this.#registeredClients.delete(clientId);
      }
    }
    for (const [digest, record] of this.#devices) {
      if (record.expiresAt < now - DEVICE_EXPIRY_SLACK_MS) {
        this.#devices.delete(digest);
        if (this.#userCodes.get(record.userCode) === digest) this.#userCodes.delete(record.userCode);
      }
    }
    for (const [jti, expiresAt] of this.#revokedAccessTokens) if (expiresAt < now) this.#revokedAccessTokens.delete(jti);
    for (const [digest, session] of this.#sessions) if (session.expiresAt < now) this.#sessions.delete(digest);
    for (const entries of [this.#loginRequests, this.#federationStates, this.#subjectClaims]) {
      for (const [key, entry] of entries) if (entry.expiresAt < now) entries.delete(key);
    }
    for (const [key, window] of this.#attempts) if (window.windowEndsAt <= now) this.#attempts.delete(key);
    for (const [key, expiresAt] of this.#usedOnce) if (expiresAt < now) this.#usedOnce.delete(key);
    for (const [key, entry] of this.#pushedRequests) if (entry.expiresAt < now) this.#pushedRequests.delete(key);
  }

  async close(): Promise<void> {}
}

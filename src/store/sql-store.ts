import { setImmediate as yieldToRequests } from 'node:timers/promises';
import type { Driver, Script, Step } from './driver.js';
import {
  codeLookupFromRow,
  codeParams,
  consentFromRow,
  consentParams,
  deviceFromRow,
  deviceParams,
  federationStateFromRow,
  federationStateParams,
  grantFromRow,
  grantHoldingFromRow,
  grantParams,
  grantSummaryFromRow,
  keyFromRow,
  keyParams,
  loginRequestFromRow,
  loginRequestParams,
  pushedRequestFromRow,
  pushedRequestParams,
  refreshLookupFromRow,
  refreshTokenInsertParams,
  registeredClientFromRow,
  registeredClientParams,
  sessionFromRow,
  sessionParams,
  type CodeRow,
  type ConsentRow,
  type DeviceRow,
  type FederationStateRow,
  type GrantHoldingRow,
  type GrantRow,
  type GrantSummaryRow,
  type KeyRow,
  type LoginRequestRow,
  type PushedRequestRow,
  type RefreshRow,
  type RegisteredClientRow,
  type SessionRow,
} from './rows.js';
import { DEVICE_EXPIRY_SLACK_MS, MAX_SESSIONS_PER_SUBJECT, grantExtension, type GrantExtension, grantKeptUntil, mayNeedExtension, oldestGrantFirst, oldestKeyFirst } from './rules.js';
import { RememberedHoldings } from './remembered-holdings.js';
import { grantQueries, REVOKE_BATCH, SQL, SWEEP_BATCH, type Statement } from './sql.js';
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

const step = (statement: Statement, values: readonly unknown[], guard = false): Step => ({ statement, values, guard });

/** The key_events row a store's first recordKeyEvents call adds: from then on, recorded events are changes (sql.ts recordKeyEvent). */
const BASELINE: KeyEvent = { kid: '', event: 'published' };

/** Adds `token` and extends its grant to outlive it (rules.ts), unless the grant's known expiry already does. */
function addRefreshToken(token: RefreshTokenRecord, grantExpiresAt?: number): Step[] {
  const extension = grantExtension(token);
  return [
    step(SQL.insertRefreshToken, refreshTokenInsertParams(token)),
    ...(mayNeedExtension(grantExpiresAt, extension) ? [step(SQL.extendGrant, [token.grantId, extension.expiresAt, extension.before])] : []),
  ];
}

/**
 * consumeCode as one statement (sql.ts atOnce) when it changes the grant's row at most once: with both the first
 * refresh token's extension and `kept` due (a refresh token living shorter than the access token), none.
 */
function consumeCodeAtOnce(digest: string, now: number, firstRefresh: RefreshTokenRecord | undefined, kept: GrantExtension | undefined): Step | undefined {
  const consumed = [digest, now];
  // Without either, the script is the consuming step alone: one statement already.
  if (firstRefresh === undefined) return kept === undefined ? undefined : step(SQL.consumeCodeExtendingAtOnce, [...consumed, kept.expiresAt, kept.before], true);
  if (kept !== undefined) return undefined;
  // The first refresh token of a grant always extends it (its expiry is not known here).
  const extension = grantExtension(firstRefresh);
  return step(SQL.consumeCodeWithTokenExtendingAtOnce, [...consumed, ...refreshTokenInsertParams(firstRefresh), extension.expiresAt, extension.before], true);
}

/** Deletes the grants `ids` (at most REVOKE_BATCH) with their codes and refresh tokens; the grants step comes first. */
function deleteGrants(ids: readonly string[]): Step[] {
  const values = Array.from({ length: REVOKE_BATCH }, (_, i) => ids[i] ?? null);
  return [step(SQL.deleteGrantsIn, values), step(SQL.deleteCodesOfGrantsIn, values), step(SQL.deleteRefreshTokensOfGrantsIn, values)];
}

/** Sweep statements in order, each with how its cutoff follows from `now`: a grant's codes and tokens go before it. */
const SWEEPS: readonly (readonly [Statement, (now: number) => number])[] = [
  [SQL.sweepUnusedCodes, (now) => now],
  [SQL.sweepCodesOfExpiredGrants, (now) => now],
  [SQL.sweepRefreshTokens, (now) => now],
  [SQL.sweepRefreshTokensOfExpiredGrants, (now) => now],
  [SQL.sweepGrants, (now) => now],
  [SQL.sweepConsentsOfAbandonedClients, (now) => now],
  [SQL.sweepRegisteredClients, (now) => now],
  [SQL.sweepDevices, (now) => now - DEVICE_EXPIRY_SLACK_MS],
  [SQL.sweepRevokedAccessTokens, (now) => now],
  [SQL.sweepSessions, (now) => now],
  [SQL.sweepLoginRequests, (now) => now],
  [SQL.sweepFederationStates, (now) => now],
  [SQL.sweepSubjectClaims, (now) => now],
  [SQL.sweepAttempts, (now) => now],
  [SQL.sweepUsedOnce, (now) => now],
  [SQL.sweepPushedRequests, (now) => now],
];

/** The Store of DESIGN.md §6 over a SQL database: every operation written once, the driver running the statements. */
export class SqlStore implements Store {
  readonly #driver: Driver;
  readonly #holdings = new RememberedHoldings();

  constructor(driver: Driver) {
    this.#driver = driver;
  }

  get description(): string {
    return this.#driver.description;
  }

  async loadOrCreateKeys(candidates: readonly StoredKey[]): Promise<StoredKey[]> {
    const [first, ...rest] = candidates;
    if (first !== undefined) {
      await this.#driver.script({
        alone: true,
        steps: [step(SQL.insertFirstKey, keyParams(first), true), ...rest.map((key) => step(SQL.insertKey, keyParams(key)))],
      });
    }
    return this.listKeys();
  }

  async listKeys(): Promise<StoredKey[]> {
    return (await this.#driver.read<KeyRow>(SQL.selectKeys, [])).map(keyFromRow).sort(oldestKeyFirst);
  }

  async addKeys(keys: readonly StoredKey[]): Promise<void> {
    await this.#driver.script({ steps: keys.map((key) => step(SQL.insertKey, keyParams(key))) });
  }

  async retireKey(kid: string, now: number): Promise<boolean> {
    return (await this.#driver.write(SQL.retireKey, [kid, now])).changes === 1;
  }

  async recordKeyEvents(events: readonly KeyEvent[], now: number): Promise<KeyEvent[]> {
    // In one order for every process, so two transactions recording the same rows wait for each other, never deadlock.
    const ordered = [...events].sort((a, b) => (a.kid === b.kid ? (a.event < b.event ? -1 : 1) : a.kid < b.kid ? -1 : 1));
    const changes = await this.#driver.script({
      steps: [BASELINE, ...ordered].map((event) => step(SQL.recordKeyEvent, [event.kid, event.event, now])),
    });
    if (changes === undefined || changes[0] === 1) return [];
    return ordered.filter((_, index) => changes[index + 1] === 1);
  }

  async revokeGrant(grantId: string): Promise<void> {
    await this.#driver.script({
      steps: [
        step(SQL.deleteGrant, [grantId], true),
        step(SQL.deleteCodesOfGrant, [grantId]),
        step(SQL.deleteRefreshTokensOfGrant, [grantId]),
      ],
    });
  }

  async findGrantHolding(grantId: string, jti: string | undefined, now: number): Promise<GrantHolding | undefined> {
    // Asked before the read: a commit that could change the row changes it, so nothing older is ever kept as new.
    const version = this.#driver.holdingsVersion?.();
    const key = jti === undefined ? grantId : `${grantId} ${jti}`;
    const remembered = version === undefined ? undefined : this.#holdings.find(key, version, now);
    if (remembered !== undefined) return remembered;
    const [row] = await this.#driver.read<GrantHoldingRow>(SQL.findGrantHolding, [grantId, now, jti ?? null]);
    if (row === undefined) return undefined;
    const holding = grantHoldingFromRow(row);
    // A revoked token is refused and not presented again; a revocation also expires, which a kept entry could not tell.
    if (version !== undefined && !holding.tokenRevoked) this.#holdings.keep(key, version, holding, Number(row.expires_at));
    return holding;
  }

  async findGrant(grantId: string, now: number): Promise<Grant | undefined> {
    const [row] = await this.#driver.read<GrantRow>(SQL.findGrant, [grantId, now]);
    return row === undefined ? undefined : grantFromRow(row);
  }

  async listGrants(filter: GrantFilter, now: number): Promise<GrantSummary[]> {
    const { list, values } = grantQueries(filter);
    const rows = await this.#driver.read<GrantSummaryRow>(list, [now, ...values]);
    return rows
      .flatMap((row) => grantSummaryFromRow(row) ?? [])
      .sort((a, b) => oldestGrantFirst(a.grant, b.grant));
  }

  async revokeGrants(filter: GrantFilter): Promise<number> {
    const { ids: nextIds, values } = grantQueries(filter);
    const { subject, clientId } = filter;
    if (clientId !== undefined) {
      await (subject === undefined
        ? this.#driver.write(SQL.deleteConsentsOfClient, [clientId])
        : this.#driver.write(SQL.deleteConsentsOfSubjectAndClient, [clientId, subject]));
    }
    let revoked = 0;
    let after = '';
    for (;;) {
      const ids = (await this.#driver.read<{ id: string }>(nextIds, [after, ...values])).map((row) => row.id);
      const last = ids.at(-1);
      if (last === undefined) return revoked;
      // One short transaction per batch: a grant revoked meanwhile (by /revoke, say) is simply not counted.
      revoked += (await this.#driver.script({ steps: deleteGrants(ids) }))?.[0] ?? 0;
      if (ids.length < REVOKE_BATCH) return revoked;
      after = last;
      await yieldToRequests();
    }
  }

  async revokeAccessToken(jti: string, expiresAt: number): Promise<void> {
    await this.#driver.write(SQL.revokeAccessToken, [jti, expiresAt]);
  }

  async isAccessTokenRevoked(jti: string, now: number): Promise<boolean> {
    return (await this.#driver.read(SQL.isAccessTokenRevoked, [jti, now])).length > 0;
  }

  async createGrantWithCode(grant: Grant, code: AuthorizationCodeRecord): Promise<void> {
    await this.#driver.script({ steps: [step(SQL.insertGrant, grantParams(grant)), step(SQL.insertCode, codeParams(code))] });
  }

  async findCode(digest: string, now: number): Promise<CodeLookup> {
    const [row] = await this.#driver.read<CodeRow>(SQL.findCode, [digest]);
    return codeLookupFromRow(row, now);
  }

  async consumeCode(digest: string, now: number, grantUntil: number, firstRefresh?: RefreshTokenRecord): Promise<boolean> {
    const kept = grantKeptUntil(grantUntil);
    const keep = mayNeedExtension(firstRefresh?.expiresAt, kept);
    // After the refresh token's extension, so the grant lives until the later of the two; none when that extension
    // (the grant then outlives the token) already keeps it long enough.
    const steps = [
      step(SQL.consumeCode, [digest, now], true),
      ...(firstRefresh === undefined ? [] : addRefreshToken(firstRefresh)),
      ...(keep ? [step(SQL.extendGrantOfCode, [digest, kept.expiresAt, kept.before])] : []),
    ];
    return this.#holds({ steps, atOnce: consumeCodeAtOnce(digest, now, firstRefresh, keep ? kept : undefined) });
  }

  async findRefreshToken(grantId: string, digest: string, now: number): Promise<RefreshLookup> {
    const [row] = await this.#driver.read<RefreshRow>(SQL.findRefreshToken, [grantId, digest]);
    return refreshLookupFromRow(row, now);
  }

  async rotateRefreshToken(oldDigest: string, next: RefreshTokenRecord, now: number, grantExpiresAt?: number): Promise<boolean> {
    // Nothing else is written when the old token was not active (RFC 9700 §4.14.2 reuse).
    const rotated = [next.grantId, oldDigest, now];
    const extension = grantExtension(next);
    const atOnce = mayNeedExtension(grantExpiresAt, extension)
      ? step(SQL.rotateExtendingAtOnce, [...rotated, ...refreshTokenInsertParams(next), extension.expiresAt, extension.before], true)
      : step(SQL.rotateAtOnce, [...rotated, ...refreshTokenInsertParams(next)], true);
    return this.#holds({ steps: [step(SQL.markRotated, rotated, true), ...addRefreshToken(next, grantExpiresAt)], atOnce });
  }

  async addRefreshToken(token: RefreshTokenRecord, now: number): Promise<boolean> {
    const extension = grantExtension(token);
    // The grant's row first: the guard, and the lock that keeps a concurrent revocation from missing the new token.
    return this.#holds({
      steps: [
        step(SQL.holdLiveGrant, [token.grantId, extension.expiresAt, extension.before, now], true),
        step(SQL.insertRefreshToken, refreshTokenInsertParams(token)),
      ],
    });
  }

  async createDeviceAuthorization(record: DeviceAuthorizationRecord): Promise<void> {
    // An expired record gives its user code up; a live one keeps it and the insert fails.
    await this.#driver.script({
      steps: [step(SQL.releaseUserCode, [record.userCode, record.createdAt]), step(SQL.insertDevice, deviceParams(record))],
    });
  }

  async findByUserCode(userCode: string, now: number): Promise<DeviceAuthorizationRecord | undefined> {
    const [row] = await this.#driver.read<DeviceRow>(SQL.findByUserCode, [userCode, now]);
    return row === undefined ? undefined : deviceFromRow(row);
  }

  async findByDeviceCode(deviceCodeDigest: string): Promise<DeviceAuthorizationRecord | undefined> {
    const [row] = await this.#driver.read<DeviceRow>(SQL.findByDeviceCode, [deviceCodeDigest]);
    return row === undefined ? undefined : deviceFromRow(row);
  }

  async recordPoll(deviceCodeDigest: string, now: number, tooFast: boolean): Promise<void> {
    await this.#driver.write(SQL.recordPoll, [deviceCodeDigest, now, tooFast ? 5 : 0]);
  }

  async decideDeviceAuthorization(
    userCode: string,
    decision: { approved: true; subject: string; claims: SubjectClaims; authTime: number } | { approved: false },
    now: number,
  ): Promise<boolean> {
    const written = decision.approved
      ? await this.#driver.write(SQL.approveDevice, [userCode, now, decision.subject, JSON.stringify(decision.claims), decision.authTime])
      : await this.#driver.write(SQL.denyDevice, [userCode, now]);
    return written.changes === 1;
  }

  async redeemDeviceCode(
    deviceCodeDigest: string,
    grant: Grant,
    refresh: RefreshTokenRecord | undefined,
    now: number,
  ): Promise<boolean> {
    return this.#holds({
      steps: [
        step(SQL.redeemDevice, [deviceCodeDigest, now], true),
        step(SQL.insertGrant, grantParams(grant)),
        ...(refresh === undefined ? [] : addRefreshToken(refresh)),
      ],
    });
  }

  async createSession(session: SessionRecord, replaces?: string): Promise<void> {
    await this.#driver.script({
      steps: [
        ...(replaces === undefined ? [] : [step(SQL.deleteSession, [replaces])]),
        step(SQL.insertSession, sessionParams(session)),
        step(SQL.trimSessionsOf, [session.subject, MAX_SESSIONS_PER_SUBJECT]),
      ],
    });
  }

  async findSession(digest: string, now: number): Promise<SessionRecord | undefined> {
    const [row] = await this.#driver.read<SessionRow>(SQL.findSession, [digest, now]);
    return row === undefined ? undefined : sessionFromRow(row);
  }

  async deleteSession(digest: string): Promise<void> {
    await this.#driver.write(SQL.deleteSession, [digest]);
  }

  async deleteSessionsOf(subject: string): Promise<number> {
    return (await this.#driver.write(SQL.deleteSessionsOf, [subject])).changes;
  }

  async saveLoginRequest(record: LoginRequestRecord): Promise<void> {
    await this.#driver.write(SQL.insertLoginRequest, loginRequestParams(record));
  }

  async findLoginRequest(id: string, now: number): Promise<LoginRequestRecord | undefined> {
    const [row] = await this.#driver.read<LoginRequestRow>(SQL.findLoginRequest, [id, now]);
    return row === undefined ? undefined : loginRequestFromRow(row);
  }

  async takeLoginRequest(id: string, now: number): Promise<LoginRequestRecord | undefined> {
    const [row] = (await this.#driver.write<LoginRequestRow>(SQL.takeLoginRequest, [id])).rows;
    return row === undefined || Number(row.expires_at) <= now ? undefined : loginRequestFromRow(row);
  }

  async saveFederationState(record: FederationStateRecord): Promise<void> {
    await this.#driver.write(SQL.insertFederationState, federationStateParams(record));
  }

  async findFederationState(state: string, now: number): Promise<FederationStateRecord | undefined> {
    const [row] = await this.#driver.read<FederationStateRow>(SQL.findFederationState, [state, now]);
    return row === undefined ? undefined : federationStateFromRow(row);
  }

  async takeFederationState(state: string, now: number): Promise<FederationStateRecord | undefined> {
    const [row] = (await this.#driver.write<FederationStateRow>(SQL.takeFederationState, [state])).rows;
    return row === undefined || Number(row.expires_at) <= now ? undefined : federationStateFromRow(row);
  }

  async saveSubjectClaims(subject: string, claims: SubjectClaims, expiresAt: number): Promise<void> {
    await this.#driver.write(SQL.saveSubjectClaims, [subject, JSON.stringify(claims), expiresAt]);
  }

  async findSubjectClaims(subject: string, now: number): Promise<SubjectClaims | undefined> {
    const [row] = await this.#driver.read<{ claims: string }>(SQL.findSubjectClaims, [subject, now]);
    return row === undefined ? undefined : (JSON.parse(row.claims) as SubjectClaims);
  }

  async saveRegisteredClient(record: RegisteredClientRecord): Promise<void> {
    await this.#driver.write(SQL.insertRegisteredClient, registeredClientParams(record));
  }

  async findRegisteredClient(clientId: string): Promise<RegisteredClientRecord | undefined> {
    const [row] = await this.#driver.read<RegisteredClientRow>(SQL.findRegisteredClient, [clientId]);
    return row === undefined ? undefined : registeredClientFromRow(row);
  }

  async keepRegisteredClient(clientId: string, until: number): Promise<void> {
    await this.#driver.write(SQL.keepRegisteredClient, [clientId, until]);
  }

  async deleteRegisteredClient(clientId: string): Promise<boolean> {
    const changed = await this.#driver.script({
      steps: [step(SQL.deleteRegisteredClient, [clientId]), step(SQL.deleteConsentsOfClient, [clientId])],
    });
    return changed?.[0] === 1;
  }

  async findConsent(subject: string, clientId: string, redirectOrigin: string): Promise<ConsentRecord | undefined> {
    const [row] = await this.#driver.read<ConsentRow>(SQL.findConsent, [subject, clientId, redirectOrigin]);
    return row === undefined ? undefined : consentFromRow(row);
  }

  async saveConsent(record: ConsentRecord): Promise<void> {
    await this.#driver.write(SQL.saveConsent, consentParams(record));
  }

  async countAttempt(key: string, now: number, windowMs: number): Promise<number> {
    const [row] = (await this.#driver.write<{ count: number }>(SQL.countAttempt, [key, now + windowMs, now])).rows;
    return row?.count ?? 1;
  }

  async peekAttempts(key: string, now: number): Promise<number> {
    const [row] = await this.#driver.read<{ count: number }>(SQL.peekAttempts, [key, now]);
    return row?.count ?? 0;
  }

  async forgiveAttempt(key: string, now: number): Promise<void> {
    await this.#driver.script({ steps: [step(SQL.forgiveAttempt, [key, now]), step(SQL.dropForgivenAttempt, [key])] });
  }

  async clearAttempts(key: string): Promise<void> {
    await this.#driver.write(SQL.clearAttempts, [key]);
  }

  async markAllUsedOnce(entries: readonly UsedOnceEntry[], now: number): Promise<UsedOnceOutcome> {
    // Each record is a guard: one found recorded and unexpired rolls the whole batch back.
    const steps = entries.map(({ kind, id, expiresAt }) => step(SQL.markUsedOnce, [kind, id, expiresAt, now], true));
    if (await this.#holds({ steps })) return { ok: true };
    return { ok: false, used: await this.#firstUsed(entries, now) };
  }

  async isUsedOnce(kind: ReplayKind, id: string, now: number): Promise<boolean> {
    return (await this.#driver.read(SQL.findUsedOnce, [kind, id, now])).length > 0;
  }

  async savePushedRequest(record: PushedRequestRecord): Promise<void> {
    await this.#driver.write(SQL.insertPushedRequest, pushedRequestParams(record));
  }

  async findPushedRequest(digest: string, clientId: string, now: number): Promise<PushedRequestRecord | undefined> {
    const [row] = await this.#driver.read<PushedRequestRow>(SQL.findPushedRequest, [digest, clientId, now]);
    return row === undefined ? undefined : pushedRequestFromRow(row);
  }

  async takePushedRequest(digest: string, clientId: string, now: number): Promise<boolean> {
    return (await this.#driver.write(SQL.takePushedRequest, [digest, clientId, now])).changes === 1;
  }

  async ping(): Promise<void> {
    await this.#driver.read(SQL.ping, []);
  }

  async sweep(now: number): Promise<void> {
    for (const [statement, cutoff] of SWEEPS) {
      while ((await this.#driver.write(statement, [cutoff(now)])).changes === SWEEP_BATCH) await yieldToRequests();
    }
  }

  async close(): Promise<void> {
    await this.#driver.close();
  }

  /**
   * The kind of the first of `entries` recorded and unexpired at `now`, read after a refused batch only to name it (a
   * request carries one credential of each kind at most). A record gone since (swept) names the first: only the text differs.
   */
  async #firstUsed(entries: readonly UsedOnceEntry[], now: number): Promise<ReplayKind> {
    for (const { kind, id } of entries) {
      if ((await this.#driver.read(SQL.findUsedOnce, [kind, id, now])).length > 0) return kind;
    }
    return (entries[0] as UsedOnceEntry).kind;
  }

  /** Runs `script`; true when every guard held and it committed. */
  async #holds(script: Script): Promise<boolean> {
    return (await this.#driver.script(script)) !== undefined;
  }
}

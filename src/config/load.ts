import { readFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import type { z } from 'zod';
import { LABELED_BLOCKS, SINGLE_BLOCKS, type HclBody } from './block-types.js';
import { splitTopLevel, type BlockInstance, type PlacedMessage } from './blocks.js';
import { checkReadableFile, exposureWarning, FILES_READ_AT_ONCE, mapAtMost, readSecretFile, readSmallFile } from './files.js';
import { parsePublicJwkSetText, unimportableKeyProblem } from '../crypto/jwk-set.js';
import { DEFAULT_COST, passwordCheckOf } from '../crypto/password.js';
import type { JSONWebKeySet } from 'jose';
import { deepFreeze, frozenMap } from './frozen.js';
import { readHcl } from './hcl.js';
import { ConfigInvalid, formatProblem } from './problems.js';
import { requestableReason } from '../policy/requestable.js';
import {
  clientSpec,
  DEFAULT_CLIENT_SCOPES,
  DEFAULT_DYNAMIC_SCOPES,
  DEFAULT_FEDERATION_SCOPES,
  DEFAULT_LIMITS,
  dynamicClientsSpec,
  federationSpec,
  limitsSpec,
  metricsSpec,
  resourceServerSpec,
  stateSpec,
  tlsSpec,
  tokenExchangeSpec,
  topLevelSpec,
  userSpec,
  type BlockSpec,
} from './schema.js';
import type { SourceEntry } from './source-index.js';
import { closestName } from './suggest.js';
import { formatListen } from './urls.js';
import { workersWithoutState } from './workers.js';
import type {
  ClientKind,
  ClientRecord,
  Config,
  ConfigProblem,
  DynamicClientsConfig,
  FederationRecord,
  LimitsConfig,
  ResourceServerRecord,
  StateConfig,
  TlsConfig,
  TokenExchangeConfig,
  UserRecord,
} from './types.js';

export { ConfigInvalid, formatProblem } from './problems.js';

const DEFAULT_LISTEN = { host: '127.0.0.1', port: 8080 } as const;
const DEFAULT_ACCESS_TOKEN_LIFETIME_MS = 3_600_000;

// OAuth client_id (RFC 6749 §2.2, VSCHAR) without spaces; usernames without whitespace; federation names go into URLs.
const CLIENT_LABEL = /^[\x21-\x7E]+$/;
// No colon: federated subjects are `upstream:sub`, and a local name must never equal one.
const USER_LABEL = /^[^\s\p{Cc}:]+$/u;
const FEDERATION_LABEL = /^[A-Za-z0-9._-]+$/;

/** Where a message points: a block (by name and source entry), or the top level. */
interface Place {
  readonly block?: string;
  readonly entry?: SourceEntry | undefined;
  /** The block type messages name ("known in client"); the first word of `block` when absent. */
  readonly kind?: string;
}

/** Collects problems and warnings with file, line and block, as DESIGN.md §3 asks of every message. */
class Findings {
  readonly problems: ConfigProblem[] = [];
  readonly warnings: ConfigProblem[] = [];

  constructor(
    readonly file: string,
    readonly source: readonly SourceEntry[],
  ) {}

  problem(message: PlacedMessage): void {
    this.problems.push(this.locate(message));
  }

  warning(message: PlacedMessage): void {
    this.warnings.push(this.locate(message));
  }

  /** Where `name` is written in the place's block, or at the top level. */
  written({ block, entry }: Place, name: string): SourceEntry | undefined {
    // A block the scanner could not find must not borrow a top-level attribute's line.
    if (block !== undefined && entry === undefined) return undefined;
    return (entry?.body ?? this.source).find((child) => child.name === name);
  }

  private locate({ block, entry, attribute, message }: PlacedMessage): ConfigProblem {
    const line = (attribute === undefined ? undefined : this.written({ block, entry }, attribute)?.line) ?? entry?.line;
    return {
      file: this.file,
      ...(line !== undefined && { line }),
      ...(block !== undefined && { block }),
      message: attribute === undefined ? message : `${attribute} ${message}`,
    };
  }
}

/**
 * The file's text, or ConfigInvalid naming the line of its first byte that is not UTF-8: read leniently, such a byte
 * would become U+FFFD inside a redirect URI or an audience entry without a word.
 */
function utf8Text(file: string, bytes: Buffer): string {
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    const lines = new TextDecoder('utf-8').decode(bytes).split('\n');
    const line = lines.findIndex((content) => content.includes('\uFFFD')) + 1;
    throw new ConfigInvalid([{ file, ...(line > 0 && { line }), message: 'is not UTF-8 text; save it as UTF-8' }]);
  }
}

/**
 * Reads, parses and validates a config file (DESIGN.md §3) into a frozen Config.
 * Throws ConfigInvalid listing every problem found; warnings (e.g. a secret file others can read) are returned.
 */
export async function loadConfig(file: string): Promise<{ config: Config; warnings: string[] }> {
  const absolute = resolve(file);
  let bytes: Buffer;
  try {
    bytes = await readFile(absolute);
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (error as Error).message;
    throw new ConfigInvalid([{ file, message: `cannot read the configuration file: ${reason}` }]);
  }
  const text = utf8Text(file, bytes);
  const read = await readHcl(file, text.replace(/^\uFEFF/, ''));
  if ('problems' in read) throw new ConfigInvalid(read.problems);

  const findings = new Findings(file, read.source);
  const config = await buildConfig(read.body, absolute, findings);
  const warnings = byLine(findings.warnings).map(formatProblem);
  if (findings.problems.length > 0 || !config) throw new ConfigInvalid(byLine(findings.problems), warnings);
  return { config, warnings };
}

async function buildConfig(body: HclBody, absolute: string, findings: Findings): Promise<Config | undefined> {
  const folder = dirname(absolute);
  const inFolder = (path: string): string => resolve(folder, path);
  const top = splitTopLevel(body, findings.source, (message) => findings.problem(message));

  const attributes = validate(topLevelSpec, top.attributes, {}, findings, [...SINGLE_BLOCKS, ...LABELED_BLOCKS]);
  const tls = await buildTls(top.single.tls, findings, inFolder);
  const state = await buildState(top.single.state, findings, inFolder);
  const users = top.labeled.user.map((instance) => buildUser(instance, findings));
  // Each block may read a file (a secret, a key set): a few at a time, so thousands of clients stay under EMFILE.
  const federations = await mapAtMost(top.labeled.federation, FILES_READ_AT_ONCE, (instance) => buildFederation(instance, findings, inFolder));
  const nameable = nameableAudience(top.labeled.client, top.single.dynamic_clients);
  const clients = await mapAtMost(top.labeled.client, FILES_READ_AT_ONCE, (instance) =>
    buildClient(instance, findings, inFolder, { issuer: attributes.base_url?.baseUrl, nameable }),
  );
  refuseClientsNamedLikePeople(top.labeled.client, top.labeled.user, top.labeled.federation, findings);
  const trustedProxies = attributes.trusted_proxies ?? [];
  warnAboutProxies(trustedProxies, top.single.tls, tls, findings);
  const limits = buildLimits(top.single.limits, findings);
  // An invalid top-level listen is reported already; comparing with it would only add noise.
  const listen = top.attributes.listen === undefined ? DEFAULT_LISTEN : attributes.listen;
  const metrics = buildMetrics(top.single.metrics, listen, findings);
  const dynamicClients = await buildDynamicClients(top.single.dynamic_clients, findings, inFolder);
  const workers = attributes.workers ?? 1;
  const needsState = state?.kind === 'memory' ? workersWithoutState(workers) : undefined;
  if (needsState !== undefined) findings.problem({ attribute: 'workers', message: `= ${JSON.stringify(workers)} ${needsState}` });
  const resourceServers = await mapAtMost(top.labeled.resource_server, FILES_READ_AT_ONCE, (instance) => buildResourceServer(instance, nameable, findings, inFolder));

  const canSignIn = top.labeled.user.length > 0 || top.labeled.federation.length > 0;
  if (!canSignIn) {
    const missing = 'but there is no user or federation block; add a user "name" { ... } or a federation "name" { ... } block';
    for (const instance of top.labeled.client) {
      const redirects = instance.body.redirect_uris;
      const needsPerson = instance.body.device === true || (Array.isArray(redirects) && redirects.length > 0);
      if (needsPerson) findings.problem({ block: instance.name, entry: instance.entry, message: `needs a person to sign in, ${missing}` });
    }
    // DESIGN.md §9: dynamic clients only use the authorization code flow, so always a person.
    const dynamic = top.single.dynamic_clients;
    if (dynamic) findings.problem({ block: dynamic.name, entry: dynamic.entry, message: `dynamic clients need a person to sign in, ${missing}` });
  }

  const base = attributes.base_url;
  if (findings.problems.length > 0 || !base || !tls || !state || !listen || !limits) return undefined;
  return deepFreeze({
    file: absolute,
    baseUrl: base.baseUrl,
    basePath: base.basePath,
    listen,
    workers,
    accessTokenLifetimeMs: attributes.access_token_lifetime ?? DEFAULT_ACCESS_TOKEN_LIFETIME_MS,
    logLevel: attributes.log_level ?? 'info',
    tls,
    state,
    users: recordMap(users, (user) => user.username),
    federations: recordMap(federations, (federation) => federation.name),
    clients: recordMap(clients, (client) => client.clientId),
    trustedProxies,
    limits,
    ...(metrics && { metrics }),
    resourceServers: recordMap(resourceServers, (server) => server.label),
    ...(dynamicClients && { dynamicClients }),
  });
}

/** In file order, so a reader can walk the file top to bottom; file-wide messages first. */
function byLine(problems: readonly ConfigProblem[]): ConfigProblem[] {
  return [...problems].sort((a, b) => (a.line ?? 0) - (b.line ?? 0));
}

function recordMap<T extends object>(records: readonly (T | undefined)[], key: (record: T) => string): ReadonlyMap<string, T> {
  return frozenMap(records.filter((record): record is T => record !== undefined).map((record) => [key(record), deepFreeze(record)] as const));
}

/**
 * Runs a block's schema and rules, reporting every issue, and returns the attributes that passed:
 * a partial result lets later checks (secret files, ...) still run when a neighbour is wrong.
 */
function validate<Schema extends z.ZodObject>(
  spec: BlockSpec<Schema>,
  body: HclBody,
  place: Place,
  findings: Findings,
  knownBlocks: readonly string[] = [],
): Partial<z.output<Schema>> {
  const result = spec.schema.safeParse(body);
  if (!result.success) {
    for (const issue of result.error.issues) {
      if (issue.code === 'unrecognized_keys') {
        for (const key of issue.keys) findings.problem(unknownKey(key, place, Object.keys(spec.schema.shape), knownBlocks, findings));
      } else {
        findings.problem({ ...place, ...describeIssue(issue) });
      }
    }
  }
  for (const rule of spec.rules(body)) findings.problem({ ...place, ...rule });
  if (result.success) return result.data as Partial<z.output<Schema>>;

  const partial: Record<string, unknown> = {};
  for (const [key, schema] of Object.entries(spec.schema.shape as Record<string, z.ZodType>)) {
    const field = schema.safeParse(body[key]);
    if (field.success && field.data !== undefined) partial[key] = field.data;
  }
  return partial as Partial<z.output<Schema>>;
}

function describeIssue(issue: z.core.$ZodIssue): { attribute?: string; message: string } {
  const [attribute, item] = issue.path;
  if (typeof attribute !== 'string') return { message: issue.message };
  // Messages that quote the offending value already say which entry; others get its position.
  const position = typeof item === 'number' && !issue.message.startsWith('"') ? `entry ${item + 1} ` : '';
  return { attribute, message: `${position}${issue.message}` };
}

function unknownKey(key: string, place: Place, attributes: readonly string[], blocks: readonly string[], findings: Findings): PlacedMessage {
  const written = findings.written(place, key);
  const kind = written?.kind === 'block' ? 'block' : 'attribute';
  const suggestion = closestName(key, [...attributes, ...blocks]);
  const blockType = place.kind ?? place.block?.split(' ')[0];
  const where = blockType === undefined ? '' : ` in ${blockType}`;
  let hint = `; known${where}: ${[...attributes, ...blocks].join(', ')}`;
  if (suggestion) hint = `; did you mean ${JSON.stringify(suggestion)}?`;
  else if (kind === 'block' && blocks.length === 0) hint = `; ${blockType} takes no nested blocks`;
  else if (kind === 'block' && blockType !== undefined) hint = `; ${blockType} takes only the nested block${blocks.length === 1 ? '' : 's'} ${blocks.join(', ')}`;
  return { block: place.block, entry: written ?? place.entry, message: `unknown ${kind} ${JSON.stringify(key)}${hint}` };
}

async function buildTls(instance: BlockInstance | undefined, findings: Findings, inFolder: (path: string) => string): Promise<TlsConfig | undefined> {
  if (!instance) return { mode: 'off' };
  const place = { block: instance.name, entry: instance.entry };
  const problemsBefore = findings.problems.length;
  const value = validate(tlsSpec, instance.body, place, findings);
  const certFile = value.cert_file === undefined ? undefined : inFolder(value.cert_file);
  const keyFile = value.key_file === undefined ? undefined : inFolder(value.key_file);
  for (const [attribute, path] of [['cert_file', certFile], ['key_file', keyFile]] as const) {
    if (path === undefined) continue;
    const unreadable = await checkReadableFile(path);
    if (unreadable) findings.problem({ ...place, attribute, message: unreadable });
  }
  if (keyFile) {
    const exposed = await exposureWarning(keyFile);
    if (exposed) findings.warning({ ...place, attribute: 'key_file', message: exposed });
  }
  if (findings.problems.length > problemsBefore) return undefined;
  const mode = value.mode ?? 'off';
  return mode === 'terminate' ? { mode, certFile, keyFile } : { mode };
}

async function buildState(
  instance: BlockInstance | undefined,
  findings: Findings,
  inFolder: (path: string) => string,
): Promise<StateConfig | undefined> {
  if (!instance) {
    findings.warning({ message: 'no state block: keys, grants and sessions are kept in memory and lost on restart; add state { path = "data/pinpoint.db" } to keep them' });
    return { kind: 'memory' };
  }
  const place = { block: instance.name, entry: instance.entry };
  const problemsBefore = findings.problems.length;
  const value = validate(stateSpec, instance.body, place, findings);
  let password: string | undefined;
  if (value.password_file !== undefined) {
    password = await secretFrom(value.password_file, 'password_file', place, findings, inFolder);
  }
  if (value.url !== undefined && new URL(value.url).password) {
    findings.warning({ ...place, attribute: 'url', message: 'holds a password; move it to a password_file readable only by Pinpoint' });
  }
  if (findings.problems.length > problemsBefore) return undefined;
  if (value.path !== undefined) return { kind: 'sqlite', path: inFolder(value.path) };
  if (value.url === undefined) return undefined;
  const postgres = { kind: 'postgres' as const, url: value.url, schema: value.schema ?? 'public' };
  return password === undefined ? postgres : { ...postgres, password };
}

function buildUser(instance: BlockInstance, findings: Findings): UserRecord | undefined {
  const place = { block: instance.name, entry: instance.entry };
  const username = instance.label ?? '';
  if (!USER_LABEL.test(username)) findings.problem({ ...place, message: 'the user name must be non-empty, without spaces, colons or control characters' });
  const value = validate(userSpec, instance.body, place, findings);
  if (value.password_hash === undefined) return undefined;
  const cost = passwordCheckOf('', value.password_hash)?.cost;
  // Weaker than new hashes, and a sign-in with it answers sooner than one for an unknown name: timing tells it exists.
  if (cost !== undefined && cost.N * cost.r * cost.p < DEFAULT_COST.N * DEFAULT_COST.r * DEFAULT_COST.p) {
    findings.warning({
      ...place,
      attribute: 'password_hash',
      message: `uses scrypt N = 2^${Math.log2(cost.N)}, r = ${cost.r}, p = ${cost.p}, cheaper than N = 2^17, r = 8, p = 1 of new hashes; make a new one with \`pinpoint hash-password\``,
    });
  }
  return {
    username,
    passwordHash: value.password_hash,
    ...(value.email !== undefined && { email: value.email }),
    ...(value.name !== undefined && { name: value.name }),
  };
}

async function buildFederation(
  instance: BlockInstance,
  findings: Findings,
  inFolder: (path: string) => string,
): Promise<FederationRecord | undefined> {
  const place = { block: instance.name, entry: instance.entry };
  const name = instance.label ?? '';
  if (!FEDERATION_LABEL.test(name)) {
    findings.problem({ ...place, message: 'the federation name may hold only letters, digits, ".", "_" and "-" (it appears in URLs)' });
  }
  const value = validate(federationSpec, instance.body, place, findings);
  const clientSecret = value.secret_file === undefined ? undefined : await secretFrom(value.secret_file, 'secret_file', place, findings, inFolder);
  if (value.issuer === undefined || value.client_id === undefined || clientSecret === undefined) return undefined;
  return {
    name,
    issuer: value.issuer,
    clientId: value.client_id,
    clientSecret,
    scopes: value.scopes ?? [...DEFAULT_FEDERATION_SCOPES],
    ...(value.subject_claim !== undefined && { subjectClaim: value.subject_claim }),
  };
}

/** The nested blocks a client block takes. */
const CLIENT_BLOCKS = ['token_exchange'] as const;

/**
 * DESIGN.md §3: a device client is public; one with secret_file or jwks_file is confidential. Read from what is written,
 * so an invalid secret_file is reported once, not again as "a public client".
 */
function clientKindOf(written: HclBody): ClientKind {
  if (written.device === true) return 'device';
  return written.secret_file !== undefined || written.jwks_file !== undefined ? 'confidential' : 'public';
}

async function buildClient(
  instance: BlockInstance,
  findings: Findings,
  inFolder: (path: string) => string,
  known: { readonly issuer: string | undefined; readonly nameable: NameableAudience },
): Promise<ClientRecord | undefined> {
  const place = { block: instance.name, entry: instance.entry };
  const clientId = instance.label ?? '';
  if (!CLIENT_LABEL.test(clientId)) {
    findings.problem({ ...place, message: 'the client_id (the label) must be non-empty printable ASCII without spaces' });
  }
  const { token_exchange: tokenExchangeBody, ...attributes } = instance.body;
  const value = validate(clientSpec, attributes, place, findings, CLIENT_BLOCKS);
  const kind = clientKindOf(attributes);
  const tokenExchange = tokenExchangeBody === undefined ? undefined : buildTokenExchange(tokenExchangeBody, instance, kind, findings, known);
  const device = kind === 'device';
  const secret =
    value.secret_file === undefined || device ? undefined : await secretFrom(value.secret_file, 'secret_file', place, findings, inFolder);
  const jwks = value.jwks_file === undefined || device ? undefined : await jwksFrom(value.jwks_file, place, findings, inFolder);
  const refreshReuseGraceMs = value.refresh_reuse_grace ?? 0;
  if (refreshReuseGraceMs > 0 && value.refresh_lifetime === undefined) {
    findings.warning({ ...place, attribute: 'refresh_reuse_grace', message: 'has no effect: without refresh_lifetime this client gets no refresh tokens' });
  }
  if (value.audience === undefined) return undefined;
  return {
    clientId,
    kind,
    ...(secret !== undefined && { secret }),
    ...(jwks !== undefined && { assertionKeys: { jwks } }),
    ...(value.require_dpop === true && { requireDpop: true }),
    ...(value.require_par === true && { requirePar: true }),
    redirectUris: value.redirect_uris ?? [],
    audience: value.audience,
    ...(value.refresh_lifetime !== undefined && { refreshLifetimeMs: value.refresh_lifetime }),
    scopes: value.scopes ?? [...DEFAULT_CLIENT_SCOPES],
    ...(value.display_name !== undefined && { displayName: value.display_name }),
    postLogoutRedirectUris: value.post_logout_redirect_uris ?? [],
    idTokenSigningAlg: value.id_token_signing_alg ?? 'RS256',
    refreshReuseGraceMs,
    ...(tokenExchange !== undefined && { tokenExchange }),
  };
}

/**
 * DESIGN.md §7: a client_credentials token's `sub` is its client_id, a person's is the user name or
 * `<federation>:<sub>`; a client label that could be either would let one `sub` mean both a person and a client.
 */
function refuseClientsNamedLikePeople(clients: readonly BlockInstance[], users: readonly BlockInstance[], federations: readonly BlockInstance[], findings: Findings): void {
  const lineOf = (instance: BlockInstance): string => (instance.entry?.line === undefined ? '' : ` (line ${instance.entry.line})`);
  for (const client of clients) {
    const clientId = client.label ?? '';
    const place = { block: client.name, entry: client.entry };
    const user = users.find((candidate) => candidate.label === clientId);
    if (user !== undefined) {
      findings.problem({
        ...place,
        message: `the client_id is also the name of ${user.name}${lineOf(user)}, so a token's sub would name both a person and a client; rename the client or the user`,
      });
    }
    const federation = federations.find((candidate) => candidate.label !== undefined && clientId.startsWith(`${candidate.label}:`));
    if (federation !== undefined) {
      findings.problem({
        ...place,
        message: `the client_id has the form of a person signed in through ${federation.name}${lineOf(federation)} ("${federation.label}:<subject>"), so a token's sub could name both a person and a client; rename the client`,
      });
    }
  }
}

/**
 * A client's `token_exchange { subject_audience = [...] }` block (DESIGN.md §3, §12): written once, without a label,
 * in a confidential client; each entry an address a token can be addressed to (an audience entry of some client that
 * can be named as resource), never the issuer, whose tokens are for the provider alone.
 */
function buildTokenExchange(
  body: unknown,
  client: BlockInstance,
  clientKind: ClientKind,
  findings: Findings,
  known: { readonly issuer: string | undefined; readonly nameable: NameableAudience },
): TokenExchangeConfig | undefined {
  const written = client.entry?.body.find((entry) => entry.name === 'token_exchange');
  const outer = { block: client.name, entry: written ?? client.entry };
  if (!Array.isArray(body) || !body.every((item) => typeof item === 'object' && item !== null && !Array.isArray(item))) {
    const labelled = written?.kind === 'block';
    findings.problem({ ...outer, message: labelled ? 'the token_exchange block takes no label; write token_exchange { ... }' : 'token_exchange must be a block: token_exchange { ... }, not token_exchange = ...' });
    return undefined;
  }
  if (body.length > 1) {
    findings.problem({ ...outer, message: 'token_exchange appears more than once; keep one token_exchange block' });
    return undefined;
  }
  const place = { block: `${client.name} token_exchange`, entry: written, kind: 'token_exchange' };
  const problemsBefore = findings.problems.length;
  if (clientKind !== 'confidential') {
    findings.problem({ ...place, message: `needs a confidential client (one with secret_file or jwks_file), but this is a ${clientKind} client` });
  }
  const value = validate(tokenExchangeSpec, body[0] as Record<string, unknown>, place, findings);
  for (const entry of value.subject_audience ?? []) {
    const problem =
      entry === known.issuer
        ? `lists the issuer ${JSON.stringify(entry)}; tokens addressed to it are for the provider alone and are never exchanged`
        : nameableProblem(entry, known.nameable, SUBJECT_AUDIENCE_WORDING);
    if (problem !== undefined) findings.problem({ ...place, attribute: 'subject_audience', message: problem });
  }
  if (findings.problems.length > problemsBefore || value.subject_audience === undefined) return undefined;
  return { subjectAudience: value.subject_audience };
}

function warnAboutProxies(trustedProxies: readonly string[], tlsBlock: BlockInstance | undefined, tls: TlsConfig | undefined, findings: Findings): void {
  if (tls?.mode === 'proxy' && trustedProxies.length === 0) {
    findings.warning({
      block: tlsBlock?.name,
      entry: tlsBlock?.entry,
      attribute: 'mode',
      message:
        'is "proxy" but trusted_proxies is empty: forwarded headers will be ignored, so every request seems to come from the proxy ' +
        '(one set of limits for everyone, the proxy\'s address in the logs); list the proxy, e.g. trusted_proxies = ["127.0.0.1"]',
    });
  }
  const everyone = trustedProxies.filter((entry) => /\/0+$/.test(entry));
  for (const entry of everyone) {
    findings.warning({
      attribute: 'trusted_proxies',
      message: `entry ${JSON.stringify(entry)} trusts every address, so any client can choose its own address with X-Forwarded-For; list only your proxies`,
    });
  }
}

function buildLimits(instance: BlockInstance | undefined, findings: Findings): LimitsConfig | undefined {
  if (!instance) return DEFAULT_LIMITS;
  const problemsBefore = findings.problems.length;
  const value = validate(limitsSpec, instance.body, { block: instance.name, entry: instance.entry }, findings);
  if (findings.problems.length > problemsBefore) return undefined;
  return {
    clientFailures: value.client_failures ?? DEFAULT_LIMITS.clientFailures,
    addressFailures: value.address_failures ?? DEFAULT_LIMITS.addressFailures,
    loginFailures: value.login_failures ?? DEFAULT_LIMITS.loginFailures,
    loginFailuresAny: value.login_failures_any ?? DEFAULT_LIMITS.loginFailuresAny,
    userCodeFailures: value.user_code_failures ?? DEFAULT_LIMITS.userCodeFailures,
    passwordHashes: value.password_hashes ?? DEFAULT_LIMITS.passwordHashes,
    addressConnections: value.address_connections ?? DEFAULT_LIMITS.addressConnections,
  };
}

type ListenAddress = Config['listen'];

function buildMetrics(instance: BlockInstance | undefined, main: ListenAddress | undefined, findings: Findings): Config['metrics'] {
  if (!instance) return undefined;
  const place = { block: instance.name, entry: instance.entry };
  const listen = validate(metricsSpec, instance.body, place, findings).listen;
  if (!listen) return undefined;
  if (main && sameListener(listen, main)) {
    findings.problem({
      ...place,
      attribute: 'listen',
      message: `${JSON.stringify(formatListen(listen))} is the main listen address (${formatListen(main)}); /metrics needs a listener of its own, e.g. "127.0.0.1:9464"`,
    });
  }
  return { listen };
}

/** Whether two listeners would claim the same socket: equal, or one on the wildcard address of the same port. */
function sameListener(a: ListenAddress, b: ListenAddress): boolean {
  if (a.port !== b.port || a.port === 0) return false;
  const wildcard = (host: string): boolean => host === '0.0.0.0' || host === '::';
  return a.host.toLowerCase() === b.host.toLowerCase() || wildcard(a.host) || wildcard(b.host);
}

async function buildDynamicClients(
  instance: BlockInstance | undefined,
  findings: Findings,
  inFolder: (path: string) => string,
): Promise<DynamicClientsConfig | undefined> {
  if (!instance) return undefined;
  const place = { block: instance.name, entry: instance.entry };
  const problemsBefore = findings.problems.length;
  const value = validate(dynamicClientsSpec, instance.body, place, findings);
  const registration = value.registration ?? 'off';
  const metadataDocuments = value.metadata_documents ?? false;
  const registrationToken =
    registration === 'token' && value.token_file !== undefined ? await secretFrom(value.token_file, 'token_file', place, findings, inFolder) : undefined;
  if (registration === 'off' && !metadataDocuments) {
    findings.warning({
      ...place,
      message: 'registration is "off" and metadata_documents is false, so no dynamic client can appear; set metadata_documents = true or registration = "open"',
    });
  }
  if (value.allow_private_addresses === true) {
    findings.warning({
      ...place,
      attribute: 'allow_private_addresses',
      message: 'is true: client metadata documents may be fetched from loopback and private addresses; for tests only, never in production',
    });
  }
  const refreshReuseGraceMs = value.refresh_reuse_grace ?? 0;
  if (refreshReuseGraceMs > 0 && value.refresh_lifetime === undefined) {
    findings.warning({ ...place, attribute: 'refresh_reuse_grace', message: 'has no effect: without refresh_lifetime dynamic clients get no refresh tokens' });
  }
  if (findings.problems.length > problemsBefore || value.audience === undefined) return undefined;
  return {
    audience: value.audience,
    metadataDocuments,
    registration,
    ...(registrationToken !== undefined && { registrationToken }),
    scopes: value.scopes ?? [...DEFAULT_DYNAMIC_SCOPES],
    ...(value.default_scope !== undefined && { defaultScope: value.default_scope }),
    ...(value.refresh_lifetime !== undefined && { refreshLifetimeMs: value.refresh_lifetime }),
    refreshReuseGraceMs,
    allowPrivateAddresses: value.allow_private_addresses ?? false,
  };
}

interface NameableAudience {
  /** Requestable audience entries of every client and of dynamic_clients. */
  readonly entries: ReadonlySet<string>;
  readonly clientIds: ReadonlySet<string>;
}

/** Audience entries as written in client and dynamic_clients blocks, valid or not, so one mistake is not reported twice. */
function nameableAudience(clients: readonly BlockInstance[], dynamic: BlockInstance | undefined): NameableAudience {
  const entries = new Set<string>();
  for (const body of [...clients.map((client) => client.body), ...(dynamic ? [dynamic.body] : [])]) {
    if (!Array.isArray(body.audience)) continue;
    for (const entry of body.audience) if (typeof entry === 'string' && requestableReason(entry) === undefined) entries.add(entry);
  }
  return { entries, clientIds: new Set(clients.map((client) => client.label ?? '')) };
}

/** How one block words each way an address can fail to be nameable; `hint` is "; did you mean ...?" or empty. */
interface NameableWording {
  readonly logicalName: (value: string) => string;
  readonly fragment: (value: string) => string;
  readonly unknown: (value: string, hint: string) => string;
}

/**
 * Why `value` is no address a token can be addressed to as resource (DESIGN.md §3, §12): not requestable (a logical
 * name, a fragment), or in the audience of no client nor of dynamic_clients; undefined when it is one.
 */
function nameableProblem(value: string, known: NameableAudience, wording: NameableWording): string | undefined {
  const reason = requestableReason(value);
  if (reason === 'logical name') return wording.logicalName(value);
  if (reason === 'contains a fragment') return wording.fragment(value);
  if (known.entries.has(value)) return undefined;
  const suggestion = closestName(value, [...known.entries]);
  return wording.unknown(value, suggestion === undefined ? '' : `; did you mean ${JSON.stringify(suggestion)}?`);
}

const RESOURCE_SERVER_WORDING: NameableWording = {
  logicalName: () => 'the label must be an audience entry that can be named as resource (an absolute URI without "#"), but it is a logical name',
  fragment: () => 'the label must be an audience entry that can be named as resource (an absolute URI without "#"), but it is a URI with a fragment',
  unknown: (_, hint) => `the label is not in the audience of any client or of dynamic_clients; a resource_server label must be an audience entry that can be named as resource${hint}`,
};

// DESIGN.md §12: a subject token is one addressed to the caller as a resource server, i.e. to a nameable address.
const SUBJECT_AUDIENCE_WORDING: NameableWording = {
  logicalName: (value) => `${JSON.stringify(value)} is not an absolute URI; list this client's own address as a resource server, e.g. "https://orders.example.org/"`,
  fragment: (value) => `${JSON.stringify(value)} must not contain a fragment ("#..."); list an address that can be named as resource`,
  unknown: (value, hint) => `lists ${JSON.stringify(value)}, which is in the audience of no client and not of dynamic_clients, so no token is ever addressed to it${hint}`,
};

async function buildResourceServer(
  instance: BlockInstance,
  known: NameableAudience,
  findings: Findings,
  inFolder: (path: string) => string,
): Promise<ResourceServerRecord | undefined> {
  const place = { block: instance.name, entry: instance.entry };
  const label = instance.label ?? '';
  // DESIGN.md §3: the label is a requestable audience entry, so it is what the server finds in a token's aud.
  const problem = nameableProblem(label, known, RESOURCE_SERVER_WORDING);
  if (problem !== undefined) findings.problem({ ...place, message: problem });
  if (known.clientIds.has(label)) {
    findings.problem({ ...place, message: 'the label is also a client_id; /introspect could not tell which one authenticates' });
  }
  const value = validate(resourceServerSpec, instance.body, place, findings);
  const secret = value.secret_file === undefined ? undefined : await secretFrom(value.secret_file, 'secret_file', place, findings, inFolder);
  return secret === undefined ? undefined : { label, secret };
}

/** Reads a client's jwks_file (DESIGN.md §7, §13): a regular file of at most 64 KiB holding a JWK Set of public keys. */
async function jwksFrom(written: string, place: Place, findings: Findings, inFolder: (path: string) => string): Promise<JSONWebKeySet | undefined> {
  const read = await readSmallFile(inFolder(written));
  const parsed = 'error' in read ? read : parsePublicJwkSetText(read.text);
  const problem = 'error' in parsed ? parsed.error : await unimportableKeyProblem(parsed.jwks);
  if (problem !== undefined) {
    findings.problem({ ...place, attribute: 'jwks_file', message: `${JSON.stringify(written)} ${problem}` });
    return undefined;
  }
  return 'jwks' in parsed ? parsed.jwks : undefined;
}

/** Reads a secret file named by an attribute, reporting a problem or a warning at that attribute. */
async function secretFrom(
  written: string,
  attribute: string,
  place: Place,
  findings: Findings,
  inFolder: (path: string) => string,
): Promise<string | undefined> {
  const result = await readSecretFile(inFolder(written));
  const label = `${JSON.stringify(written)} `;
  if (result.warning) findings.warning({ ...place, attribute, message: label + result.warning });
  if ('error' in result) {
    findings.problem({ ...place, attribute, message: label + result.error });
    return undefined;
  }
  return result.secret;
}

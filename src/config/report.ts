import { requestableReason, type UnrequestableReason } from '../policy/requestable.js';
import { formatDuration } from './duration.js';
import { formatProblem } from './problems.js';
import { formatListen } from './urls.js';
import { workerCount } from './workers.js';
import type { ClientKind, Config, ConfigProblem, DynamicClientsConfig, LimitsConfig, StateConfig, TlsMode } from './types.js';

/** What `pinpoint check` tells about a config (DESIGN.md §2); holds no secret and no password hash. */
export interface CheckReport {
  readonly valid: boolean;
  readonly file: string;
  readonly problems: readonly (ConfigProblem & { readonly text: string })[];
  readonly warnings: readonly string[];
  readonly issuer?: string;
  readonly listen?: string;
  /** As configured: a number, or "auto" (DESIGN.md §11). */
  readonly workers?: number | 'auto';
  readonly tls?: { readonly mode: TlsMode; readonly certFile?: string; readonly keyFile?: string };
  readonly signIn?: { readonly users: number; readonly federations: readonly FederationFacts[] };
  readonly state?: StateFacts;
  /** Present with `--probe` (not for memory state): whether the store could be reached. */
  readonly stateProbe?: ProbeResult;
  /** Addresses and CIDRs whose X-Forwarded-* headers are believed; empty: none. */
  readonly trustedProxies?: readonly string[];
  readonly limits?: LimitsConfig;
  /** The metrics listener ("host:port"); absent: no metrics listener. */
  readonly metrics?: { readonly listen: string };
  /** Labels only: a resource server's secret is never shown. */
  readonly resourceServers?: readonly { readonly label: string }[];
  readonly dynamicClients?: DynamicClientFacts;
  readonly clients?: readonly ClientFacts[];
}

/** The dynamic_clients block without its registration token. */
export interface DynamicClientFacts {
  readonly audience: readonly AudienceFacts[];
  readonly registration: DynamicClientsConfig['registration'];
  readonly metadataDocuments: boolean;
  readonly scopes: readonly string[];
  readonly defaultScope?: string;
  readonly refreshLifetime?: string;
  readonly refreshLifetimeMs?: number;
  readonly refreshReuseGrace: string;
  readonly refreshReuseGraceMs: number;
  readonly allowPrivateAddresses: boolean;
}

export interface FederationFacts {
  readonly name: string;
  readonly issuer: string;
  readonly scopes: readonly string[];
  /** Present with `--probe`: whether the issuer's discovery document answered and matched. */
  readonly probe?: ProbeResult;
}

export interface ProbeResult {
  readonly ok: boolean;
  readonly detail: string;
}

export type StateFacts =
  | { readonly kind: 'memory' }
  | { readonly kind: 'sqlite'; readonly path: string }
  | {
      readonly kind: 'postgres';
      readonly host: string;
      readonly port: number;
      readonly database: string;
      readonly schema: string;
      readonly user?: string;
      readonly passwordFrom: 'password_file' | 'url' | 'environment';
    };

export interface AudienceFacts {
  readonly value: string;
  readonly requestable: boolean;
  readonly reason?: UnrequestableReason;
}

export interface ClientFacts {
  readonly clientId: string;
  readonly kind: ClientKind;
  readonly redirectUris: readonly string[];
  readonly audience: readonly AudienceFacts[];
  /** Go-style, e.g. "720h"; absent when the client gets no refresh tokens. */
  readonly refreshLifetime?: string;
  readonly refreshLifetimeMs?: number;
  readonly scopes: readonly string[];
  readonly displayName?: string;
  readonly postLogoutRedirectUris: readonly string[];
  readonly idTokenSigningAlg: 'RS256' | 'ES256';
  /** Go-style, "0s" when rotated refresh tokens may not be presented again. */
  readonly refreshReuseGrace: string;
  readonly refreshReuseGraceMs: number;
  /** How it authenticates at /token (DESIGN.md §13): a secret, private_key_jwt (jwks_file), or none (public, device). */
  readonly authentication: 'client_secret' | 'private_key_jwt' | 'none';
  readonly requireDpop: boolean;
  readonly requirePar: boolean;
  /** The token_exchange block (DESIGN.md §12): whose tokens the client may exchange; absent without one. */
  readonly tokenExchange?: { readonly subjectAudience: readonly string[] };
}

/** The facts of a valid config. */
export function describeConfig(config: Config, warnings: readonly string[]): CheckReport {
  return {
    valid: true,
    file: config.file,
    problems: [],
    warnings,
    issuer: config.baseUrl,
    listen: formatListen(config.listen),
    workers: config.workers ?? 1,
    tls: config.tls,
    signIn: {
      users: config.users.size,
      federations: [...config.federations.values()].map(({ name, issuer, scopes }) => ({ name, issuer, scopes })),
    },
    state: describeState(config.state),
    trustedProxies: config.trustedProxies,
    limits: config.limits,
    ...(config.metrics && { metrics: { listen: formatListen(config.metrics.listen) } }),
    resourceServers: [...config.resourceServers.values()].map(({ label }) => ({ label })),
    ...(config.dynamicClients && { dynamicClients: describeDynamicClients(config.dynamicClients) }),
    clients: [...config.clients.values()].map((client) => ({
      clientId: client.clientId,
      kind: client.kind,
      redirectUris: client.redirectUris,
      audience: client.audience.map(describeAudienceEntry),
      ...(client.refreshLifetimeMs !== undefined && {
        refreshLifetime: formatDuration(client.refreshLifetimeMs),
        refreshLifetimeMs: client.refreshLifetimeMs,
      }),
      scopes: client.scopes,
      ...(client.displayName !== undefined && { displayName: client.displayName }),
      postLogoutRedirectUris: client.postLogoutRedirectUris,
      idTokenSigningAlg: client.idTokenSigningAlg,
      refreshReuseGrace: formatDuration(client.refreshReuseGraceMs),
      refreshReuseGraceMs: client.refreshReuseGraceMs,
      authentication: client.assertionKeys !== undefined ? 'private_key_jwt' : client.secret !== undefined ? 'client_secret' : 'none',
      requireDpop: client.requireDpop === true,
      requirePar: client.requirePar === true,
      ...(client.tokenExchange !== undefined && { tokenExchange: { subjectAudience: client.tokenExchange.subjectAudience } }),
    })),
  };
}

function describeDynamicClients(dynamic: DynamicClientsConfig): DynamicClientFacts {
  return {
    audience: dynamic.audience.map(describeAudienceEntry),
    registration: dynamic.registration,
    metadataDocuments: dynamic.metadataDocuments,
    scopes: dynamic.scopes,
    ...(dynamic.defaultScope !== undefined && { defaultScope: dynamic.defaultScope.join(' ') }),
    ...(dynamic.refreshLifetimeMs !== undefined && {
      refreshLifetime: formatDuration(dynamic.refreshLifetimeMs),
      refreshLifetimeMs: dynamic.refreshLifetimeMs,
    }),
    refreshReuseGrace: formatDuration(dynamic.refreshReuseGraceMs),
    refreshReuseGraceMs: dynamic.refreshReuseGraceMs,
    allowPrivateAddresses: dynamic.allowPrivateAddresses,
  };
}

/** The report of a config that did not load: its problems and warnings only. */
export function describeInvalid(file: string, problems: readonly ConfigProblem[], warnings: readonly string[]): CheckReport {
  return { valid: false, file, problems: problems.map((problem) => ({ ...problem, text: formatProblem(problem) })), warnings };
}

export function describeAudienceEntry(value: string): AudienceFacts {
  const reason = requestableReason(value);
  return reason === undefined ? { value, requestable: true } : { value, requestable: false, reason };
}

/** Where state lives, with the PostgreSQL password left out (it may sit in the URL). */
export function describeState(state: StateConfig): StateFacts {
  if (state.kind !== 'postgres') return state;
  const url = new URL(state.url);
  return {
    kind: 'postgres',
    host: decodeURIComponent(url.hostname) || 'localhost',
    port: url.port ? Number(url.port) : 5432,
    database: decodeURIComponent(url.pathname.replace(/^\//, '')) || decodeURIComponent(url.username) || '(default)',
    schema: state.schema,
    ...(url.username && { user: decodeURIComponent(url.username) }),
    passwordFrom: state.password !== undefined ? 'password_file' : url.password ? 'url' : 'environment',
  };
}

/** The human layout of a report: one section per topic, one table per client's audience. */
export function renderReport(report: CheckReport): string {
  const lines: string[] = [];
  if (!report.valid) {
    lines.push(`${report.file}: the configuration is not valid (${plural(report.problems.length, 'problem')}):`);
    for (const problem of report.problems) lines.push(`  ${problem.text}`);
    appendWarnings(lines, report.warnings);
    return `${lines.join('\n')}\n`;
  }

  lines.push(`${report.file}: the configuration is valid.`, '');
  const facts: [string, string][] = [
    ['issuer', report.issuer ?? ''],
    ['listen', report.listen ?? ''],
    ['workers', describeWorkers(report.workers ?? 1)],
    ['tls', describeTls(report)],
    ['sign-in', describeSignIn(report)],
    ['persistence', `${report.state ? describeStateLine(report.state) : ''}${report.stateProbe ? `  probe: ${report.stateProbe.ok ? 'ok' : 'FAILED'}, ${report.stateProbe.detail}` : ''}`],
    ['trusted proxies', report.trustedProxies?.length ? report.trustedProxies.join(' ') : '(none: forwarded headers are ignored)'],
    ['metrics', report.metrics ? `${report.metrics.listen} (GET /metrics)` : '(off)'],
    ['limits', report.limits ? describeLimits(report.limits) : ''],
  ];
  lines.push(...table(facts));
  for (const federation of report.signIn?.federations ?? []) {
    const probe = federation.probe ? `  probe: ${federation.probe.ok ? 'ok' : 'FAILED'}, ${federation.probe.detail}` : '';
    lines.push(`  federation ${JSON.stringify(federation.name)}  ${federation.issuer}  scopes ${federation.scopes.join(' ')}${probe}`);
  }

  if (report.resourceServers?.length) {
    lines.push('', 'resource servers (may call /introspect)');
    for (const server of report.resourceServers) lines.push(`  ${server.label}`);
  }

  const dynamic = report.dynamicClients;
  if (dynamic) {
    lines.push('', 'dynamic clients');
    const rows: [string, string][] = [
      ['registration', describeRegistration(dynamic.registration)],
      ['metadata documents', dynamic.metadataDocuments ? 'on (client_id may be an https URL)' : 'off'],
      ['scopes', dynamic.scopes.length > 0 ? dynamic.scopes.join(' ') : '(none)'],
      ['default scope', dynamic.defaultScope ?? '(none: a request without scope is refused)'],
      ['refresh lifetime', dynamic.refreshLifetime ?? '(no refresh tokens)'],
    ];
    if (dynamic.refreshReuseGraceMs > 0) rows.push(['refresh reuse grace', dynamic.refreshReuseGrace]);
    if (dynamic.allowPrivateAddresses) rows.push(['private addresses', 'allowed (tests only)']);
    lines.push(...table(rows).map((line) => `  ${line}`));
    lines.push(...audienceTable(dynamic.audience));
  }

  for (const client of report.clients ?? []) {
    lines.push('', `client ${JSON.stringify(client.clientId)} (${client.kind})`);
    const rows: [string, string][] = [];
    if (client.displayName !== undefined) rows.push(['display name', client.displayName]);
    rows.push(['redirect URIs', client.redirectUris.length > 0 ? client.redirectUris.join(' ') : '(none)']);
    if (client.postLogoutRedirectUris.length > 0) rows.push(['post-logout URIs', client.postLogoutRedirectUris.join(' ')]);
    rows.push(['refresh lifetime', client.refreshLifetime ?? '(no refresh tokens)']);
    if (client.refreshReuseGraceMs > 0) rows.push(['refresh reuse grace', client.refreshReuseGrace]);
    if (client.idTokenSigningAlg !== 'RS256') rows.push(['ID token alg', client.idTokenSigningAlg]);
    if (client.authentication === 'private_key_jwt') rows.push(['authentication', 'private_key_jwt (jwks_file)']);
    if (client.requireDpop) rows.push(['DPoP', 'required']);
    if (client.requirePar) rows.push(['PAR', 'required']);
    rows.push(['scopes', client.scopes.length > 0 ? client.scopes.join(' ') : '(none)']);
    if (client.tokenExchange !== undefined) rows.push(['token exchange', `exchanges tokens addressed to ${client.tokenExchange.subjectAudience.join(' ')}`]);
    lines.push(...table(rows).map((line) => `  ${line}`));
    lines.push(...audienceTable(client.audience));
  }
  appendWarnings(lines, report.warnings);
  return `${lines.join('\n')}\n`;
}

/** An audience with the requestable column (DESIGN.md §2), indented under its client. */
function audienceTable(audience: readonly AudienceFacts[]): string[] {
  const rows: [string, string][] = [['audience', 'requestable']];
  for (const entry of audience) rows.push([`  ${entry.value}`, entry.requestable ? 'yes' : `no (${entry.reason})`]);
  return table(rows).map((line) => `  ${line}`);
}

function describeLimits(limits: LimitsConfig): string {
  const perMinute = `client_failures ${limits.clientFailures}, address_failures ${limits.addressFailures} per minute`;
  const perWindow = `login_failures ${limits.loginFailures}, login_failures_any ${limits.loginFailuresAny}, user_code_failures ${limits.userCodeFailures} per 15 minutes`;
  return `${perMinute}; ${perWindow}; address_connections ${limits.addressConnections} open at once`;
}

function describeWorkers(workers: number | 'auto'): string {
  const count = workerCount(workers);
  const processes = `${plural(count, 'worker')} beside the supervising primary`;
  return workers === 'auto' ? `auto: ${processes} here (the CPUs this process may use)` : processes;
}

function describeRegistration(registration: DynamicClientsConfig['registration']): string {
  if (registration === 'open') return 'open (POST /register, anyone)';
  if (registration === 'token') return 'token (POST /register with the initial access token from token_file)';
  return 'off';
}

function describeTls(report: CheckReport): string {
  const tls = report.tls;
  if (!tls) return '';
  if (tls.mode === 'terminate') return `terminate (cert ${tls.certFile}, key ${tls.keyFile})`;
  return tls.mode === 'proxy' ? 'proxy (TLS ends at a reverse proxy in front)' : 'off (plain HTTP)';
}

function describeSignIn(report: CheckReport): string {
  const signIn = report.signIn;
  if (!signIn) return '';
  const federations = signIn.federations.length === 0 ? 'no federation' : plural(signIn.federations.length, 'federation upstream');
  return `${plural(signIn.users, 'local user')}, ${federations}`;
}

function describeStateLine(state: StateFacts): string {
  if (state.kind === 'memory') return 'memory (lost on restart)';
  if (state.kind === 'sqlite') return `SQLite ${state.path}`;
  const user = state.user ? ` as ${state.user}` : '';
  return `PostgreSQL ${state.host}:${state.port} database ${state.database} schema ${state.schema}${user} (password from ${state.passwordFrom})`;
}

function appendWarnings(lines: string[], warnings: readonly string[]): void {
  if (warnings.length === 0) return;
  lines.push('', `${plural(warnings.length, 'warning')}:`);
  for (const warning of warnings) lines.push(`  ${warning}`);
}

function table(rows: readonly (readonly [string, string])[]): string[] {
  const width = Math.max(...rows.map(([key]) => key.length));
  return rows.map(([key, value]) => `${key.padEnd(width)}  ${value}`);
}

function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}

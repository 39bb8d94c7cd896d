import { requestableReason, type UnrequestableReason } from '../policy/requestable.js';
import { formatDuration } from './duration.js';
import { formatProblem } from './problems.js';
import type { ClientKind, Config, ConfigProblem, StateConfig, TlsMode } from './types.js';

/** What `pinpoint check` tells about a config (DESIGN.md §2); holds no secret and no password hash. */
export interface CheckReport {
  readonly valid: boolean;
  readonly file: string;
  readonly problems: readonly (ConfigProblem & { readonly text: string })[];
  readonly warnings: readonly string[];
  readonly issuer?: string;
  readonly listen?: string;
  readonly tls?: { readonly mode: TlsMode; readonly certFile?: string; readonly keyFile?: string };
  readonly signIn?: { readonly users: number; readonly federations: readonly FederationFacts[] };
  readonly state?: StateFacts;
  readonly clients?: readonly ClientFacts[];
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
}

/** The facts of a valid config. */
export function describeConfig(config: Config, warnings: readonly string[]): CheckReport {
  return {
    valid: true,
    file: config.file,
    problems: [],
    warnings,
    issuer: config.baseUrl,
    listen: config.listen.host.includes(':') ? `[${config.listen.host}]:${config.listen.port}` : `${config.listen.host}:${config.listen.port}`,
    tls: config.tls,
    signIn: {
      users: config.users.size,
      federations: [...config.federations.values()].map(({ name, issuer, scopes }) => ({ name, issuer, scopes })),
    },
    state: describeState(config.state),
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
    })),
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
    ['tls', describeTls(report)],
    ['sign-in', describeSignIn(report)],
    ['persistence', report.state ? describeStateLine(report.state) : ''],
  ];
  lines.push(...table(facts));
  for (const federation of report.signIn?.federations ?? []) {
    const probe = federation.probe ? `  probe: ${federation.probe.ok ? 'ok' : 'FAILED'}, ${federation.probe.detail}` : '';
    lines.push(`  federation ${JSON.stringify(federation.name)}  ${federation.issuer}  scopes ${federation.scopes.join(' ')}${probe}`);
  }

  for (const client of report.clients ?? []) {
    lines.push('', `client ${JSON.stringify(client.clientId)} (${client.kind})`);
    lines.push(
      ...table([
        ['redirect URIs', client.redirectUris.length > 0 ? client.redirectUris.join(' ') : '(none)'],
        ['refresh lifetime', client.refreshLifetime ?? '(no refresh tokens)'],
        ['scopes', client.scopes.length > 0 ? client.scopes.join(' ') : '(none)'],
      ]).map((line) => `  ${line}`),
    );
    const rows: [string, string][] = [['audience', 'requestable']];
    for (const entry of client.audience) rows.push([`  ${entry.value}`, entry.requestable ? 'yes' : `no (${entry.reason})`]);
    lines.push(...table(rows).map((line) => `  ${line}`));
  }
  appendWarnings(lines, report.warnings);
  return `${lines.join('\n')}\n`;
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

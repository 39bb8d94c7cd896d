import { isIP } from 'node:net';
import { z } from 'zod';
import { isPasswordHash } from '../crypto/password.js';
import { isAbsoluteUri } from '../policy/requestable.js';
import { parseDuration } from './duration.js';
import type { LimitsConfig } from './types.js';
import { parseBaseUrl, parseIssuerUrl } from './urls.js';
import { wholeNumber } from './whole-number.js';
import { workersAttribute } from './workers.js';

/** One attribute-level complaint from a rule that looks at several attributes of a block. */
export interface RuleIssue {
  /** The attribute to point at; absent for the block as a whole. */
  readonly attribute?: string;
  readonly message: string;
}

/** Rules that relate a block's attributes; run on the raw attributes even when some are invalid, so every problem shows at once. */
export type BlockRules = (raw: Readonly<Record<string, unknown>>) => RuleIssue[];

/** A block's attribute schema plus the rules that relate its attributes to each other. */
export interface BlockSpec<Schema extends z.ZodObject> {
  readonly schema: Schema;
  readonly rules: BlockRules;
}

const spec = <Schema extends z.ZodObject>(schema: Schema, rules: BlockRules = () => []): BlockSpec<Schema> => ({ schema, rules });

const quote = (value: unknown): string => JSON.stringify(value);

// hcl2json turns references and arithmetic into "${...}" strings; the config takes literals only.
const EXPRESSION = /[$%]\{/;

/** A literal string; `what` completes "must be ..." when the value has another type. */
function text(what = 'a string in quotes', whenMissing = 'is required') {
  return z
    .string({ error: (issue) => (issue.input === undefined ? whenMissing : `must be ${what}`) })
    .refine((value) => !EXPRESSION.test(value), { error: 'is an expression; only literal values in quotes are allowed' });
}

function nonEmptyText(what?: string, whenMissing?: string) {
  return text(what, whenMissing).refine((value) => value.length > 0, { error: 'must not be empty' });
}

/** A list without repeated entries: a repeat is almost always a copy-and-paste slip. */
function uniqueList<T extends z.ZodType<string>>(item: T, what: string, whenMissing?: string) {
  return z
    .array(item, { error: (issue) => (issue.input === undefined ? (whenMissing ?? 'is required') : `must be a list of ${what}, e.g. ["a", "b"]`) })
    .superRefine((values, context) => {
      values.forEach((value, index) => {
        if (values.indexOf(value) !== index) context.addIssue({ code: 'custom', message: `lists ${quote(value)} more than once` });
      });
    });
}

function duration(example: string) {
  return text(`a duration in quotes, e.g. "${example}"`).transform((value, context) => {
    const milliseconds = parseDuration(value);
    if (milliseconds !== undefined) return milliseconds;
    context.issues.push({ code: 'custom', input: value, message: `${quote(value)} is not a duration; use e.g. ${example} or 30d` });
    return z.NEVER;
  });
}

/** The longest refresh_reuse_grace DESIGN.md §3 allows. */
export const MAX_REUSE_GRACE_MS = 60_000;

// DESIGN.md §6: a grace may be none ("0s"), and is short by design.
const reuseGrace = text('a duration in quotes, e.g. "10s"').transform((value, context) => {
  const milliseconds = parseDuration(value, { zero: true });
  if (milliseconds === undefined) {
    context.issues.push({ code: 'custom', input: value, message: `${quote(value)} is not a duration; use e.g. 10s, or 0s for none` });
    return z.NEVER;
  }
  if (milliseconds > MAX_REUSE_GRACE_MS) {
    context.issues.push({ code: 'custom', input: value, message: `${quote(value)} is longer than the most allowed, "60s"` });
    return z.NEVER;
  }
  return milliseconds;
});

// RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E )
const SCOPE_TOKEN = /^[\x21\x23-\x5B\x5D-\x7E]+$/;
const scopeList = uniqueList(
  text('a string').refine((value) => SCOPE_TOKEN.test(value), {
    error: (issue) => `${quote(issue.input)} is not a scope token (printable ASCII without spaces, quotes or backslashes)`,
  }),
  'scope names',
);

// RFC 6749 §3.3: scope = scope-token *( SP scope-token ), as a request's scope parameter is written.
const scopeString = text('a string in quotes, e.g. "openid mcp"').transform((value, context) => {
  const values = value.split(' ');
  if (!values.every((item) => SCOPE_TOKEN.test(item))) {
    context.issues.push({
      code: 'custom',
      input: value,
      message: `${quote(value)} is not a scope string; write scope values separated by single spaces, e.g. "openid mcp"`,
    });
    return z.NEVER;
  }
  const repeated = values.find((item, index) => values.indexOf(item) !== index);
  if (repeated !== undefined) {
    context.issues.push({ code: 'custom', input: value, message: `lists ${quote(repeated)} more than once` });
    return z.NEVER;
  }
  return values;
});

// RFC 6749 §3.1.2: a redirection endpoint is an absolute URI without a fragment.
const redirectUri = text().superRefine((value, context) => {
  if (!isAbsoluteUri(value) || !URL.canParse(value)) {
    context.addIssue({ code: 'custom', message: `${quote(value)} is not an absolute URI; write e.g. "https://app.example.org/callback"` });
  } else if (value.includes('#')) {
    context.addIssue({ code: 'custom', message: `${quote(value)} must not contain a fragment ("#...")` });
  }
});

const baseUrl = text('a URL in quotes', 'is required; write the public URL of this server, e.g. base_url = "https://auth.example.org"').transform(
  (value, context) => {
    const parsed = parseBaseUrl(value);
    if (!('error' in parsed)) return parsed;
    context.issues.push({ code: 'custom', input: value, message: `${quote(value)} ${parsed.error}` });
    return z.NEVER;
  },
);

const LISTEN = /^(?:\[([0-9A-Fa-f:.]+)\]|([^\s:[\]]+)):(\d{1,5})$/;
function listenAddress(example: string, whenMissing?: string) {
  return text('"host:port" in quotes', whenMissing).transform((value, context) => {
    const match = LISTEN.exec(value);
    const port = Number(match?.[3]);
    // An IP literal must be one (a bracketed IPv6 address; four dotted numbers an IPv4 address): else serve would
    // fail to listen with a resolver's error that names neither the attribute nor the file.
    const addressOk = match?.[1] !== undefined ? isIP(match[1]) === 6 : !/^[\d.]+$/.test(match?.[2] ?? '') || isIP(match?.[2] ?? '') === 4;
    if (match && port <= 65535 && addressOk) return { host: (match[1] ?? match[2]) as string, port };
    context.issues.push({ code: 'custom', input: value, message: `${quote(value)} is not host:port; write e.g. "${example}" or "[::1]:${example.split(':')[1]}"` });
    return z.NEVER;
  });
}

/** Why a trusted_proxies entry is not an address or CIDR that node:net's BlockList takes, or undefined when it is. */
function proxyEntryProblem(entry: string): string | undefined {
  const [address = '', prefix, extra] = entry.split('/');
  if (address.includes('%')) return 'has a zone index ("%..."); write the address without it';
  const family = isIP(address);
  if (family === 0 || extra !== undefined) {
    return 'is not an IP address or CIDR; write e.g. "10.0.0.0/8", "192.0.2.7" or "::1" (host names are not resolved)';
  }
  const bits = family === 4 ? 32 : 128;
  if (prefix !== undefined && (!/^\d{1,3}$/.test(prefix) || Number(prefix) > bits)) return `has a prefix length that is not a number from 0 to ${bits}`;
  return undefined;
}

const proxyEntry = text().superRefine((value, context) => {
  const problem = proxyEntryProblem(value);
  if (problem) context.addIssue({ code: 'custom', message: `${quote(value)} ${problem}` });
});

const audienceList = (example: string, whom: string) =>
  uniqueList(nonEmptyText(), 'resource server identifiers', `is required; list the resource servers ${whom} get tokens for, e.g. audience = [${quote(example)}]`).refine(
    (values) => values.length > 0,
    { error: `must list at least one entry, e.g. [${quote(example)}]` },
  );

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
const TLS_MODES = ['off', 'proxy', 'terminate'] as const;
const ID_TOKEN_ALGS = ['RS256', 'ES256'] as const;
const REGISTRATION_MODES = ['off', 'open', 'token'] as const;

function oneOf<const T extends readonly [string, ...string[]]>(values: T) {
  return z.enum(values, { error: (issue) => `is ${quote(issue.input)}; use one of ${values.map((v) => quote(v)).join(', ')}` });
}

const boolean = z.boolean({ error: 'must be true or false (without quotes)' });

/** Top-level attributes (the blocks are split off before this runs). */
export const topLevelSpec = spec(
  z.strictObject({
    base_url: baseUrl,
    listen: listenAddress('127.0.0.1:8080').optional(),
    access_token_lifetime: duration('1h').optional(),
    log_level: oneOf(LOG_LEVELS).optional(),
    trusted_proxies: uniqueList(proxyEntry, 'addresses or CIDRs').optional(),
    workers: workersAttribute.optional(),
  }),
);

/** The most any limit may be set to: beyond it a limit no longer limits. */
const MAX_LIMIT = 1_000_000;

const limit = wholeNumber(MAX_LIMIT, 300);

/** The most password checks at once (DESIGN.md §11): each holds about 128 MiB at the default scrypt cost. */
const MAX_PASSWORD_HASHES = 64;

const passwordHashes = wholeNumber(MAX_PASSWORD_HASHES, 2, ' (each check in flight holds about 128 MiB)');

/** DESIGN.md §3 `limits`, with §4's numbers as defaults. */
export const DEFAULT_LIMITS: LimitsConfig = Object.freeze({
  clientFailures: 300,
  addressFailures: 300,
  loginFailures: 10,
  loginFailuresAny: 100,
  userCodeFailures: 20,
  passwordHashes: 2,
  // Browsers open at most 6 per host: room for an office behind one address and for load tests, not for a flood.
  addressConnections: 1024,
});

export const limitsSpec = spec(
  z.strictObject({
    client_failures: limit.optional(),
    address_failures: limit.optional(),
    login_failures: limit.optional(),
    login_failures_any: limit.optional(),
    user_code_failures: limit.optional(),
    password_hashes: passwordHashes.optional(),
    address_connections: limit.optional(),
  }),
);

export const metricsSpec = spec(
  z.strictObject({
    listen: listenAddress('127.0.0.1:9464', 'is required; write e.g. listen = "127.0.0.1:9464"'),
  }),
);

export const tlsSpec = spec(
  z.strictObject({
    mode: oneOf(TLS_MODES).optional(),
    cert_file: nonEmptyText().optional(),
    key_file: nonEmptyText().optional(),
  }),
  (raw) => {
    const issues: RuleIssue[] = [];
    const terminate = raw.mode === 'terminate';
    for (const attribute of ['cert_file', 'key_file'] as const) {
      if (terminate && raw[attribute] === undefined) issues.push({ attribute, message: 'is required when mode = "terminate"' });
      if (!terminate && raw[attribute] !== undefined) {
        issues.push({ attribute, message: `is only used when mode = "terminate" (mode is ${quote(raw.mode ?? 'off')}); set the mode or remove it` });
      }
    }
    return issues;
  },
);

const POSTGRES_URL = /^postgres(?:ql)?:\/\//;
// Lower case only: PostgreSQL folds unquoted names, so "Auth" and "auth" would be a trap.
const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

export const stateSpec = spec(
  z.strictObject({
    path: nonEmptyText().optional(),
    url: nonEmptyText()
      .refine((value) => POSTGRES_URL.test(value) && URL.canParse(value), {
        error: 'must be a PostgreSQL URL starting with postgres:// or postgresql://, e.g. "postgres://pinpoint@db.internal:5432/pinpoint"',
      })
      .optional(),
    schema: text()
      .refine((value) => SCHEMA_NAME.test(value), {
        error: (issue) => `${quote(issue.input)} is not a schema name; use lower-case letters, digits and _ (at most 63)`,
      })
      .optional(),
    password_file: nonEmptyText().optional(),
  }),
  (raw) => {
    const issues: RuleIssue[] = [];
    if (raw.path !== undefined && raw.url !== undefined) {
      issues.push({ attribute: 'url', message: 'cannot be combined with path; keep path (SQLite) or url (PostgreSQL)' });
    }
    if (raw.path === undefined && raw.url === undefined) {
      issues.push({ message: 'needs path = "data/pinpoint.db" (SQLite) or url = "postgres://..." (PostgreSQL); without a state block, state is kept in memory' });
    }
    if (raw.path !== undefined && raw.url === undefined) {
      for (const attribute of ['schema', 'password_file'] as const) {
        if (raw[attribute] !== undefined) issues.push({ attribute, message: 'is only used with url (PostgreSQL)' });
      }
    }
    return issues;
  },
);

export const userSpec = spec(
  z.strictObject({
    password_hash: text('a string in quotes', 'is required; generate it with `pinpoint hash-password`').refine(isPasswordHash, {
      error: 'is not a hash made by `pinpoint hash-password`; generate one with it',
    }),
    email: text()
      .refine((value) => /^[^\s@]+@[^\s@]+$/.test(value), { error: (issue) => `${quote(issue.input)} is not an e-mail address` })
      .optional(),
    name: nonEmptyText().optional(),
  }),
);

export const federationSpec = spec(
  z.strictObject({
    issuer: text('a URL in quotes', 'is required; write the upstream issuer, e.g. issuer = "https://idp.example.org"').transform((value, context) => {
      const parsed = parseIssuerUrl(value);
      if (!('error' in parsed)) return parsed.issuer;
      context.issues.push({ code: 'custom', input: value, message: `${quote(value)} ${parsed.error}` });
      return z.NEVER;
    }),
    client_id: nonEmptyText(undefined, 'is required; write the client_id registered at the upstream issuer'),
    secret_file: nonEmptyText(undefined, 'is required; name a file holding the client secret registered at the upstream issuer'),
    scopes: scopeList
      .refine((values) => values.includes('openid'), { error: 'must contain "openid" (this is OpenID Connect sign-in)' })
      .optional(),
    subject_claim: nonEmptyText().optional(),
  }),
);

export const clientSpec = spec(
  z.strictObject({
    secret_file: nonEmptyText().optional(),
    redirect_uris: uniqueList(redirectUri, 'URIs').optional(),
    audience: audienceList('https://api.example.org/', 'this client'),
    refresh_lifetime: duration('720h').optional(),
    scopes: scopeList.optional(),
    device: boolean.optional(),
    display_name: nonEmptyText()
      .refine((value) => !/\p{Cc}/u.test(value), { error: 'must not contain control characters (such as line breaks)' })
      .optional(),
    post_logout_redirect_uris: uniqueList(redirectUri, 'URIs').optional(),
    id_token_signing_alg: oneOf(ID_TOKEN_ALGS).optional(),
    refresh_reuse_grace: reuseGrace.optional(),
    jwks_file: nonEmptyText().optional(),
    require_dpop: boolean.optional(),
    require_par: boolean.optional(),
  }),
  (raw) => {
    const issues: RuleIssue[] = [];
    const hasRedirects = Array.isArray(raw.redirect_uris) && raw.redirect_uris.length > 0;
    // DESIGN.md §13: a client with jwks_file authenticates with private_key_jwt and has no secret.
    if (raw.jwks_file !== undefined && raw.secret_file !== undefined && raw.device !== true) {
      issues.push({ attribute: 'jwks_file', message: 'is not allowed with secret_file: a client authenticates either with private_key_jwt (jwks_file) or with a secret; keep one' });
    }
    if (raw.device === true) {
      // DESIGN.md §3: a device client is always public and never redirects.
      if (raw.secret_file !== undefined) issues.push({ attribute: 'secret_file', message: 'is not allowed with device = true (a device client is public)' });
      if (raw.jwks_file !== undefined) issues.push({ attribute: 'jwks_file', message: 'is not allowed with device = true (a device client is public)' });
      if (raw.require_par === true) issues.push({ attribute: 'require_par', message: 'is not allowed with device = true (the device flow has no /authorize)' });
      if (raw.redirect_uris !== undefined) issues.push({ attribute: 'redirect_uris', message: 'is not allowed with device = true (the device flow has no redirect)' });
      if (raw.post_logout_redirect_uris !== undefined) {
        issues.push({ attribute: 'post_logout_redirect_uris', message: 'is not allowed with device = true (a device client has no browser to send back)' });
      }
    } else if (raw.secret_file === undefined && raw.jwks_file === undefined && !hasRedirects) {
      const message = 'a public client needs redirect_uris; or set device = true, or give it a secret_file for client_credentials';
      issues.push(raw.redirect_uris === undefined ? { message } : { attribute: 'redirect_uris', message });
    }
    return issues;
  },
);

/** A client's `token_exchange` block (DESIGN.md §3, §12). */
export const tokenExchangeSpec = spec(
  z.strictObject({
    // Each entry is checked against the clients' audiences in load.ts (nameableProblem).
    subject_audience: uniqueList(
      text(),
      'URIs',
      'is required; list the addresses whose tokens this client may exchange, e.g. subject_audience = ["https://orders.example.org/"]',
    ).refine((values) => values.length > 0, { error: 'must list at least one entry, e.g. ["https://orders.example.org/"]' }),
  }),
);

export const DEFAULT_CLIENT_SCOPES = ['openid', 'profile', 'email'] as const;
export const DEFAULT_FEDERATION_SCOPES = ['openid', 'email', 'profile'] as const;

export const resourceServerSpec = spec(
  z.strictObject({
    secret_file: nonEmptyText(undefined, 'is required; name a file holding the secret this resource server sends to /introspect'),
  }),
);

export const DEFAULT_DYNAMIC_SCOPES = ['openid', 'profile', 'email'] as const;

export const dynamicClientsSpec = spec(
  z.strictObject({
    audience: audienceList('https://mcp.example.org/mcp', 'dynamic clients'),
    metadata_documents: boolean.optional(),
    registration: oneOf(REGISTRATION_MODES).optional(),
    token_file: nonEmptyText().optional(),
    scopes: scopeList.optional(),
    default_scope: scopeString.optional(),
    refresh_lifetime: duration('720h').optional(),
    refresh_reuse_grace: reuseGrace.optional(),
    allow_private_addresses: boolean.optional(),
  }),
  (raw) => {
    const issues: RuleIssue[] = [];
    if (raw.registration === 'token' && raw.token_file === undefined) {
      issues.push({ attribute: 'token_file', message: 'is required when registration = "token"; name a file holding the initial access token' });
    }
    if (raw.registration !== 'token' && raw.token_file !== undefined) {
      const mode = typeof raw.registration === 'string' ? raw.registration : 'off';
      issues.push({ attribute: 'token_file', message: `is only used when registration = "token" (registration is ${quote(mode)}); set it or remove token_file` });
    }
    const scopes: readonly unknown[] = Array.isArray(raw.scopes) ? raw.scopes : DEFAULT_DYNAMIC_SCOPES;
    if (typeof raw.default_scope === 'string') {
      for (const value of new Set(raw.default_scope.split(' '))) {
        if (value !== '' && !scopes.includes(value)) {
          issues.push({ attribute: 'default_scope', message: `holds ${quote(value)}, which is not in scopes; add it to scopes or remove it here` });
        }
      }
    }
    return issues;
  },
);

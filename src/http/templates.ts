/**
 * The pages' HTML (DESIGN.md §4 "Sign-in page contract", §8): small functions of plain values, so route code never
 * writes markup. Every value goes through the `html` tag, which escapes it unless it is already Html.
 */
import { html, type Html } from './pages.js';

const NOTHING = html``;

/** The error line above a form, or nothing. */
function alertLine(message: string | undefined): Html {
  return message === undefined ? NOTHING : html`<p class="error" role="alert">${message}</p>`;
}

/** What a client asks for, as the approval and consent pages list it. */
export function scopeList(scope: readonly string[]): Html {
  const items = scope.length === 0 ? html`<li>no particular scope</li>` : scope.map((value) => html`<li><code>${value}</code></li>`);
  return html`<ul class="scopes">${items}</ul>`;
}

/** The sign-out button of Pinpoint's own pages: a POST to /logout with the CSRF token (DESIGN.md §8). */
export function signOutForm(basePath: string, csrf: string): Html {
  return html`<form method="post" action="${basePath}/logout" class="sign-out">
<input type="hidden" name="csrf" value="${csrf}">
<input type="hidden" name="confirm" value="yes">
<button type="submit" class="secondary">Sign out</button>
</form>`;
}

/** A hidden field a form carries back to the server. */
export interface HiddenField {
  readonly name: string;
  readonly value: string;
}

/**
 * The one allow/deny form (the consent page and the device approval page): `decision` is `allowValue` or `deny`,
 * and `carried` says which request the answer is for (a login id or a user code).
 */
export function decisionForm(action: string, csrf: string, carried: HiddenField, allowValue: string, allowLabel: string): Html {
  return html`<form method="post" action="${action}">
<input type="hidden" name="csrf" value="${csrf}">
<input type="hidden" name="${carried.name}" value="${carried.value}">
<button type="submit" name="decision" value="${allowValue}">${allowLabel}</button>
<button type="submit" name="decision" value="deny" class="secondary">Deny</button>
</form>`;
}

export interface SignInView {
  readonly basePath: string;
  readonly csrf: string;
  readonly loginId: string;
  /** The client the sign-in continues to, as the person knows it; absent when it is for a device approval. */
  readonly client?: string;
  /** Whether the username/password form is offered (there are local users). */
  readonly localUsers: boolean;
  /** Names of the upstreams offered as buttons, in configuration order. */
  readonly upstreams: readonly string[];
  /** What was typed before, shown again. */
  readonly username: string;
  readonly message?: string;
}

/** The buttons that start an upstream sign-in (GET /federation/start), or nothing. */
export function upstreamList(basePath: string, loginId: string, upstreams: readonly string[]): Html {
  if (upstreams.length === 0) return NOTHING;
  const items = upstreams.map(
    (name) => html`<li><a class="button" href="${basePath}/federation/start?login=${loginId}&amp;upstream=${encodeURIComponent(name)}">Sign in with ${name}</a></li>`,
  );
  return html`<ul class="upstreams">${items}</ul>`;
}

/** The sign-in page: inputs `username`, `password`, `csrf` and `login`, posted to /login (DESIGN.md §4). */
export function signInPage(view: SignInView): Html {
  const clientLine =
    view.client === undefined
      ? html`<p class="muted">to approve a device</p>`
      : html`<p class="muted">to continue to <strong>${view.client}</strong></p>`;
  const localForm = !view.localUsers
    ? NOTHING
    : html`<form method="post" action="${view.basePath}/login">
<input type="hidden" name="csrf" value="${view.csrf}">
<input type="hidden" name="login" value="${view.loginId}">
<label for="username">Username</label>
<input type="text" id="username" name="username" autocomplete="username" autocapitalize="none" spellcheck="false" required value="${view.username}">
<label for="password">Password</label>
<input type="password" id="password" name="password" autocomplete="current-password" required>
<button type="submit">Sign in</button>
</form>`;
  return html`<h1>Sign in</h1>
${clientLine}
${alertLine(view.message)}
${localForm}
${upstreamList(view.basePath, view.loginId, view.upstreams)}`;
}

/**
 * Where a dynamic client comes from, as far as the server knows (DESIGN.md §8): `verified` is its metadata document's
 * host; `claimed` is the host of the client_uri it registered (its own word); neither when it said nothing.
 */
export type ClientOrigin =
  | { readonly kind: 'verified'; readonly host: string }
  | { readonly kind: 'claimed'; readonly host: string }
  | { readonly kind: 'unknown' };

function originLine(origin: ClientOrigin): Html {
  switch (origin.kind) {
    case 'verified':
      return html`Verified: its description is published at <strong>${origin.host}</strong>.`;
    case 'claimed':
      return html`It says it is from <strong>${origin.host}</strong>; this is not verified.`;
    case 'unknown':
      return html`It did not say where it comes from.`;
  }
}

export interface ConsentView {
  readonly basePath: string;
  readonly csrf: string;
  readonly loginId: string;
  /** The name the client gave itself (self-asserted), or its client_id. */
  readonly clientName: string;
  readonly origin: ClientOrigin;
  /** The host of the redirect URI the answer goes to. */
  readonly returnsTo: string;
  readonly scope: readonly string[];
  /** The services the token would be for (policy/resource.ts grantAudience). */
  readonly resources: readonly string[];
  readonly signedInAs: string;
}

/** The consent page of a dynamic client (DESIGN.md §8): allow or deny, posted to /consent. */
export function consentPage(view: ConsentView): Html {
  return html`<h1>Allow ${view.clientName}?</h1>
<p><strong>${view.clientName}</strong> asks to act on your behalf.</p>
<p class="muted">${originLine(view.origin)} After your answer you go back to <strong>${view.returnsTo}</strong>.</p>
<p>It asks for:</p>
${scopeList(view.scope)}
<p>for these services:</p>
<ul class="resources">${view.resources.map((resource) => html`<li><code>${resource}</code></li>`)}</ul>
<p class="muted">Signed in as ${view.signedInAs}.</p>
${decisionForm(`${view.basePath}/consent`, view.csrf, { name: 'login', value: view.loginId }, 'allow', 'Allow')}
${signOutForm(view.basePath, view.csrf)}`;
}

/** The device page's first form: one input named `user_code` (RFC 8628 §3.3, DESIGN.md §4). */
export function deviceEntryPage(basePath: string, csrf: string, typed: string, message?: string): Html {
  return html`<h1>Connect a device</h1>
<p class="muted">Enter the code your device shows.</p>
${alertLine(message)}
<form method="post" action="${basePath}/device">
<input type="hidden" name="csrf" value="${csrf}">
<label for="user_code">Code</label>
<input type="text" id="user_code" name="user_code" value="${typed}" autocomplete="off" autocapitalize="characters" spellcheck="false" maxlength="64" required autofocus>
<button type="submit">Continue</button>
</form>`;
}

export interface DeviceApprovalView {
  readonly basePath: string;
  readonly csrf: string;
  /** The device's client, as the person knows it (its display_name when it has one). */
  readonly client: string;
  /** The user code as stored (the form carries it back). */
  readonly userCode: string;
  /** The user code as the device shows it (RFC 8628 §5.4: shown again so a person sent a link can notice). */
  readonly shownCode: string;
  readonly scope: readonly string[];
  readonly signedInAs: string;
}

/** The device approval page: approve or deny, posted to /device. */
export function deviceApprovalPage(view: DeviceApprovalView): Html {
  return html`<h1>Approve a device</h1>
<p><strong>${view.client}</strong> asks to act on your behalf.</p>
<p class="muted">Only continue if your device shows the code <code>${view.shownCode}</code>.</p>
<p>It asks for:</p>
${scopeList(view.scope)}
<p class="muted">Signed in as ${view.signedInAs}.</p>
${decisionForm(`${view.basePath}/device`, view.csrf, { name: 'user_code', value: view.userCode }, 'approve', 'Approve')}
${signOutForm(view.basePath, view.csrf)}`;
}

export function deviceApprovedPage(client: string): Html {
  return html`<h1>Device connected</h1>
<p><strong>${client}</strong> is approved. Return to your device; it continues by itself.</p>`;
}

export function deviceDeniedPage(client: string): Html {
  return html`<h1>Request denied</h1>
<p><strong>${client}</strong> gets no access. You can close this page.</p>`;
}

export interface LogoutConfirmationView {
  readonly basePath: string;
  readonly csrf: string;
  /** The name of the client asking, when one is named. */
  readonly clientName?: string;
  readonly clientId?: string;
  readonly postLogoutRedirectUri?: string;
  readonly state?: string;
}

/** The sign-out confirmation (RP-Initiated Logout 1.0): a CSRF-protected POST to /logout carrying the request back. */
export function logoutConfirmationPage(view: LogoutConfirmationView): Html {
  const carried = (name: string, value: string | undefined): Html =>
    value === undefined ? NOTHING : html`<input type="hidden" name="${name}" value="${value}">`;
  return html`<h1>Sign out?</h1>
${view.clientName === undefined ? NOTHING : html`<p class="muted">${view.clientName} asks to sign you out.</p>`}
<form method="post" action="${view.basePath}/logout">
<input type="hidden" name="csrf" value="${view.csrf}">
<input type="hidden" name="confirm" value="yes">
${carried('client_id', view.clientId)}
${carried('post_logout_redirect_uri', view.postLogoutRedirectUri)}
${carried('state', view.state)}
<button type="submit">Sign out</button>
</form>`;
}

export function signedOutPage(): Html {
  return html`<h1>You are signed out</h1>
<p class="muted">You can close this page.</p>`;
}

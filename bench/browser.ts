/**
 * A browser signing in through the password form, as DESIGN.md §4 "Sign-in page contract" describes it: GET /authorize
 * (redirects followed, cookies kept), the page's one form holding `username` and `password` (plus its hidden inputs)
 * filled in and posted, and the redirects followed until one leads to the client's redirect URI with a code.
 * Over an undici dispatcher of the server's origin; every request bounded in time.
 */
import { randomBytes } from 'node:crypto';
import type { Dispatcher } from 'undici';
import { challengeOf, newVerifier } from './pkce.js';

/** Redirects followed before and after the form, at most. */
const MAX_HOPS = 8;
/** A sign-in waits for a hashing slot at most 5 s (DESIGN.md §11), then hashes: far below this. */
const REQUEST_TIMEOUT_MS = 30_000;

export interface Client {
  readonly clientId: string;
  readonly redirectUri: string;
  readonly scope: string;
}

/** The form of a page: where it posts and the values of its named inputs. */
export interface PageForm {
  readonly action: string;
  readonly method: string;
  readonly fields: Map<string, string>;
}

/** A sign-in the server answered with something other than the contract's (status kept: 503 means no hashing slot). */
export class SignInFailed extends Error {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

const ENTITIES: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" };

/** The text an HTML attribute value stands for (named entities of the templates, numeric references). */
function decodeAttribute(value: string): string {
  return value.replace(/&(#x[0-9a-f]+|#\d+|[a-z]+);/gi, (whole, name: string) => {
    if (name.startsWith('#x') || name.startsWith('#X')) return String.fromCodePoint(Number.parseInt(name.slice(2), 16));
    if (name.startsWith('#')) return String.fromCodePoint(Number(name.slice(1)));
    return ENTITIES[name.toLowerCase()] ?? whole;
  });
}

/** The attributes of one start tag, e.g. `<input type="hidden" name="csrf" value="...">`. */
function attributes(tag: string): Map<string, string> {
  const found = new Map<string, string>();
  for (const match of tag.matchAll(/([a-zA-Z_:][-a-zA-Z0-9_:.]*)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+)))?/g)) {
    const name = (match[1] as string).toLowerCase();
    if (!found.has(name)) found.set(name, decodeAttribute(match[2] ?? match[3] ?? match[4] ?? ''));
  }
  return found;
}

/** The page's form that holds an input named `password`, or undefined when it has none. */
export function passwordForm(html: string): PageForm | undefined {
  for (const match of html.matchAll(/<form\b([^>]*)>([\s\S]*?)<\/form>/gi)) {
    const fields = new Map<string, string>();
    for (const input of (match[2] as string).matchAll(/<input\b([^>]*)>/gi)) {
      const attrs = attributes(input[1] as string);
      const name = attrs.get('name');
      const type = (attrs.get('type') ?? 'text').toLowerCase();
      // A browser posts a submit input only when it is the one clicked, and an unchecked box not at all.
      if (name === undefined || type === 'submit' || type === 'button' || ((type === 'checkbox' || type === 'radio') && !attrs.has('checked'))) continue;
      fields.set(name, attrs.get('value') ?? '');
    }
    if (!fields.has('password') || !fields.has('username')) continue;
    const form = attributes(match[1] as string);
    return { action: form.get('action') ?? '', method: (form.get('method') ?? 'get').toLowerCase(), fields };
  }
  return undefined;
}

/** Cookies as a browser keeps them for one origin: name to value, from each answer's Set-Cookie. */
class CookieJar {
  readonly #cookies = new Map<string, string>();

  take(headers: Dispatcher.ResponseData['headers']): void {
    const set = headers['set-cookie'];
    for (const line of Array.isArray(set) ? set : set === undefined ? [] : [set]) {
      const pair = line.split(';')[0] as string;
      const eq = pair.indexOf('=');
      if (eq > 0) this.#cookies.set(pair.slice(0, eq).trim(), pair.slice(eq + 1).trim());
    }
  }

  header(): string {
    return [...this.#cookies].map(([name, value]) => `${name}=${value}`).join('; ');
  }
}

interface Answer {
  readonly status: number;
  readonly location: URL | undefined;
  readonly body: string;
}

async function visit(dispatcher: Dispatcher, jar: CookieJar, signal: AbortSignal | undefined, url: URL, form?: URLSearchParams): Promise<Answer> {
  const response = await dispatcher.request({
    origin: url.origin,
    path: `${url.pathname}${url.search}`,
    method: form === undefined ? 'GET' : 'POST',
    headers: {
      accept: 'text/html',
      cookie: jar.header(),
      ...(form === undefined ? {} : { 'content-type': 'application/x-www-form-urlencoded' }),
    },
    ...(form === undefined ? {} : { body: form.toString() }),
    headersTimeout: REQUEST_TIMEOUT_MS,
    bodyTimeout: REQUEST_TIMEOUT_MS,
    ...(signal === undefined ? {} : { signal }),
  });
  jar.take(response.headers);
  const body = await response.body.text();
  const location = response.headers.location;
  return { status: response.statusCode, location: typeof location === 'string' ? new URL(location, url) : undefined, body };
}

/**
 * One sign-in by a new browser (no cookies yet): from /authorize to the redirect carrying the code. Returns the
 * code and its PKCE verifier; throws SignInFailed when an answer is not what the contract says. `signal` abandons it.
 */
export async function signIn(
  dispatcher: Dispatcher,
  issuer: string,
  client: Client,
  credentials: { username: string; password: string },
  signal?: AbortSignal,
): Promise<{ code: string; verifier: string }> {
  const jar = new CookieJar();
  const verifier = newVerifier();
  const state = randomBytes(8).toString('hex');
  const query = new URLSearchParams({
    response_type: 'code',
    client_id: client.clientId,
    redirect_uri: client.redirectUri,
    scope: client.scope,
    state,
    code_challenge: challengeOf(verifier),
    code_challenge_method: 'S256',
  });
  const toClient = (url: URL): { code: string; verifier: string } => {
    const code = url.searchParams.get('code');
    if (code === null || url.searchParams.get('state') !== state) throw new SignInFailed(`back at the client without a code (${url.searchParams.get('error') ?? 'no error'})`, 0);
    return { code, verifier };
  };
  // Redirects from `answer` until a page (returned) or the client's redirect URI (its code returned).
  const follow = async (answer: Answer, from: URL): Promise<{ page: string; url: URL } | { code: string; verifier: string }> => {
    let url = from;
    for (let hop = 0; hop < MAX_HOPS; hop += 1) {
      if (answer.status === 200) return { page: answer.body, url };
      if (answer.status < 300 || answer.status >= 400 || answer.location === undefined) throw new SignInFailed(`${url.pathname} answered ${answer.status}`, answer.status);
      if (answer.location.href.startsWith(client.redirectUri)) return toClient(answer.location);
      url = answer.location;
      answer = await visit(dispatcher, jar, signal, url);
    }
    throw new SignInFailed(`more than ${MAX_HOPS} redirects`, 0);
  };
  const start = new URL(`/authorize?${query}`, issuer);
  const shown = await follow(await visit(dispatcher, jar, signal, start), start);
  if ('code' in shown) return shown;
  const form = passwordForm(shown.page);
  if (form === undefined) throw new SignInFailed(`${shown.url.pathname} shows no form with username and password`, 200);
  if (form.method !== 'post') throw new SignInFailed(`the sign-in form's method is ${form.method}, not post`, 200);
  form.fields.set('username', credentials.username);
  form.fields.set('password', credentials.password);
  const action = new URL(form.action === '' ? shown.url.href : form.action, shown.url);
  const posted = await visit(dispatcher, jar, signal, action, new URLSearchParams([...form.fields]));
  // Wrong credentials show the form again with 401; a full hashing queue gives 503 (DESIGN.md §4, §11).
  if (posted.status === 200 || posted.status === 401 || posted.status === 503) throw new SignInFailed(`${action.pathname} answered ${posted.status}`, posted.status);
  const done = await follow(posted, action);
  if (!('code' in done)) throw new SignInFailed(`${done.url.pathname} answered 200 after the sign-in, not a redirect to the client`, 200);
  return done;
}

/** The one small server-rendered layout, its headers and the error page; the other pages' bodies are in templates.ts. No JavaScript. */
import type { FastifyReply } from 'fastify';

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);
}

/** Tagged template that escapes every interpolated value unless it is already `Html`. */
export class Html {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

export function html(strings: TemplateStringsArray, ...values: unknown[]): Html {
  let out = strings[0] ?? '';
  values.forEach((value, index) => {
    const rendered = Array.isArray(value)
      ? value.map((item) => (item instanceof Html ? item.text : escapeHtml(String(item)))).join('')
      : value instanceof Html
        ? value.text
        : escapeHtml(String(value ?? ''));
    out += rendered + (strings[index + 1] ?? '');
  });
  return new Html(out);
}

const STYLE = `
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;background:#f4f5f7;color:#1d2330;margin:0}
main{max-width:26rem;margin:4rem auto;background:#fff;border-radius:10px;padding:2rem 2.25rem;box-shadow:0 2px 12px rgba(0,0,0,.08)}
h1{font-size:1.35rem;margin:0 0 1rem}
label{display:block;font-weight:600;margin:.9rem 0 .3rem}
input[type=text],input[type=password]{width:100%;box-sizing:border-box;padding:.6rem;border:1px solid #b8bfcc;border-radius:6px;font-size:1rem}
button,.button{display:inline-block;margin-top:1.2rem;padding:.6rem 1.2rem;border:0;border-radius:6px;background:#2454d6;color:#fff;font-size:1rem;cursor:pointer;text-decoration:none}
button.secondary{background:#e4e7ee;color:#1d2330}
.error{background:#fdecec;color:#8a1c1c;border-radius:6px;padding:.6rem .8rem}
.muted{color:#5b6478;font-size:.9rem}
ul{padding-left:1.2rem}
ul.upstreams{list-style:none;padding:0;margin-top:1.5rem;border-top:1px solid #e4e7ee}
code{font-size:1.05rem;white-space:nowrap}
`;

export function layout(title: string, body: Html): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>${escapeHtml(title)} · Pinpoint</title>
<style>${STYLE}</style>
</head>
<body>
<main>
${body.text}
</main>
</body>
</html>
`;
}

/**
 * The CSP source a form on a page may end up at through redirects (CSP form-action applies to the whole redirect
 * chain of a form submission): the origin of a client's redirect URI, or its scheme for a native app's private-use one.
 */
export function formTargetOf(redirectUri: string): string | undefined {
  try {
    const url = new URL(redirectUri);
    if (url.origin !== 'null') return url.origin;
    return /^[a-z][a-z0-9+.-]*:$/.test(url.protocol) ? url.protocol : undefined;
  } catch {
    return undefined;
  }
}

/** Headers every page carries: no framing, no referrer, nothing loaded from elsewhere, forms only to us and `formTargets`. */
export function pageHeaders(reply: FastifyReply, formTargets: readonly string[] = []): FastifyReply {
  const formAction = ["'self'", ...formTargets].join(' ');
  return reply
    .header('Content-Type', 'text/html; charset=utf-8')
    .header('Cache-Control', 'no-store')
    .header(
      'Content-Security-Policy',
      `default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; base-uri 'none'; form-action ${formAction}; frame-ancestors 'none'`,
    )
    .header('X-Frame-Options', 'DENY')
    .header('Referrer-Policy', 'no-referrer')
    .header('X-Content-Type-Options', 'nosniff');
}

export function sendPage(reply: FastifyReply, status: number, title: string, body: Html, formTargets: readonly string[] = []): FastifyReply {
  return pageHeaders(reply, formTargets).code(status).send(layout(title, body));
}

/** The error page's HTML, also for answers written straight to a socket (requests Node's parser refuses). */
export function errorPageHtml(error: string, description: string): string {
  return layout(
    'Something went wrong',
    html`<h1>This request cannot be completed</h1>
<p class="error" role="alert"><strong>${error}</strong>: ${description}</p>
<p class="muted">Go back to the application you came from and try again.</p>`,
  );
}

export function errorPage(reply: FastifyReply, status: number, error: string, description: string): FastifyReply {
  return pageHeaders(reply).code(status).send(errorPageHtml(error, description));
}

/** The headers of pageHeaders as raw header lines, for answers written straight to a socket. */
export const RAW_PAGE_HEADERS = [
  'Content-Type: text/html; charset=utf-8',
  'Cache-Control: no-store',
  "Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  'X-Frame-Options: DENY',
  'Referrer-Policy: no-referrer',
  'X-Content-Type-Options: nosniff',
] as const;

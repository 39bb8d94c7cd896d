/** True for hosts that never leave the machine: 127.0.0.0/8, ::1 and localhost (URL.hostname form). */
export function isLoopbackHost(hostname: string): boolean {
  const host = hostname.toLowerCase().replace(/^\[(.*)\]$/, '$1');
  return host === 'localhost' || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/** A listen address as written in the config: `host:port`, with brackets around an IPv6 host. */
export function formatListen({ host, port }: { readonly host: string; readonly port: number }): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/** The issuer and the path every route is served under, or why base_url is not acceptable. */
export function parseBaseUrl(text: string): { baseUrl: string; basePath: string } | { error: string } {
  const url = parseHttpUrl(text);
  if ('error' in url) return url;
  if (text.endsWith('/')) return { error: `must not end with "/"; write ${JSON.stringify(text.replace(/\/+$/, ''))}` };
  const basePath = url.pathname === '/' ? '' : url.pathname;
  const baseUrl = `${url.origin}${basePath}`;
  // The issuer is compared character for character by clients and resource servers: what is written must be it,
  // not something the URL parser turns into another string (a host's case, a default port, "..", a space).
  if (baseUrl !== text) return { error: `is written differently from the URL it names; write ${JSON.stringify(baseUrl)}` };
  return { baseUrl, basePath };
}

/** An upstream issuer: like base_url, but a trailing slash is its own business. */
export function parseIssuerUrl(text: string): { issuer: string } | { error: string } {
  const url = parseHttpUrl(text);
  return 'error' in url ? url : { issuer: text };
}

function parseHttpUrl(text: string): URL | { error: string } {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return { error: `is not an absolute URL; write e.g. "https://auth.example.org"` };
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return { error: `must be an https URL, not ${url.protocol}` };
  if (url.protocol === 'http:' && !isLoopbackHost(url.hostname)) {
    return { error: 'must use https (plain http is only allowed for loopback hosts such as 127.0.0.1 or localhost)' };
  }
  if (url.username || url.password) return { error: 'must not contain a user name or password' };
  if (text.includes('?')) return { error: 'must not have a query ("?...")' };
  if (text.includes('#')) return { error: 'must not have a fragment ("#...")' };
  return url;
}

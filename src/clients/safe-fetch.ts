/**
 * Fetching a small resource from a URL an attacker may have chosen (DESIGN.md §9): every connection goes only to a
 * public address — checked on the resolved addresses before connecting and on the address actually connected to —
 * and the whole exchange is bounded in time and size.
 */
import { lookup as dnsLookup, promises as dnsPromises, type LookupAddress, type LookupAllOptions, type LookupOptions } from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';
import type { SecureContextOptions } from 'node:tls';
import { Agent, buildConnector, request, type Dispatcher } from 'undici';

/**
 * Why a fetch did not produce an answer: `message` in words fit for an error page, `detail` (a resolved address, a
 * resolver or socket error code) for the log only, so the page is no oracle for internal names (DESIGN.md §7).
 */
export class FetchRefused extends Error {
  readonly code: 'forbidden_address' | 'timeout' | 'too_large' | 'unreachable';
  readonly detail: string | undefined;

  constructor(code: FetchRefused['code'], reason: string, detail?: string) {
    super(reason);
    this.name = 'FetchRefused';
    this.code = code;
    this.detail = detail;
  }
}

/** What a person is told both for a host that resolves only to non-public addresses and for one that does not resolve. */
export const UNREACHABLE_HOST = 'its host could not be reached';

// IANA IPv4 Special-Purpose Address Registry (RFC 6890 and successors): ranges that are not a public web server.
const NON_PUBLIC_IPV4: ReadonlyArray<readonly [string, number]> = [
  ['0.0.0.0', 8], // "this network", including the unspecified address
  ['10.0.0.0', 8], // RFC 1918
  ['100.64.0.0', 10], // RFC 6598 shared address space (CGNAT)
  ['127.0.0.0', 8], // loopback
  ['169.254.0.0', 16], // link-local, including the cloud metadata service 169.254.169.254
  ['172.16.0.0', 12], // RFC 1918
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.0.2.0', 24], // TEST-NET-1
  ['192.88.99.0', 24], // 6to4 relay anycast (deprecated)
  ['192.168.0.0', 16], // RFC 1918
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24], // TEST-NET-2
  ['203.0.113.0', 24], // TEST-NET-3
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, including the broadcast address 255.255.255.255
];

// IANA IPv6 Special-Purpose Address Registry; the IPv4-in-IPv6 forms of the ranges above are added below.
const NON_PUBLIC_IPV6: ReadonlyArray<readonly [string, number]> = [
  ['::', 96], // unspecified, loopback and the deprecated IPv4-compatible addresses
  ['::ffff:0:0:0', 96], // RFC 2765 SIIT IPv4-translated addresses (::ffff:0:a.b.c.d), which hide an IPv4 address
  ['64:ff9b:1::', 48], // RFC 8215 local-use NAT64
  ['100::', 64], // RFC 6666 discard-only
  ['2001::', 23], // IETF protocol assignments, including Teredo 2001::/32 (which hides an IPv4 address)
  ['2001:db8::', 32], // documentation
  ['2002::', 16], // 6to4 (hides an IPv4 address)
  ['3fff::', 20], // RFC 9637 documentation
  ['5f00::', 16], // RFC 9602 SRv6 segment identifiers
  ['fc00::', 7], // unique local, including the AWS metadata service fd00:ec2::254
  ['fe80::', 10], // link-local
  ['fec0::', 10], // site-local (deprecated)
  ['ff00::', 8], // multicast
];

const NON_PUBLIC = new BlockList();
for (const [network, prefix] of NON_PUBLIC_IPV4) {
  NON_PUBLIC.addSubnet(network, prefix, 'ipv4');
  // RFC 4291 §2.5.5.2 IPv4-mapped and RFC 6052 NAT64 forms reach the same IPv4 host.
  NON_PUBLIC.addSubnet(`::ffff:${network}`, 96 + prefix, 'ipv6');
  NON_PUBLIC.addSubnet(`64:ff9b::${network}`, 96 + prefix, 'ipv6');
}
for (const [network, prefix] of NON_PUBLIC_IPV6) NON_PUBLIC.addSubnet(network, prefix, 'ipv6');

/** True when `address` is an IP address a public web server may have; false for every special-purpose range and for non-addresses. */
export function isPublicAddress(address: string): boolean {
  // A zone index ("fe80::1%eth0") only exists for link-scoped addresses.
  if (address.includes('%')) return false;
  const family = isIP(address);
  if (family === 0) return false;
  return !NON_PUBLIC.check(address, family === 4 ? 'ipv4' : 'ipv6');
}

const forbidden = (address: string): FetchRefused =>
  new FetchRefused('forbidden_address', UNREACHABLE_HOST, `the host resolves to ${address}, a loopback, private, link-local or reserved address`);

/** How long one DNS query of a stranger's name may take, and how often it is sent: about 3 s in all, within a fetch's 5 s. */
const QUERY_TIMEOUT_MS = 1000;
const QUERY_TRIES = 2;

/**
 * A lookup (all addresses) by DNS queries through c-ares, bounded in time. node:dns's lookup runs getaddrinfo on
 * libuv's thread pool, two at a time for slow work: a stranger naming hosts whose DNS never answers (a cost audit: 20
 * of them) held those threads 10 s per name and stalled every other lookup in the process for some 100 s. These
 * queries hold no thread. The names are public hosts of strangers' URLs, so /etc/hosts is not read.
 */
export function resolverLookup(options: { readonly servers?: readonly string[] } = {}): typeof dnsLookup {
  const lookup = (hostname: string, _options: LookupAllOptions, callback: (error: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void): void => {
    const resolver = new dnsPromises.Resolver({ timeout: QUERY_TIMEOUT_MS, tries: QUERY_TRIES });
    if (options.servers !== undefined) resolver.setServers([...options.servers]);
    void Promise.allSettled([resolver.resolve4(hostname), resolver.resolve6(hostname)]).then(([v4, v6]) => {
      const addresses: LookupAddress[] = [
        ...(v4.status === 'fulfilled' ? v4.value.map((address) => ({ address, family: 4 })) : []),
        ...(v6.status === 'fulfilled' ? v6.value.map((address) => ({ address, family: 6 })) : []),
      ];
      if (addresses.length > 0) return callback(null, addresses);
      const failure = [v4, v6].find((result): result is PromiseRejectedResult => result.status === 'rejected');
      callback((failure?.reason as NodeJS.ErrnoException | undefined) ?? Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), []);
    });
  };
  return lookup as unknown as typeof dnsLookup;
}

/**
 * A `lookup` for net/tls.connect that resolves every address of the name and fails when any of them is not public,
 * so a name cannot pass by having one public address next to an internal one.
 */
export function publicOnlyLookup(lookup: typeof dnsLookup = resolverLookup()): LookupFunction {
  return (hostname: string, options: LookupOptions, callback: (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void) => {
    const all: LookupAllOptions = { ...options, all: true };
    lookup(hostname, all, (error, addresses) => {
      if (error !== null) return callback(error, []);
      const refused = addresses.find((entry) => !isPublicAddress(entry.address));
      if (refused !== undefined) return callback(forbidden(refused.address) as NodeJS.ErrnoException, []);
      const first = addresses[0];
      if (first === undefined) return callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), []);
      if (options.all === true) callback(null, addresses);
      else callback(null, first.address, first.family);
    });
  };
}

/** Which peers an agent may connect to, and which certificates it trusts. */
export interface PublicAgentOptions {
  /** Tests only: connect to loopback and private addresses too. */
  readonly allowPrivateAddresses?: boolean;
  /** Certificate authorities to trust instead of Node's default (which honours NODE_EXTRA_CA_CERTS). */
  readonly ca?: SecureContextOptions['ca'];
  /** Milliseconds a connection (including its TLS handshake) may take. */
  readonly connectTimeoutMs?: number;
  /** The resolver behind the address check; default resolverLookup (tests keep their names off the network). */
  readonly lookup?: typeof dnsLookup;
}

/** An undici Agent that connects only to public addresses, unless `allowPrivateAddresses` is set. */
export function publicAgent(options: PublicAgentOptions = {}): Agent {
  const base = buildConnector({
    ...(options.ca !== undefined && { ca: options.ca }),
    lookup: options.allowPrivateAddresses === true ? (options.lookup ?? dnsLookup) : publicOnlyLookup(options.lookup),
    timeout: options.connectTimeoutMs ?? 5000,
  });
  if (options.allowPrivateAddresses === true) return new Agent({ connect: base });
  const connect: buildConnector.connector = (target, callback) => {
    // net.connect does not call `lookup` for an IP literal, so a literal host is checked here, before any packet is sent.
    if (isIP(target.hostname) !== 0 && !isPublicAddress(target.hostname)) {
      callback(forbidden(target.hostname), null);
      return;
    }
    base(target, (...result) => {
      const [error, socket] = result;
      if (error !== null) return callback(error, null);
      // The address actually connected to, whatever path led there.
      const address = socket.remoteAddress;
      if (address !== undefined && isPublicAddress(address)) return callback(null, socket);
      socket.destroy();
      callback(forbidden(address ?? 'an unknown address'), null);
    });
  };
  return new Agent({ connect });
}

/** A bounded answer: the status, the headers and, for a 200, the body. */
export interface SmallAnswer {
  readonly status: number;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  /** The body of a 200 answer; empty for any other status (those bodies are discarded unread). */
  readonly body: Buffer;
}

export interface SmallGetOptions {
  readonly dispatcher: Dispatcher;
  /** Milliseconds for everything: resolving, connecting, the headers and the whole body. */
  readonly timeoutMs: number;
  /** Bytes of body allowed, with or without a Content-Length. */
  readonly maxBytes: number;
  readonly accept: string;
}

/** GET `url` without following redirects; throws FetchRefused when it takes too long, is too large or cannot connect. */
export async function getSmall(url: string, options: SmallGetOptions): Promise<SmallAnswer> {
  const controller = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort();
  }, options.timeoutMs);
  let answer: Dispatcher.ResponseData | undefined;
  try {
    answer = await request(url, {
      dispatcher: options.dispatcher,
      method: 'GET',
      headers: { accept: options.accept },
      signal: controller.signal,
      maxRedirections: 0,
    });
    const { statusCode: status, headers, body } = answer;
    if (status !== 200) {
      discard(body);
      return { status, headers, body: Buffer.alloc(0) };
    }
    const declared = Number(headers['content-length']);
    if (Number.isFinite(declared) && declared > options.maxBytes) throw tooLarge(options.maxBytes);
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of body as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > options.maxBytes) throw tooLarge(options.maxBytes);
      chunks.push(chunk);
    }
    return { status, headers, body: Buffer.concat(chunks, size) };
  } catch (error) {
    if (answer !== undefined) discard(answer.body);
    if (error instanceof FetchRefused) throw error;
    if (timedOut) throw new FetchRefused('timeout', `no complete answer within ${options.timeoutMs / 1000} s`);
    const refused = causeOf(error);
    if (refused !== undefined) throw refused;
    throw new FetchRefused('unreachable', UNREACHABLE_HOST, `the connection failed (${describe(error)})`);
  } finally {
    clearTimeout(timer);
  }
}

// Destroying an unread body makes it emit an abort error that nobody else is listening for.
function discard(body: Dispatcher.ResponseData['body']): void {
  body.on('error', () => undefined);
  body.destroy();
}

const tooLarge = (maxBytes: number): FetchRefused => new FetchRefused('too_large', `the answer is larger than ${maxBytes} bytes`);

function causeOf(error: unknown): FetchRefused | undefined {
  for (let current = error, depth = 0; current instanceof Error && depth < 5; current = current.cause, depth += 1) {
    if (current instanceof FetchRefused) return current;
  }
  return undefined;
}

// For the log: a code such as ENOTFOUND or CERT_HAS_EXPIRED says what went wrong without echoing anything the peer sent.
function describe(error: unknown): string {
  for (let current = error, depth = 0; current instanceof Error && depth < 5; current = current.cause, depth += 1) {
    const code = (current as NodeJS.ErrnoException).code;
    if (typeof code === 'string' && code.length > 0) return code;
  }
  return 'connection failed';
}

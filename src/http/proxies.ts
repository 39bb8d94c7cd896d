/**
 * Which peers are reverse proxies whose X-Forwarded-* headers are believed (DESIGN.md §3 `trusted_proxies`):
 * Node's BlockList does the address and CIDR matching. Fastify walks X-Forwarded-For from the right and stops at
 * the first hop this does not trust, so a client cannot choose its own address by writing the left-most hop.
 */
import { BlockList, isIPv4, isIPv6 } from 'node:net';

export type ProxyTrust = (address: string | undefined) => boolean;

const IPV4_MAPPED = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i;

/** A matcher for `entries` (addresses and CIDRs as the config writes them); never trusts anyone when empty. */
export function proxyTrust(entries: readonly string[]): ProxyTrust {
  if (entries.length === 0) return () => false;
  const list = new BlockList();
  for (const entry of entries) {
    const [address = '', prefix] = entry.split('/');
    const type = isIPv6(address) ? 'ipv6' : 'ipv4';
    if (prefix === undefined) list.addAddress(address, type);
    else list.addSubnet(address, Number(prefix), type);
  }
  return (address) => {
    if (address === undefined) return false;
    // A dual-stack socket reports IPv4 peers as ::ffff:a.b.c.d.
    const plain = IPV4_MAPPED.exec(address)?.[1] ?? address;
    if (isIPv4(plain)) return list.check(plain, 'ipv4');
    return isIPv6(plain) && list.check(plain, 'ipv6');
  };
}

/** X-Request-Id as a trusted proxy may send it: short and plain, else a fresh one is made. */
export const REQUEST_ID_SHAPE = /^[A-Za-z0-9._:-]{1,128}$/;

import { lookup } from "node:dns/promises";
import { BlockList, isIP } from "node:net";

/** Resolves a host name to its addresses (node:dns by default; tests may give their own). */
export type Resolve = (hostname: string) => Promise<readonly { address: string; family: number }[]>;

/** The address a delivery connects to, checked, and the name it was resolved from. */
export interface Destination {
  readonly url: URL;
  readonly address: string;
  readonly family: 4 | 6;
}

/** Why a destination is refused; its message is the delivery log's. */
export class DestinationRefused extends Error {}

const privateRanges = new BlockList();
const ranges: [string, number, "ipv4" | "ipv6", string][] = [
  ["127.0.0.0", 8, "ipv4", "loopback"],
  ["::1", 128, "ipv6", "loopback"],
  ["10.0.0.0", 8, "ipv4", "private"],
  ["172.16.0.0", 12, "ipv4", "private"],
  ["192.168.0.0", 16, "ipv4", "private"],
  ["100.64.0.0", 10, "ipv4", "private"],
  ["fc00::", 7, "ipv6", "private"],
  ["169.254.0.0", 16, "ipv4", "link-local"],
  ["fe80::", 10, "ipv6", "link-local"],
  ["0.0.0.0", 8, "ipv4", "unspecified"],
  ["::", 128, "ipv6", "unspecified"],
];
for (const [net, prefix, type] of ranges) privateRanges.addSubnet(net, prefix, type);

/**
 * What kind of address `address` is when a delivery may not reach it without
 * --webhook-allow-private (loopback, private, link-local (the metadata
 * address 169.254.169.254 among them) or unspecified), or undefined for a
 * public one. An IPv4-mapped IPv6 address is judged as its IPv4 address.
 */
function privateKind(address: string): string | undefined {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1];
  const a = mapped ?? address;
  const type = isIP(a) === 6 ? "ipv6" : "ipv4";
  if (!privateRanges.check(a, type)) return undefined;
  return ranges.find(([net, prefix, t]) => {
    if (t !== type) return false;
    const one = new BlockList();
    one.addSubnet(net, prefix, t);
    return one.check(a, type);
  })?.[3];
}

/**
 * Resolves the URL's host now (at each delivery) and picks the address to
 * connect to. Refused when any address is private (see privateKind) unless
 * `allowPrivate`; plain http is refused except to a private address under
 * `allowPrivate`. The caller connects to this address and no other: no
 * second resolution between the check and the connection.
 */
export async function resolveDestination(
  text: string,
  allowPrivate: boolean,
  resolve: Resolve = defaultResolve,
): Promise<Destination> {
  const url = new URL(text);
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
  const addresses = isIP(host)
    ? [{ address: host, family: isIP(host) }]
    : await resolve(host).catch((err: NodeJS.ErrnoException) => {
        throw new Error(`could not resolve ${host}: ${err.code ?? err.message}`);
      });
  if (addresses.length === 0) throw new Error(`could not resolve ${host}: no addresses`);
  for (const a of addresses) {
    const kind = privateKind(a.address);
    if (kind && !allowPrivate)
      throw new DestinationRefused(
        `refused: ${host} resolves to ${a.address}, a ${kind} address; webhooks reach ` +
          `only public addresses unless forelead serve --webhook-allow-private`,
      );
    if (!kind && url.protocol === "http:")
      throw new DestinationRefused(
        `refused: plain http to ${host} (${a.address}), a public address; use https`,
      );
  }
  const first = addresses[0]!;
  return { url, address: first.address, family: first.family === 6 ? 6 : 4 };
}

const defaultResolve: Resolve = (hostname) => lookup(hostname, { all: true, verbatim: true });

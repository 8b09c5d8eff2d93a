import { isIP } from "node:net";

/** A parsed --listen address. */
export interface ListenAddress {
  readonly host: string;
  readonly port: number;
}

/**
 * Parses `HOST:PORT` (`[::1]:8080` for IPv6); a bad one is an error naming the flag and an example.
 */
export function parseListen(text: string): ListenAddress {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(text.trim());
  const port = m ? Number(m[3]) : NaN;
  if (!m || port > 65535)
    throw new Error(
      `--listen ${JSON.stringify(text)} is not HOST:PORT; e.g. 127.0.0.1:8080 or [::1]:8080 (port 0 picks a free one)`,
    );
  return { host: (m[1] ?? m[2])!, port };
}

/** True for loopback addresses only: 127.0.0.0/8, ::1 and the name localhost. */
export function isLoopback(host: string): boolean {
  if (host === "localhost") return true;
  if (isIP(host) === 4) return host.startsWith("127.");
  if (isIP(host) === 6) return host === "::1" || host === "0:0:0:0:0:0:0:1";
  return false;
}

/** How far the dashboard is reached, as its flags say. */
export interface Exposure {
  /** --allow-remote: a non-loopback --listen address. */
  readonly allowRemote: boolean;
  /** --public-host: the names it answers to from other machines. */
  readonly publicHosts: readonly string[];
  /** It serves HTTPS itself (--tls-cert/--tls-key). */
  readonly tls: boolean;
  /** --behind-tls-proxy: a TLS proxy in front of it serves HTTPS. */
  readonly behindTlsProxy: boolean;
}

/** A --public-host name: a DNS name without scheme or port, lower case. */
export function parsePublicHost(text: string): string {
  const name = text.trim().toLowerCase();
  if (
    !/^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/.test(
      name,
    )
  )
    throw new Error(
      `--public-host ${JSON.stringify(text)} is not a DNS name; give the name only, ` +
        `e.g. --public-host dash.example.com (no scheme, no port)`,
    );
  return name;
}

/**
 * Refuses a start that would expose the dashboard wrongly: a non-loopback address without
 * `allowRemote` (whoever reaches it could try to sign in as the operator); `allowRemote` without a
 * --public-host (the Host check needs the names); a dashboard reached from other machines over
 * plain HTTP (its session cookie and sign-in token would cross the network in clear).
 */
export function checkListen(address: ListenAddress, exposure: Exposure): void {
  const at = `--listen ${address.host}:${address.port}`;
  if (!exposure.allowRemote && !isLoopback(address.host))
    throw new Error(
      `${at} is not a loopback address: other machines could reach the dashboard, which ` +
        `acts with your client certificate (your identity and roles). Listen on 127.0.0.1 ` +
        `or [::1], or pass --allow-remote with --public-host NAME and HTTPS ` +
        `(--tls-cert/--tls-key or --behind-tls-proxy)`,
    );
  if (exposure.allowRemote && exposure.publicHosts.length === 0)
    throw new Error(
      `--allow-remote needs the names the dashboard is reached by: add --public-host NAME ` +
        `(repeatable); a Host not named is refused, so that no other site can rebind to it`,
    );
  const remote = exposure.allowRemote || exposure.publicHosts.length > 0;
  if (remote && !exposure.tls && !exposure.behindTlsProxy)
    throw new Error(
      `a dashboard reached from other machines (${exposure.allowRemote ? "--allow-remote" : "--public-host"}) ` +
        `must use HTTPS: give --tls-cert and --tls-key, or --behind-tls-proxy when a TLS ` +
        `proxy in front of it serves HTTPS; plain HTTP is for loopback only`,
    );
}

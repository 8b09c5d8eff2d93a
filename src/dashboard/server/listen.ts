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

/**
 * Refuses a non-loopback address unless `allowRemote`: the dashboard acts with the operator's
 * certificate, so anyone who reaches it acts as the operator.
 */
export function checkListen(address: ListenAddress, allowRemote: boolean): void {
  if (allowRemote || isLoopback(address.host)) return;
  throw new Error(
    `--listen ${address.host}:${address.port} is not a loopback address: ` +
      `everyone who can reach it would act with your client certificate (your ` +
      `identity and roles). Listen on 127.0.0.1 or [::1], or pass ` +
      `--allow-remote if the network in front of it is yours to trust`,
  );
}

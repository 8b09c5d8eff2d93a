import { readFile } from "node:fs/promises";
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type { DescService } from "@bufbuild/protobuf";
import type { Command } from "commander";
import { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";

/** The flags every admin CLI command takes to reach the control plane. */
export interface AdminClientFlags {
  /** https:// URL of the control plane. */
  readonly server: string;
  /** Trust bundle (PEM) for the server's certificate. */
  readonly ca: string;
  /** Client certificate (PEM) of an identity the server grants admin. */
  readonly cert: string;
  readonly key: string;
}

/** Adds --server, --ca, --cert and --key to `command`; defaults fit the README quick start (`forelead ca issue ... --out certs/cli`). */
export function withAdminClientOptions(command: Command): Command {
  return command
    .option("--server <url>", "the control plane", "https://127.0.0.1:8443")
    .option("--ca <file>", "CA bundle for the server certificate (PEM)", "certs/ca.pem")
    .option("--cert <file>", "client certificate of an identity granted admin (PEM)", "certs/admin.pem")
    .option("--key <file>", "its private key (PEM)", "certs/cli-key.pem");
}

/**
 * A generated AdminService client from the flags: Connect protocol (binary)
 * over HTTP/2 + TLS with the client certificate. Errors name the file that
 * cannot be read.
 */
export async function adminClientFromFlags(flags: AdminClientFlags): Promise<Client<typeof AdminService>> {
  return serviceClientFromFlags(flags, AdminService);
}

/** A client of any admin-side `service` (StatusService, ...) from the flags, as adminClientFromFlags. */
export async function serviceClientFromFlags<S extends DescService>(flags: AdminClientFlags, service: S): Promise<Client<S>> {
  let url: URL;
  try {
    url = new URL(flags.server);
  } catch {
    throw new Error(`--server ${JSON.stringify(flags.server)} is not a URL; e.g. https://127.0.0.1:8443`);
  }
  if (url.protocol !== "https:") throw new Error(`--server must be an https:// URL; got ${flags.server}`);
  const [ca, cert, key] = await Promise.all([read(flags.ca, "--ca"), read(flags.cert, "--cert"), read(flags.key, "--key")]);
  const transport = createConnectTransport({ baseUrl: url.toString().replace(/\/$/, ""), httpVersion: "2", useBinaryFormat: true, nodeOptions: { ca, cert, key } });
  return createClient(service, transport);
}

async function read(file: string, flag: string): Promise<string> {
  try {
    return await readFile(file, "utf8");
  } catch (err) {
    throw new Error(`cannot read ${flag} ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}

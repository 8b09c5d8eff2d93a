import { readFile } from "node:fs/promises";
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type { Command } from "commander";
import { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";

/** The flags that say where the control plane is and which admin certificate to present. */
export interface AdminClientFlags {
  server: string;
  ca: string;
  cert: string;
  key: string;
}

/** Adds --server, --ca, --cert and --key to an admin subcommand. */
export function withAdminClientFlags(command: Command): Command {
  return command
    .option("--server <url>", "the control plane", "https://127.0.0.1:8443")
    .option("--ca <file>", "CA that signed the server certificate (PEM)", "certs/ca.pem")
    .requiredOption("--cert <file>", "a client certificate whose SPIFFE ID the server grants with --admin (PEM)")
    .requiredOption("--key <file>", "its private key (PEM)");
}

/** A generated AdminService client over HTTP/2 + mTLS, from the flags. */
export async function adminClientFromFlags(flags: AdminClientFlags): Promise<Client<typeof AdminService>> {
  const [ca, cert, key] = await Promise.all([read(flags.ca, "--ca"), read(flags.cert, "--cert"), read(flags.key, "--key")]);
  return createClient(AdminService, createConnectTransport({ baseUrl: flags.server, httpVersion: "2", nodeOptions: { ca, cert, key } }));
}

async function read(file: string, what: string): Promise<string> {
  try {
    return await readFile(file, "utf8");
  } catch (err) {
    throw new Error(`cannot read ${what} ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}

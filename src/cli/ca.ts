import { Command } from "commander";
import { issueClientCertificate, parseDuration } from "../identity/ca.js";
import {
  defaultMaxLifetimeMs,
  formatDuration,
  lifetimeRefusal,
} from "../identity/certificate-policy.js";
import { initDevPki, loadCertificateAuthority, writeIssued } from "../identity/pki-files.js";
import { parseSpiffeId } from "../identity/spiffe.js";
import { pathOption } from "./options.js";

/** How far `ca issue` backdates notBefore, for clients whose clock is behind. */
const backdateMs = 60_000;

/** Default hosts of the development server certificate. */
export const defaultHosts = ["localhost", "127.0.0.1", "::1"];

interface IssueFlags {
  readonly dir: string;
  readonly spiffeId: string;
  readonly ttl: string;
  readonly maxLifetime: string;
  readonly out: string;
}

/** `forelead ca ...`: the development PKI. */
export function caCommand(): Command {
  const ca = new Command("ca");
  ca.command("init")
    .description("create a development CA and a server certificate in --dir (kept if they exist)")
    .addOption(pathOption("--dir <dir>", "where to write the PKI", "certs"))
    .option(
      "--trust-domain <td>",
      "SPIFFE trust domain the certificates will be used with",
      "forelead",
    )
    .option("--hosts <list>", "server certificate hosts, comma separated", defaultHosts.join(","))
    .option("--force", "replace an existing CA and server certificate")
    .action(async (opts: { dir: string; trustDomain: string; hosts: string; force?: boolean }) => {
      parseSpiffeId(`spiffe://${opts.trustDomain}`);
      const hosts = opts.hosts
        .split(",")
        .map((h) => h.trim())
        .filter(Boolean);
      const { paths, created } = await initDevPki(opts.dir, { hosts, force: opts.force ?? false });
      console.log(
        created
          ? `wrote the development PKI to ${paths.dir} (CA ${paths.caCert}, server ` +
              `${paths.serverCert} for ${hosts.join(", ")})`
          : `${paths.dir} already holds a development PKI; left unchanged (use --force to replace it)`,
      );
    });
  ca.command("issue")
    .description(
      "issue a client certificate for a SPIFFE ID, e.g. spiffe://forelead/runners/r1/workspaces/w1",
    )
    .addOption(pathOption("--dir <dir>", "the development PKI", "certs"))
    .requiredOption("--spiffe-id <id>", "the certificate's only URI SAN")
    .option("--ttl <duration>", "lifetime, e.g. 24h, 90m", "24h")
    .option(
      "--max-lifetime <duration>",
      "the longest lifetime the control plane accepts (its --max-cert-lifetime)",
      formatDuration(defaultMaxLifetimeMs),
    )
    .addOption(
      pathOption("--out <prefix>", "writes PREFIX.pem and PREFIX-key.pem").makeOptionMandatory(),
    )
    .action(async (opts: IssueFlags) => {
      parseSpiffeId(opts.spiffeId);
      const lifetimeMs = parseDuration(opts.ttl);
      // The server's own rule, so that a certificate written here is one it accepts.
      const overLong = lifetimeRefusal(lifetimeMs, parseDuration(opts.maxLifetime));
      if (overLong)
        throw new Error(
          `--ttl ${opts.ttl}: the certificate's ${overLong} (the control plane's ` +
            `--max-cert-lifetime refuses it)`,
        );
      // Backdated by a minute for clock skew; the lifetime stays the one asked for, so it must be
      // longer.
      if (lifetimeMs <= backdateMs)
        throw new Error(
          `--ttl ${opts.ttl} is not longer than the ${backdateMs / 1000} s the ` +
            `certificate is backdated for clock skew: it would be expired when ` +
            `written; give at least 2m`,
        );
      const authority = await loadCertificateAuthority(opts.dir);
      const notBefore = new Date(Date.now() - backdateMs);
      const issued = await issueClientCertificate(authority, {
        uris: [opts.spiffeId],
        notBefore,
        notAfter: new Date(notBefore.getTime() + lifetimeMs),
      });
      const files = await writeIssued(opts.out, issued);
      console.log(
        `wrote ${files.cert} and ${files.key} for ${opts.spiffeId}, valid until ${issued.notAfter.toISOString()}`,
      );
    });
  return ca;
}

import { timestampDate } from "@bufbuild/protobuf/wkt";
import { Command, Option } from "commander";
import { writeFileAtomic } from "../identity/pki-files.js";
import { secondsFlag } from "./admin-flags.js";
import { openAdminClient, withAdminClientOptions, type AdminClientFlags } from "./connection.js";

interface GrantsCreateFlags extends AdminClientFlags {
  workspace: string;
  runnerId?: string;
  expiresIn: number;
  out?: string;
  replace?: boolean;
}

/** `forelead grants create`: a one-time enrollment grant, printed once. */
export function grantsCommand(): Command {
  const grants = new Command("grants");
  withAdminClientOptions(
    grants
      .command("create")
      .description(
        "create a single-use enrollment grant; the grant alone goes to stdout " +
          "(or --out FILE, mode 0600), details to stderr",
      )
      .requiredOption("--workspace <id>", "the workspace the runner will belong to")
      .option(
        "--runner-id <id>",
        "allow only this runner id (default: any runner id in the workspace)",
      )
      .addOption(
        new Option(
          "--expires-in <duration>",
          "how long the grant can be used, e.g. 600s, 30m (at most 24h)",
        )
          .default(600, "600s")
          .argParser(secondsFlag("--expires-in")),
      )
      .option(
        "--replace",
        "may enroll an identity still in use (its runner not offline, or a certificate for it " +
          "not expired): a second key for it, audited as runner.replace",
      )
      .option(
        "--out <file>",
        "write the grant to this file (mode 0600, replaced atomically) instead " +
          "of stdout, for runner enroll --grant-file",
      ),
  ).action(async (flags: GrantsCreateFlags) => {
    const { admin, close } = await openAdminClient(flags);
    try {
      const reply = await admin.createEnrollmentGrant({
        apiVersion: "v1",
        workspaceId: flags.workspace,
        runnerId: flags.runnerId ?? "",
        expiresInSeconds: flags.expiresIn,
        replace: flags.replace ?? false,
      });
      const until = reply.expiresAt ? timestampDate(reply.expiresAt).toISOString() : "?";
      const what =
        `grant ${reply.grantId} for workspace "${reply.workspaceId}", ` +
        `${reply.runnerId ? `runner "${reply.runnerId}"` : "any runner id"}; ` +
        `single use${reply.replace ? ", may replace an identity in use" : ""}, ` +
        `expires at ${until}.`;
      if (flags.out) {
        // 0600 from the first byte: a grant enrolls a runner, so it is a credential like a key.
        await writeFileAtomic(flags.out, `${reply.grant}\n`, 0o600);
        console.error(`${what} Written to ${flags.out} (mode 0600); it is not shown again.`);
      } else {
        console.error(`${what} It is shown only now:`);
        console.log(reply.grant);
      }
    } finally {
      close();
    }
  });
  return grants;
}

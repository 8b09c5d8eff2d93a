import { Option, type Command } from "commander";
import { enroll } from "../runner/identity/enrollment.js";
import { lockDirectory } from "../store/data-dir-lock.js";
import { readFlagFile } from "./admin-flags.js";
import { pathOption } from "./options.js";

interface EnrollFlags {
  server: string;
  ca: string;
  grant?: string;
  grantFile?: string;
  runnerId: string;
  stateDir: string;
  keyType: "p256" | "ed25519";
}

/**
 * Adds `enroll` to the `forelead runner` command group: a new key made here,
 * a CSR and the grant exchanged for a certificate, both written to the state
 * directory (0600) that `forelead runner --state-dir` then uses and renews.
 */
export function addEnrollCommand(runner: Command): Command {
  runner
    .command("enroll")
    .description(
      "enroll this machine as a runner with a one-time grant; writes key.pem and cert.pem (0600) to --state-dir",
    )
    .requiredOption("--server <url>", "the control plane, e.g. https://cp.example:8443")
    .addOption(
      pathOption(
        "--ca <file>",
        "CA bundle that verifies the control plane's certificate",
      ).makeOptionMandatory(),
    )
    .option(
      "--grant <grant>",
      "the enrollment grant (visible to other local users in the process list; prefer --grant-file)",
    )
    .addOption(pathOption("--grant-file <file>", "a file holding the enrollment grant"))
    .requiredOption("--runner-id <id>", "this runner's id (letters, digits, . _ -)")
    .addOption(
      pathOption(
        "--state-dir <dir>",
        "where the runner keeps its key and certificate (refused while a runner uses it)",
      ).makeOptionMandatory(),
    )
    .addOption(
      new Option("--key-type <type>", "key algorithm").choices(["p256", "ed25519"]).default("p256"),
    )
    .action(async (flags: EnrollFlags) => {
      if (Boolean(flags.grant) === Boolean(flags.grantFile))
        throw new Error("give the grant with exactly one of --grant or --grant-file");
      const grant = flags.grant ?? (await readFlagFile(flags.grantFile!, "--grant-file")).trim();
      const caPem = await readFlagFile(flags.ca, "--ca");
      const lock = lockDirectory(
        flags.stateDir,
        "forelead runner enroll",
        "stop it first: enrolling would replace the identity it uses",
      );
      const identity = await enroll(
        { server: flags.server, caPem },
        {
          grant,
          runnerId: flags.runnerId,
          stateDir: flags.stateDir,
          keyAlgorithm: flags.keyType === "ed25519" ? "Ed25519" : "P-256",
        },
      );
      lock.close();
      console.log(
        `enrolled ${identity.spiffeId}; certificate ${identity.serialHex} valid ` +
          `until ${identity.notAfter.toISOString()}, key and certificate in ` +
          `${flags.stateDir}`,
      );
    });
  return runner;
}

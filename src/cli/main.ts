import { Command, CommanderError } from "commander";
import { auditCommand } from "./audit.js";
import { caCommand } from "./ca.js";
import { certsCommand } from "./certs.js";
import { grantsCommand } from "./grants.js";
import { runnerCommand } from "./runner.js";
import { addEnrollCommand } from "./runner-enroll.js";
import { runnersCommand } from "./runners.js";
import { reposCommand } from "./repos.js";
import { jobsCommand } from "./jobs.js";
import { serveCommand } from "./serve.js";
import { doctorCommand } from "./doctor.js";
import { statusCommand } from "./status.js";
import { workspacesCommand } from "./workspaces.js";
import { eventsCommand } from "./events.js";
import { statsCommand } from "./stats.js";
import { addSamplesCommand, sizingCommand } from "./samples.js";
import { configCommand } from "./config.js";

/** The `forelead` command. */
export async function main(argv: readonly string[]): Promise<void> {
  const program = new Command("forelead")
    .description("Forelead control plane: leases jobs to runners over HTTP/2 + mTLS with SPIFFE identities")
    .showHelpAfterError("(run with --help for usage)")
    .enablePositionalOptions()
    .exitOverride();
  program.addCommand(serveCommand());
  program.addCommand(caCommand());
  program.addCommand(addEnrollCommand(runnerCommand()));
  program.addCommand(grantsCommand());
  program.addCommand(auditCommand());
  program.addCommand(certsCommand());
  program.addCommand(runnersCommand());
  program.addCommand(reposCommand());
  program.addCommand(addSamplesCommand(jobsCommand()));
  program.addCommand(statusCommand());
  program.addCommand(doctorCommand());
  program.addCommand(workspacesCommand());
  program.addCommand(eventsCommand());
  program.addCommand(statsCommand());
  program.addCommand(sizingCommand());
  program.addCommand(configCommand());
  try {
    await program.parseAsync([...argv]);
  } catch (err) {
    if (err instanceof CommanderError) process.exit(err.exitCode);
    console.error(`forelead: error: ${(err as Error).message}`);
    process.exit(1);
  }
}

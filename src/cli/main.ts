import { Command, CommanderError, InvalidArgumentError } from "commander";
import { caCommand } from "./ca.js";
import { runnerCommand } from "./runner.js";
import { runnersCommand } from "./runners.js";
import { serveCommand } from "./serve.js";

/** The `forelead` command. */
export async function main(argv: readonly string[]): Promise<void> {
  const program = new Command("forelead")
    .description("Forelead control plane: leases jobs to runners over HTTP/2 + mTLS with SPIFFE identities")
    .showHelpAfterError("(run with --help for usage)")
    .exitOverride();
  program.addCommand(serveCommand());
  program.addCommand(caCommand());
  program.addCommand(runnerCommand());
  program.addCommand(runnersCommand());
  try {
    await program.parseAsync([...argv]);
  } catch (err) {
    if (err instanceof CommanderError) process.exit(err.exitCode);
    console.error(`forelead: error: ${(err as Error).message}`);
    process.exit(1);
  }
}

/** A commander argument parser for whole numbers in a range. */
export function integerIn(name: string, min: number, max: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!/^-?\d+$/.test(value) || n < min || n > max) throw new InvalidArgumentError(`${name} must be a whole number from ${min} to ${max}; got ${JSON.stringify(value)}`);
    return n;
  };
}

/** Collects a repeatable option into an array. */
export function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

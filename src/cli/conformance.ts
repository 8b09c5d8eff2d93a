import { Command, Option } from "commander";
import { formatTable, runConformance, type RowResult } from "../conformance/kit.js";
import { placeholders } from "../conformance/harness.js";
import { secondsFlag } from "./admin-flags.js";
import { integerIn } from "./options.js";

interface ConformanceFlags {
  runnerCommand: string;
  executor: "docker" | "process";
  image: string;
  json?: boolean;
  timeout: number;
  leaseSeconds: number;
}

const placeholderHelp = Object.entries(placeholders)
  .map(([name, env]) => `{${name}} (${env})`)
  .join(", ");

/** `forelead conformance`: the conformance kit for runners (docs/conformance.md). */
export function conformanceCommand(): Command {
  return new Command("conformance")
    .requiredOption(
      "--runner-command <command>",
      `the runner's command line, run by sh -c; placeholders, also given as environment variables: ${placeholderHelp}`,
    )
    .addOption(
      new Option(
        "--executor <kind>",
        "how the runner runs jobs: docker (jobs name --image, output in /output) or process (output in ./output)",
      )
        .choices(["docker", "process"])
        .default("process"),
    )
    .option("--image <ref>", "the image docker jobs name", "busybox:latest")
    .option(
      "--json",
      "print one JSON object per row (row, result, reason, holds, seconds) instead of the table",
    )
    .addOption(
      new Option("--timeout <duration>", "the most one row waits for what it checks")
        .default(60, "60s")
        .argParser(secondsFlag("--timeout", { wholeSeconds: true })),
    )
    .addOption(
      new Option("--lease-seconds <n>", "the lease length of the throwaway control plane")
        .default(5)
        .argParser(integerIn("--lease-seconds", 2, 300)),
    )
    .action(async (flags: ConformanceFlags) => {
      const results = await runConformance(
        {
          runnerCommand: flags.runnerCommand,
          executor: flags.executor,
          image: flags.image,
          rowTimeoutSeconds: flags.timeout,
          leaseSeconds: flags.leaseSeconds,
          log: (m) => console.error(`forelead conformance: ${m}`),
        },
        (r: RowResult) => {
          if (flags.json) console.log(JSON.stringify(r));
          else console.error(`forelead conformance: ${r.row}: ${r.result}`);
        },
      );
      if (!flags.json) process.stdout.write(formatTable(results));
      process.exit(results.some((r) => r.result === "fail") ? 1 : 0);
    });
}

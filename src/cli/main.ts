import { Command, CommanderError } from "commander";
import { buildInfo } from "../server/build-info.js";

/**
 * One command group of `forelead`: its name and one-line description (what the top-level help
 * lists, and the group's own help: this row is its one home, given to the loaded command here)
 * and how to load it. Only the group named on the command line is imported, so
 * `forelead --help` and `forelead ca init` never load the server, the runner or the clients of
 * the other groups (the build gives each group a chunk of its own: scripts/build.ts).
 */
export interface CommandGroup {
  readonly name: string;
  readonly description: string;
  readonly load: () => Promise<Command>;
}

/** Every command group, in the order the help lists them. */
export const commandGroups: readonly CommandGroup[] = [
  {
    name: "serve",
    description: "serve the control plane (HTTP/2, TLS 1.3, client certificates required)",
    load: async () => (await import("./serve.js")).serveCommand(),
  },
  {
    name: "ca",
    description:
      "development certificate authority (ECDSA P-256) for the server and runner certificates",
    load: async () => (await import("./ca.js")).caCommand(),
  },
  {
    name: "runner",
    description: "run leased jobs from a control plane, in Docker or as local processes",
    load: async () => {
      const [{ runnerCommand }, { addEnrollCommand }] = await Promise.all([
        import("./runner.js"),
        import("./runner-enroll.js"),
      ]);
      return addEnrollCommand(runnerCommand());
    },
  },
  {
    name: "job",
    description: "run inside a job: its ID token for an audience (id-token --audience X)",
    load: async () => (await import("./job.js")).jobCommand(),
  },
  {
    name: "job-token",
    description:
      "the key set that signs jobs' ID tokens: init, rotate, publish the discovery documents",
    load: async () => (await import("./job-token.js")).jobTokenCommand(),
  },
  {
    name: "login",
    description:
      "sign in through single sign-on: a short-lived client certificate (8 h) every " +
      "command given no --cert then uses",
    load: async () => (await import("./login.js")).loginCommands()[0]!,
  },
  {
    name: "logout",
    description: "delete the certificate forelead login stored",
    load: async () => (await import("./login.js")).loginCommands()[1]!,
  },
  {
    name: "grants",
    description: "one-time enrollment grants for new runners (needs the admin role)",
    load: async () => (await import("./grants.js")).grantsCommand(),
  },
  {
    name: "audit",
    description:
      "read the audit trail: identity decisions and administrative actions, newest first (needs the read role)",
    load: async () => (await import("./audit.js")).auditCommand(),
  },
  {
    name: "certs",
    description:
      "list the runner certificates this control plane issued, newest per " +
      "runner; flags those expiring soon and runners that failed to renew " +
      "(needs the read role)",
    load: async () => (await import("./certs.js")).certsCommand(),
  },
  {
    name: "runners",
    description:
      "runners as the control plane sees them (admin API; needs an identity granted --admin)",
    load: async () => (await import("./runners.js")).runnersCommand(),
  },
  {
    name: "repos",
    description:
      "repositories the control plane fetches from and pushes to (it alone holds their credentials)",
    load: async () => (await import("./repos.js")).reposCommand(),
  },
  {
    name: "jobs",
    description:
      "enqueue, follow, cancel and read jobs (admin API: an identity granted a role with serve --admin or --grant)",
    load: async () => {
      const [{ jobsCommand }, { addSamplesCommand }, { addAnswerCommand }, { addRetryCommand }] =
        await Promise.all([
          import("./jobs.js"),
          import("./samples.js"),
          import("./jobs-answer.js"),
          import("./pipelines.js"),
        ]);
      return addRetryCommand(addAnswerCommand(addSamplesCommand(jobsCommand())));
    },
  },
  {
    name: "status",
    description:
      "the control plane's status: build, database, replicas, queues, runners, pool, certificates",
    load: async () => (await import("./status.js")).statusCommand(),
  },
  {
    name: "doctor",
    description:
      "run the control plane's health checks (certificates, issuer, database, " +
      "clock, artifacts, LISTEN, backlogs); exits 1 when one fails",
    load: async () => (await import("./doctor.js")).doctorCommand(),
  },
  {
    name: "schedules",
    description:
      "cron schedules that enqueue a job or submit a pipeline at each due time, " +
      "once across replicas (admin API)",
    load: async () => (await import("./schedules.js")).schedulesCommand(),
  },
  {
    name: "workspaces",
    description: "pause and resume workspaces (admin API; needs an identity granted --admin)",
    load: async () => (await import("./workspaces.js")).workspacesCommand(),
  },
  {
    name: "webhooks",
    description:
      "signed, retried POSTs of the event stream's events to https URLs, with a " +
      "delivery log and redelivery (admin API; docs/webhooks.md)",
    load: async () => (await import("./webhooks.js")).webhooksCommand(),
  },
  {
    name: "events",
    description:
      "the control plane's events (job.queued, job.leased, job.settled, " +
      "runner.paused, workspace.paused, ...), oldest first",
    load: async () => (await import("./events.js")).eventsCommand(),
  },
  {
    name: "stats",
    description:
      "per workspace: jobs by final state and error code, attempts, lease " +
      "losses, timeouts, cancels, wait and run times; per runner: jobs and " +
      "busy time",
    load: async () => (await import("./stats.js")).statsCommand(),
  },
  {
    name: "sizing",
    description:
      "settled jobs grouped by workspace, labels and image: requested CPU and " +
      "memory against the p95 of their peaks, with advice",
    load: async () => (await import("./samples.js")).sizingCommand(),
  },
  {
    name: "pipelines",
    description:
      "submit and watch pipelines: step graphs whose steps run as jobs once " +
      "their needs succeeded (enqueue and read roles)",
    load: async () => (await import("./pipelines.js")).pipelinesCommand(),
  },
  {
    name: "dashboard",
    description:
      "serve the web dashboard on loopback; its API calls go to the control " +
      "plane with your client certificate, as kubectl proxy does " +
      "(docs/dashboard.md)",
    load: async () => (await import("./dashboard.js")).dashboardCommand(),
  },
  {
    name: "config",
    description:
      "the CLI's configuration: flags, FORELEAD_* environment variables and the config file (docs/cli.md)",
    load: async () => (await import("./config.js")).configCommand(),
  },
  {
    name: "conformance",
    description:
      "check a runner against the protocol: start a throwaway control plane, " +
      "start the runner with a fresh identity, run the compatibility rows, " +
      "print a table; exits 1 when a row fails (docs/conformance.md)",
    load: async () => (await import("./conformance.js")).conformanceCommand(),
  },
  {
    name: "version",
    description:
      "print the version, commit, build date and Node.js version (as GET /v1/admin/status reports them)",
    load: async () => versionCommand(),
  },
];

/**
 * What `--version` and `forelead version` print: the build facts of `GET /v1/admin/status`, and
 * Node's version.
 */
export function versionText(): string {
  const build = buildInfo();
  return (
    `forelead ${build.version}\ncommit: ${build.commit}\nbuilt: ` +
    `${build.buildDate || "unknown"}\nnode: ${process.version}\n`
  );
}

function versionCommand(): Command {
  return new Command("version")
    .option("--json", "one JSON object: version, commit, buildDate, node")
    .action((flags: { json?: boolean }) => {
      process.stdout.write(
        flags.json
          ? `${JSON.stringify({ ...buildInfo(), node: process.version })}\n`
          : versionText(),
      );
    });
}

/**
 * `--version` on `cmd` and every subcommand below it, like commander's own version option
 * but computed only when asked (the build facts may run git in a source checkout).
 */
function addVersionOption(cmd: Command): void {
  if (!cmd.options.some((o) => o.long === "--version")) {
    cmd.option(
      cmd.parent ? "--version" : "-V, --version",
      "print the version, commit, build date and Node.js version",
    );
    cmd.on("option:version", () => {
      process.stdout.write(versionText());
      process.exit(0);
    });
  }
  for (const sub of cmd.commands) addVersionOption(sub);
}

/**
 * The group named on the command line: the first argument that is not an option (or the one after
 * `help`).
 */
function groupNamed(args: readonly string[]): CommandGroup | undefined {
  const [first, second] = args.filter((a) => !a.startsWith("-"));
  const name = first === "help" ? second : first;
  return commandGroups.find((g) => g.name === name);
}

/** The `forelead` command. */
export async function main(argv: readonly string[]): Promise<void> {
  const program = new Command("forelead")
    .description(
      "Forelead control plane: leases jobs to runners over HTTP/2 + mTLS with SPIFFE identities",
    )
    .showHelpAfterError("(run with --help for usage)")
    .enablePositionalOptions()
    .exitOverride();
  try {
    const wanted = groupNamed(argv.slice(2));
    for (const group of commandGroups) {
      // The other groups stay placeholders: enough for the help to list them.
      program.addCommand(
        (group === wanted ? await group.load() : new Command(group.name)).description(
          group.description,
        ),
      );
    }
    addVersionOption(program);
    await program.parseAsync([...argv]);
  } catch (err) {
    if (err instanceof CommanderError) process.exit(err.exitCode);
    console.error(`forelead: error: ${(err as Error).message}`);
    process.exit(1);
  }
}

import { buildInfo } from "../server/build-info.js";
import { randomUUID } from "node:crypto";
import { defaultWorkDir } from "../runner/lifecycle/work-dir.js";
import os from "node:os";
import { performance } from "node:perf_hooks";
import { Command, InvalidArgumentError, Option } from "commander";
import { parseDuration } from "../api/time-range.js";
import { readNamedFile } from "../identity/pki-files.js";
import { keepIdentityFresh } from "../runner/identity/keeper.js";
import { loadIdentity } from "../runner/identity/state-dir.js";
import { startRunnerAgent, type AgentEnd, type RunnerAgent } from "../runner/lifecycle/agent.js";
import { readRunnerCertificate } from "../runner/identity/runner-identity.js";
import { createRunnerClient, RunnerApiError } from "../runner/transport/client.js";
import { fixOf, type TlsSources } from "../runner/transport/failures.js";
import { createExecutor, executors, type ExecutorKind } from "../runner/executors/kinds.js";
import { createControlPlaneOutput } from "../runner/output/control-plane-output.js";
import { protocolCheckout } from "../runner/checkout/protocol-checkout.js";
import { createRunnerProtocol } from "../runner/transport/protocol-client.js";
import { createRestTransport } from "../runner/transport/rest-transport.js";
import { lockDirectory } from "../store/data-dir-lock.js";
import { loginSource, resolveConnection } from "./connection.js";
import { collect, collectList, integerIn, pathOption } from "./options.js";
import {
  describeIsolation,
  jobNetworks,
  probeIsolation,
  type JobNetwork,
} from "../runner/executors/isolation.js";

interface RunnerFlags {
  server: string;
  ca: string;
  cert?: string;
  key?: string;
  slots: number;
  label?: string[];
  labels?: string[];
  profile?: string;
  executor: ExecutorKind;
  workDir?: string;
  graceSeconds: number;
  sampleIntervalMs: number;
  force?: boolean;
  stateDir?: string;
  once?: boolean;
  idleExit?: number;
  jobNetwork?: JobNetwork;
  check?: boolean;
}

/**
 * The runner's exit codes (docs/deploy.md). As with GitHub's ephemeral
 * runners and Buildkite's --disconnect-after-job, the job's own outcome is
 * not the runner's: a failed job that was settled is exit 0.
 */
const runnerExit = {
  /** Stopped as asked: a signal's drain, --idle-exit, or --once with its job settled. */
  done: 0,
  /** --once: no job was leased before --idle-exit passed. */
  noJob: 3,
  /**
   * --once: the job ran but its completion was not taken (lease lost, refused, or not answered
   * before the runner stopped).
   */
  unsettled: 4,
  /**
   * The control plane cannot be verified or refuses this runner (wrong --ca or host, certificate
   * refused, retired): fix the configuration.
   */
  refused: 5,
  /**
   * Another live process holds this runner identity (409 on register); accepted once it has been
   * silent for the lease length.
   */
  secondInstance: 6,
} as const;

/** `forelead runner`: the runner agent. */
export function runnerCommand(): Command {
  return (
    new Command("runner")
      // Options after `enroll` belong to enroll, not to the agent.
      .enablePositionalOptions()
      // Not requiredOption: commander would demand them of `forelead runner enroll` too.
      .option("--server <url>", "the control plane, e.g. https://127.0.0.1:8443 (required)")
      .addOption(
        pathOption(
          "--ca <file>",
          "CA bundle that signed the control plane's certificate (PEM) (required)",
        ),
      )
      .addOption(
        pathOption(
          "--cert <file>",
          "this runner's certificate (PEM); its SPIFFE ID names the runner and " +
            "workspace; re-read on every new connection",
        ),
      )
      .addOption(pathOption("--key <file>", "the certificate's private key (PEM)"))
      .addOption(
        pathOption(
          "--state-dir <dir>",
          "use the identity `forelead runner enroll` wrote here instead of " +
            "--cert/--key, and renew it at about half its lifetime (one runner at a " +
            "time: it is locked)",
        ),
      )
      .addOption(
        new Option("--slots <n>", "most jobs run at once")
          .default(1)
          .argParser(integerIn("--slots", 1, 1000)),
      )
      .option(
        "--labels <list>",
        "labels offered to jobs, comma separated (default: the OS and the executor, e.g. linux,docker)",
        collectList,
      )
      .option("--label <label>", "a label offered to jobs (repeatable; adds to --labels)", collect)
      .option("--profile <name>", "the config file's profile to take --server and --ca from")
      .addOption(
        new Option("--executor <kind>", "how jobs run")
          .choices(Object.keys(executors))
          .default("docker"),
      )
      .addOption(
        pathOption(
          "--work-dir <dir>",
          "where job directories are made; it and its parents must be this user's " +
            "or root's and not group- or world-writable (default: " +
            "<state-dir>/<runner-id>/work, else " +
            "~/.local/state/forelead/runners/<runner-id>/work, or " +
            "/var/lib/forelead/runners/<runner-id>/work as root)",
        ),
      )
      .addOption(
        new Option(
          "--grace-seconds <n>",
          "TERM-to-KILL grace for cancel, timeout and forced shutdown",
        )
          .default(10)
          .argParser(integerIn("--grace-seconds", 0, 3600)),
      )
      .addOption(
        new Option(
          "--sample-interval-ms <n>",
          "how often each running job's CPU and memory are sent as resource.sample events (0: never)",
        )
          .default(5000)
          .argParser(integerIn("--sample-interval-ms", 0, 3_600_000)),
      )
      .addOption(
        new Option(
          "--job-network <mode>",
          "process executor: each job's network: private (default; its own namespace with NAT " +
            "to the outside, no host address), none (loopback only) or host (the host's own, " +
            "loopback services included: docs/operations.md); a mode the host cannot give " +
            "stops the runner",
        ).choices(jobNetworks),
      )
      .option(
        "--check",
        "print what this host isolates process-executor jobs with (available or not, and " +
          "why) and exit",
      )
      .option(
        "--force",
        "on SIGTERM, stop running jobs and release their leases at once instead of draining",
      )
      .option(
        "--once",
        "take one job (whatever --slots says), run it, settle it and exit: 0 " +
          "once it is settled, whatever its outcome (exit codes: docs/deploy.md)",
      )
      .addOption(
        new Option(
          "--idle-exit <duration>",
          "exit (0) after this long with no job running, e.g. 30s or 5m; with --once, no job by then exits 3",
        ).argParser(durationFlag("--idle-exit")),
      )
      .action(async (given: RunnerFlags) => {
        if (given.check) {
          for (const line of describeIsolation(await probeIsolation()))
            console.log(`forelead runner: ${line}`);
          return;
        }
        const flags = await withConnectionSettings(given);
        if (flags.jobNetwork && flags.executor !== "process")
          throw new Error(
            `--job-network is for the process executor; the ${flags.executor} executor gives ` +
              "each job a network of its own",
          );
        if (!flags.server || !flags.ca)
          throw new Error(
            "--server and --ca are required: the control plane's URL and the CA bundle that signed its certificate",
          );
        const server = new URL(flags.server);
        if (server.protocol !== "https:")
          throw new Error(`--server ${flags.server} must be an https:// URL`);
        const log = (message: string) =>
          console.log(`${new Date().toISOString()} forelead runner: ${message}`);
        const ca = await readNamedFile(flags.ca, "--ca");
        const { identity, tls, keeper } = await runnerTls(flags, ca, log);
        const transport = createRestTransport(server.origin, tls, { sources: tlsSources(flags) });
        // Code bundles and uploads go over Connect with the same certificate.
        const protocol = createRunnerProtocol(server.origin, tls);
        keeper?.onRenewed((renewed) => {
          log(
            `certificate renewed (serial ${renewed.serialHex}, valid until ` +
              `${renewed.notAfter.toISOString()}); reconnecting with it`,
          );
          transport.reconnect();
          protocol.reconnect();
        });
        const client = createRunnerClient(transport, identity.runnerId, identity.workspaceId);
        const executor = createExecutor(flags.executor, identity, {
          jobNetwork: flags.jobNetwork,
          log,
        });
        const labels =
          flags.labels || flags.label
            ? [...(flags.labels ?? []), ...(flags.label ?? [])]
            : [os.platform(), flags.executor];
        // Before the agent is up (connecting, registering, retrying) it holds no lease: a signal
        // then ends the runner at once (exit 0, stopped as asked), whatever the retry was waiting
        // for.
        let agent: RunnerAgent | undefined = undefined;
        let signals = 0;
        const onSignal = (signal: string) => {
          if (!agent) {
            log(`${signal} while connecting to the control plane: stopped (no job was claimed)`);
            process.exit(runnerExit.done);
          }
          signals++;
          const drain = signals === 1 && !flags.force;
          if (drain)
            log(
              `${signal}: draining (send it again to stop running jobs and release their leases)`,
            );
          else log(`${signal}: stopping running jobs and releasing their leases`);
          if (agent) void (drain ? agent.drain() : agent.stop());
        };
        process.on("SIGTERM", () => onSignal("SIGTERM"));
        process.on("SIGINT", () => onSignal("SIGINT"));
        agent = await startRunnerAgent({
          // This process: the control plane refuses a second live one with the same identity.
          instance: { id: randomUUID(), startedAt: new Date(performance.timeOrigin) },
          version: buildInfo().version,
          jobLimit: flags.once ? 1 : undefined,
          idleExitMs: flags.idleExit,
          client,
          executor,
          output: createControlPlaneOutput(client, { warn: log }),
          slots: flags.slots,
          labels,
          capacity: { cpu: os.availableParallelism(), memoryBytes: os.totalmem() },
          architecture: architecture(os.arch()),
          os: os.platform(),
          executionKind: flags.executor,
          workDir: flags.workDir ?? defaultWorkDir(identity.runnerId, flags.stateDir),
          graceMs: flags.graceSeconds * 1000,
          sampleIntervalMs: flags.sampleIntervalMs,
          checkout: protocolCheckout(protocol.client),
          uploads: protocol.client,
          suspends: protocol.suspendClient,
          inputs: protocol.client,
          log,
        }).catch((err: unknown) => {
          // A failure no retry cures ends the command here with what to fix, before any job.
          if (!fixOf(err)) throw err;
          console.error(`${new Date().toISOString()} forelead runner: cannot start: ${fixOf(err)}`);
          process.exit(exitCodeOf(err));
        });
        const end = await agent.stopped;
        keeper?.stop();
        await client.close();
        protocol.close();
        const code = exitOf(end, flags.once === true);
        log(
          `stopped (${end.reason}; ${end.claimed} job(s) claimed, ${end.settled} settled; exit ${code})`,
        );
        process.exit(code);
      })
  );
}

/**
 * Where the runner's certificate comes from: --cert/--key files (re-read on
 * every new connection, so an external renewer may replace them), or an
 * enrolled --state-dir that this process renews itself.
 */
async function runnerTls(flags: RunnerFlags, ca: string, log: (message: string) => void) {
  if (flags.stateDir) {
    if (flags.cert || flags.key)
      throw new Error(
        "--state-dir and --cert/--key exclude each other: use the enrolled state directory or certificate files",
      );
    // Before reading it: two runners renewing one identity would each replace the other's key.
    const lock = lockDirectory(
      flags.stateDir,
      "forelead runner",
      "stop it or use another --state-dir",
    );
    const enrolled = await loadIdentity(flags.stateDir).catch((err: unknown) => {
      lock.close();
      throw err;
    });
    const keeper = keepIdentityFresh({ server: flags.server, caPem: ca }, enrolled, {
      stateDir: flags.stateDir,
      onError: (err, retryInMs) =>
        log(
          `certificate renewal failed: ` +
            `${err.message}` +
            `${retryInMs === undefined ? "; not retrying" : `; retrying in ${Math.round(retryInMs / 1000)} s`}`,
        ),
    });
    const identity = { runnerId: enrolled.runnerId, workspaceId: enrolled.workspaceId };
    return {
      identity,
      keeper,
      tls: () => ({ ca, cert: keeper.current().certPem, key: keeper.current().keyPem }),
    };
  }
  if (!flags.cert || !flags.key)
    throw new Error(
      "give --cert and --key (a runner certificate and its key), or --state-dir from `forelead runner enroll`",
    );
  const identity = readRunnerCertificate(
    await readNamedFile(flags.cert, "--cert"),
    `--cert ${flags.cert}`,
  );
  const tls = async () => ({
    ca: await readNamedFile(flags.ca, "--ca"),
    cert: await readNamedFile(flags.cert!, "--cert"),
    key: await readNamedFile(flags.key!, "--key"),
  });
  await tls(); // unreadable files fail now, with their names
  return { identity, keeper: undefined, tls };
}

/** The architecture names registrations use (Go's, as container images do): amd64, arm64, ... */
export function architecture(nodeArch: string): string {
  const names: Record<string, string> = {
    x64: "amd64",
    arm64: "arm64",
    arm: "arm",
    ia32: "386",
    ppc64: "ppc64le",
    s390x: "s390x",
    riscv64: "riscv64",
  };
  return names[nodeArch] ?? nodeArch;
}

/** The exit code of a stopped agent (runnerExit). */
function exitOf(end: AgentEnd, once: boolean): number {
  if (end.failure) return exitCodeOf(end.failure);
  if (!once) return runnerExit.done;
  if (end.claimed === 0) return end.reason === "idle" ? runnerExit.noJob : runnerExit.done;
  return end.settled > 0 ? runnerExit.done : runnerExit.unsettled;
}

/** The exit code of a failure no retry cures. */
function exitCodeOf(err: unknown): number {
  return err instanceof RunnerApiError && err.secondInstance
    ? runnerExit.secondInstance
    : runnerExit.refused;
}

/**
 * The flags with what --server, --ca, --cert and --key leave unset taken as every other command
 * takes them (FORELEAD_SERVER, FORELEAD_CA, ..., the config file's profile; docs/cli.md). The
 * certificate and key only without --state-dir, and never the CLI's default files: a runner's
 * identity is its own.
 */
async function withConnectionSettings(flags: RunnerFlags): Promise<RunnerFlags> {
  const { settings } = await resolveConnection(flags);
  // Neither the CLI's default files nor a person's sign-in (forelead login) is a runner's identity.
  const given = (key: "cert" | "key") =>
    flags.stateDir || settings[key].source === "default" || settings[key].source === loginSource
      ? flags[key]
      : settings[key].value;
  return {
    ...flags,
    server: settings.server.source === "default" ? flags.server : settings.server.value,
    ca: settings.ca.source === "default" ? flags.ca : settings.ca.value,
    cert: given("cert"),
    key: given("key"),
  };
}

/** The flags the TLS material came from, as a refusal names them. */
function tlsSources(flags: RunnerFlags): TlsSources {
  return {
    ca: `--ca ${flags.ca}`,
    cert: flags.stateDir ? `the identity in --state-dir ${flags.stateDir}` : `--cert ${flags.cert}`,
  };
}

/**
 * A commander parser for a duration flag ("30s", "5m", "2h"): milliseconds, at least one second.
 */
function durationFlag(name: string): (value: string) => number {
  return (value) => {
    const ms = parseDuration(value);
    if (ms === undefined || ms < 1000)
      throw new InvalidArgumentError(
        `${name} must be a duration of at least 1s: a number and a unit (s, m, h ` +
          `or d), e.g. 30s or 5m; got ${JSON.stringify(value)}`,
      );
    return ms;
  };
}

import { readFile } from "node:fs/promises";
import os from "node:os";
import { join } from "node:path";
import { Command, Option } from "commander";
import { startRunnerAgent } from "../runner/agent.js";
import { runnerIdentityFromCertificate } from "../runner/certificate-identity.js";
import { createRunnerClient } from "../runner/client.js";
import { createDockerExecutor } from "../runner/docker-executor.js";
import type { Executor } from "../runner/executor.js";
import { createHttpOutput } from "../runner/http-output.js";
import { createProcessExecutor } from "../runner/process-executor.js";
import { createRestTransport } from "../runner/rest-transport.js";
import { integerIn } from "./main.js";

interface RunnerFlags {
  server: string;
  ca: string;
  cert: string;
  key: string;
  slots: number;
  labels?: string;
  executor: "docker" | "process";
  workDir?: string;
  graceSeconds: number;
  force?: boolean;
}

/** `forelead runner`: the runner agent. */
export function runnerCommand(): Command {
  return new Command("runner")
    .description("run leased jobs from a control plane, in Docker or as local processes")
    .requiredOption("--server <url>", "the control plane, e.g. https://127.0.0.1:8443")
    .requiredOption("--ca <file>", "CA bundle that signed the control plane's certificate (PEM)")
    .requiredOption("--cert <file>", "this runner's certificate (PEM); its SPIFFE ID names the runner and workspace; re-read on every new connection")
    .requiredOption("--key <file>", "the certificate's private key (PEM)")
    .addOption(new Option("--slots <n>", "most jobs run at once").default(1).argParser(integerIn("--slots", 1, 1000)))
    .option("--labels <list>", "labels offered to jobs, comma separated (default: the OS and the executor, e.g. linux,docker)")
    .addOption(new Option("--executor <kind>", "how jobs run").choices(["docker", "process"]).default("docker"))
    .option("--work-dir <dir>", "where job directories are made (default: <tmp>/forelead-runner/<runner-id>)")
    .addOption(new Option("--grace-seconds <n>", "TERM-to-KILL grace for cancel, timeout and forced shutdown").default(10).argParser(integerIn("--grace-seconds", 0, 3600)))
    .option("--force", "on SIGTERM, stop running jobs and release their leases at once instead of draining")
    .action(async (flags: RunnerFlags) => {
      const server = new URL(flags.server);
      if (server.protocol !== "https:") throw new Error(`--server ${flags.server} must be an https:// URL`);
      const identity = runnerIdentityFromCertificate(await read(flags.cert, "--cert"), `--cert ${flags.cert}`);
      const tls = async () => ({ ca: await read(flags.ca, "--ca"), cert: await read(flags.cert, "--cert"), key: await read(flags.key, "--key") });
      await tls(); // unreadable files fail now, with their names
      const log = (message: string) => console.log(`forelead runner: ${message}`);
      const client = createRunnerClient(createRestTransport(server.origin, tls), identity.runnerId, identity.workspaceId);
      const executor: Executor = flags.executor === "docker" ? createDockerExecutor({ runnerId: identity.runnerId, workspaceId: identity.workspaceId }) : createProcessExecutor();
      const labels = flags.labels !== undefined ? flags.labels.split(",").map((l) => l.trim()).filter(Boolean) : [os.platform(), flags.executor];
      const agent = await startRunnerAgent({
        client,
        executor,
        output: createHttpOutput(client, { warn: log }),
        slots: flags.slots,
        labels,
        capacity: { cpu: os.availableParallelism(), memoryBytes: os.totalmem() },
        architecture: architecture(os.arch()),
        workDir: flags.workDir ?? join(os.tmpdir(), "forelead-runner", identity.runnerId),
        graceMs: flags.graceSeconds * 1000,
        log,
      });
      let signals = 0;
      const onSignal = (signal: string) => {
        signals++;
        if (signals === 1 && !flags.force) {
          log(`${signal}: draining (send it again to stop running jobs and release their leases)`);
          void agent.drain();
        } else {
          log(`${signal}: stopping running jobs and releasing their leases`);
          void agent.stop();
        }
      };
      process.on("SIGTERM", () => onSignal("SIGTERM"));
      process.on("SIGINT", () => onSignal("SIGINT"));
      await agent.stopped;
      await client.close();
      log("stopped");
      process.exit(0);
    });
}

/** The architecture names registrations use (Go's, as container images do): amd64, arm64, ... */
export function architecture(nodeArch: string): string {
  const names: Record<string, string> = { x64: "amd64", arm64: "arm64", arm: "arm", ia32: "386", ppc64: "ppc64le", s390x: "s390x", riscv64: "riscv64" };
  return names[nodeArch] ?? nodeArch;
}

async function read(file: string, what: string): Promise<string> {
  try {
    return await readFile(file, "utf8");
  } catch (err) {
    throw new Error(`cannot read ${what} ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}

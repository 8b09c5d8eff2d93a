import "reflect-metadata";
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { basename, join } from "node:path";
import { createServer, type Server } from "node:net";
import { networkInterfaces } from "node:os";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { specFor, startTestRunner, type TestRunner } from "../support/runner-agent.js";
import { readEntries } from "../support/streams.js";
import { probeIsolation, type IsolationReport } from "../../src/runner/executors/isolation.js";

const run = promisify(execFile);

// Isolation a job cannot talk its way out of (hostile-jobs issue, item 2): on the process executor
// as root each job runs in a PID namespace with its own /proc, and in a network namespace of its
// own (--job-network private or none), so it reads no other job's command line and reaches no
// service on the host's loopback or other local addresses.
const cp = useControlPlane();
const { admin } = cp;
const isRoot = process.getuid?.() === 0;
const ws = "isolation";
let report: IsolationReport;

async function enqueue(script: string, timeoutSeconds = 60): Promise<string> {
  const reply = await admin.enqueue({
    workspaceId: ws,
    spec: specFor("process", { argv: ["bash", "-c", script], timeoutSeconds }),
  });
  expect(reply.status, reply.text).toBe(200);
  return reply.json.job.id as string;
}

async function settled(jobId: string) {
  const job = await eventually(
    `job ${jobId} to settle`,
    async () => {
      const j = (await admin.job(jobId)).json.job;
      return ["succeeded", "failed", "cancelled"].includes(j.state) ? j : undefined;
    },
    30_000,
  );
  const logs = await readEntries(admin, jobId, "logs", "?pageSize=200");
  return { job, lines: logs.map((e) => (e.data as { text: string }).text) };
}

/** A TCP listener on `host` that greets whoever connects; its port. */
async function listen(host: string): Promise<{ server: Server; port: number }> {
  const server = createServer((socket) => socket.end("hello from the host\n"));
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return { server, port: (server.address() as { port: number }).port };
}

/** A job script that tries a TCP connection and prints `<label> connected|refused`. */
const tryConnect = (label: string, host: string, port: number) =>
  `if timeout 3 bash -c 'exec 3<>/dev/tcp/${host}/${port} && head -n1 <&3' >/dev/null 2>&1; ` +
  `then echo "${label} connected"; else echo "${label} refused"; fi`;

/** A non-loopback IPv4 address of this host (eth0's, say), or undefined. */
function hostAddress(): string | undefined {
  for (const list of Object.values(networkInterfaces()))
    for (const a of list ?? []) if (a.family === "IPv4" && !a.internal) return a.address;
  return undefined;
}

beforeAll(async () => {
  if (isRoot) report = await probeIsolation();
});

describe.runIf(isRoot)(`a job sees only its own processes (${databaseKind})`, () => {
  let runner: TestRunner;
  beforeAll(async () => {
    runner = await startTestRunner(cp, {
      runnerId: "iso1",
      workspaceId: ws,
      executor: "process",
      slots: 2,
    });
  });
  afterAll(() => runner?.close());

  it("a job listing /proc cannot read another running job's command line", async () => {
    expect(report.pidNamespace.available, report.pidNamespace.detail).toBe(true);
    const secretArg = "neighbour-marker-4711";
    const neighbour = await enqueue(`echo started; exec bash -c 'sleep 30; : ${secretArg}'`);
    await runner.waitForLine(neighbour, /^started$/);
    // The neighbour is running: the host's /proc shows its command line.
    const { stdout } = await run("ps", ["-eo", "args"]);
    expect(stdout.includes(secretArg)).toBe(true);

    const lister = await enqueue(
      "for p in /proc/[0-9]*; do echo \"pid ${p#/proc/}: $(tr '\\0' ' ' < $p/cmdline)\"; done",
    );
    const { job, lines } = await settled(lister);
    expect(job.state).toBe("succeeded");
    const pids = lines.filter((l) => l.startsWith("pid "));
    // Its init, its shell and what the shell ran: nothing of the neighbour, the runner or the host.
    expect(pids.length, "processes the job listed").toBeGreaterThan(0);
    expect(pids.length, "processes the job listed").toBeLessThanOrEqual(4);
    expect(lines.some((l) => l.includes(secretArg))).toBe(false);
    expect(lines.some((l) => /vitest|node /.test(l))).toBe(false);
    await admin.cancel(neighbour);
    await settled(neighbour);
  });
});

describe.runIf(isRoot)(`a job's cgroup and runner --check (${databaseKind})`, () => {
  let runner: TestRunner;
  beforeAll(async () => {
    runner = await startTestRunner(cp, { runnerId: "iso2", workspaceId: ws, executor: "process" });
  });
  afterAll(() => runner?.close());

  it("a job runs in a cgroup of its own, removed when it ends", async () => {
    expect(report.cgroup.available, report.cgroup.detail).toBe(true);
    const { job, lines } = await settled(await enqueue("grep '^0::' /proc/self/cgroup"));
    expect(job.state).toBe("succeeded");
    const path = lines.find((l) => l.startsWith("0::"))?.slice(3);
    expect(path, lines.join("\n")).toMatch(/\/forelead-job-[0-9a-f]+$/);
    expect(existsSync(join(report.cgroupParent!, basename(path!)))).toBe(false);
  });

  it("forelead runner --check says what this host isolates jobs with", async () => {
    const { stdout } = await run(process.execPath, ["bin/forelead.js", "runner", "--check"]);
    for (const feature of [
      "per-job uid",
      "PID namespace + /proc",
      "cgroup (cgroup.kill)",
      "--job-network none",
      "--job-network private",
    ])
      expect(stdout).toMatch(new RegExp(`${escape(feature)} +available: `));
  });
});

/** `text` as a literal in a RegExp. */
const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");

describe.runIf(isRoot)(`--job-network private and none (${databaseKind})`, () => {
  const outsideNs = `fltest-out-${process.pid}`;
  const outsideHostEnd = `fltesth${process.pid % 100000}`;
  let loopback: { server: Server; port: number };
  let anyAddress: { server: Server; port: number };
  let outsidePort = 0;
  let outsideServer: ReturnType<typeof execFile> | undefined;
  let privateRunner: TestRunner;
  let noneRunner: TestRunner;

  beforeAll(async () => {
    loopback = await listen("127.0.0.1");
    anyAddress = await listen("0.0.0.0");
    // "The outside world": a network namespace beyond a veth pair of the host's, with a listener,
    // as this sandbox reaches no real outside network.
    await run("ip", ["netns", "add", outsideNs]);
    await run("ip", [
      "link",
      "add",
      outsideHostEnd,
      "type",
      "veth",
      "peer",
      "name",
      "eth0",
      "netns",
      outsideNs,
    ]);
    await run("ip", ["addr", "add", "10.250.77.1/24", "dev", outsideHostEnd]);
    await run("ip", ["link", "set", outsideHostEnd, "up"]);
    await run("ip", ["-n", outsideNs, "addr", "add", "10.250.77.2/24", "dev", "eth0"]);
    await run("ip", ["-n", outsideNs, "link", "set", "eth0", "up"]);
    await run("ip", ["-n", outsideNs, "link", "set", "lo", "up"]);
    outsidePort = 20_000 + (process.pid % 20_000);
    outsideServer = execFile("ip", [
      "netns",
      "exec",
      outsideNs,
      process.execPath,
      "-e",
      `require("net").createServer((s) => s.end("hello from outside\\n")).listen(${outsidePort})`,
    ]);
    await eventually("the outside listener", async () => {
      const { stdout } = await run("ip", ["netns", "exec", outsideNs, "ss", "-ltn"]);
      return stdout.includes(`:${outsidePort}`) ? true : undefined;
    });
    privateRunner = await startTestRunner(cp, {
      runnerId: "iso-private",
      workspaceId: ws,
      executor: "process",
      jobNetwork: "private",
      labels: ["net-private"],
    });
    noneRunner = await startTestRunner(cp, {
      runnerId: "iso-none",
      workspaceId: ws,
      executor: "process",
      jobNetwork: "none",
      labels: ["net-none"],
    });
  });
  afterAll(async () => {
    await privateRunner?.close();
    await noneRunner?.close();
    loopback?.server.close();
    anyAddress?.server.close();
    outsideServer?.kill();
    await run("ip", ["link", "del", outsideHostEnd]).catch(() => {});
    await run("ip", ["netns", "del", outsideNs]).catch(() => {});
  });

  async function probe(label: string): Promise<string[]> {
    const host = hostAddress();
    const script = [
      tryConnect("loopback", "127.0.0.1", loopback.port),
      host ? tryConnect("host-address", host, anyAddress.port) : "echo host-address none",
      tryConnect("host-veth", "10.250.77.1", anyAddress.port),
      tryConnect("outside", "10.250.77.2", outsidePort),
    ].join("; ");
    const reply = await admin.enqueue({
      workspaceId: ws,
      labels: [label],
      spec: specFor("process", { argv: ["bash", "-c", script], timeoutSeconds: 60 }),
    });
    expect(reply.status, reply.text).toBe(200);
    const { job, lines } = await settled(reply.json.job.id as string);
    expect(job.state, lines.join("\n")).toBe("succeeded");
    return lines;
  }

  it("the host's own listeners are out of reach from both, and the outside only from private", async () => {
    // What the job tries, as the host itself: every listener answers.
    const host = hostAddress();
    const asHost = await run("bash", [
      "-c",
      [
        tryConnect("loopback", "127.0.0.1", loopback.port),
        host ? tryConnect("host-address", host, anyAddress.port) : "echo host-address none",
        tryConnect("outside", "10.250.77.2", outsidePort),
      ].join("; "),
    ]);
    expect(asHost.stdout).toContain("loopback connected");
    expect(asHost.stdout).toContain("outside connected");

    const priv = await probe("net-private");
    expect(priv).toContain("loopback refused");
    expect(priv).toContain(host ? "host-address refused" : "host-address none");
    expect(priv).toContain("host-veth refused");
    expect(priv).toContain("outside connected");

    const none = await probe("net-none");
    expect(none).toContain("loopback refused");
    expect(none).toContain(host ? "host-address refused" : "host-address none");
    expect(none).toContain("host-veth refused");
    expect(none).toContain("outside refused");
  });
});

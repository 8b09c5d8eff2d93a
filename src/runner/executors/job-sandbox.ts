// One job's sandbox on the process executor, as root: a cgroup v2 directory that cgroup.kill ends,
// a PID namespace with its own /proc whose init is a small perl program, and a network namespace
// (none: loopback only; private: a veth pair to the host, NATed to the outside, refused by the
// host's INPUT chain). What the host offers comes from isolation.ts.
import { execFile } from "node:child_process";
import { randomInt } from "node:crypto";
import { mkdir, rmdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import { privateSubnet, vethPrefix, type IsolationReport, type JobNetwork } from "./isolation.js";

const run = promisify(execFile);

/**
 * The job's init (PID 1 of its namespace), as the job's uid: runs the job's argv as its child,
 * reaps every orphan, ignores the signals a process group kill sends it (the job, in the same
 * group, gets them itself), and ends with the job, which ends the namespace: the kernel kills
 * whatever else is in it. How the job ended is written to fd 3 (closed in the job): `S <signal
 * number>` or `E <errno name> <message>` when the argv could not be run; an exit code is its own.
 */
const init = `
use POSIX (); use Fcntl;
open(my $st, '>&=', 3) or die "fd 3: $!";
my $pid = fork; die "fork: $!" unless defined $pid;
if (!$pid) {
  fcntl($st, F_SETFD, FD_CLOEXEC);
  { exec { $ARGV[0] } @ARGV; }
  my $code = $!{ENOENT} ? 'ENOENT' : $!{EACCES} ? 'EACCES' : 'EEXEC';
  syswrite $st, "E $code $!"; POSIX::_exit(127);
}
$SIG{$_} = sub {} for qw(TERM INT HUP QUIT USR1 USR2 ALRM);
my $s = 0;
while (1) {
  my $w = waitpid(-1, 0);
  if ($w == -1) { next if $!{EINTR}; last; }
  if ($w == $pid) { $s = $?; last; }
}
if ($s & 127) { syswrite $st, "S " . ($s & 127); exit 128 + ($s & 127); }
exit $s >> 8;
`;

/** The command a sandboxed job runs as: a program and its arguments. */
interface SandboxCommand {
  readonly file: string;
  readonly args: string[];
}

/** One job's sandbox: made before it starts, ended and removed after. */
export interface JobSandbox {
  /** What it made, as recoverSandbox() takes it after a crash. */
  readonly made: SandboxParts;
  /** The job's argv wrapped to enter the sandbox (spawned as root; the job runs as `uid`). */
  command(argv: readonly string[]): SandboxCommand;
  /** Kills every process in the job's cgroup (nothing when there is none). */
  kill(): Promise<void>;
  /** Removes the cgroup and the network namespace; after kill(). */
  remove(): Promise<void>;
}

/** The cgroup directory and network namespace a sandbox made, where it made them. */
export interface SandboxParts {
  readonly cgroup?: string;
  readonly netns?: string;
}

/**
 * Removes what a sandbox of an earlier life of this runner left (its processes were killed, or
 * ended): its cgroup (after cgroup.kill), and its network namespace once nothing runs in it. Only
 * names this module makes are acted on.
 */
export async function recoverSandbox(report: IsolationReport, parts: SandboxParts): Promise<void> {
  const { cgroup, netns } = parts;
  if (
    cgroup &&
    report.cgroupParent &&
    cgroup.startsWith(report.cgroupParent) &&
    /^\/?forelead-job-[0-9a-f]+$/.test(cgroup.slice(report.cgroupParent.length))
  ) {
    await writeFile(join(cgroup, "cgroup.kill"), "1").catch(() => {});
    for (let round = 0; round < 50; round++) {
      const gone = await rmdir(cgroup).then(
        () => true,
        (err: NodeJS.ErrnoException) => err.code === "ENOENT",
      );
      if (gone) break;
      await sleep(20);
    }
  }
  const ip = report.tools.ip;
  if (netns && ip && /^forelead-\d+$/.test(netns)) {
    const { stdout } = await run(ip, ["netns", "pids", netns]).catch(() => ({ stdout: "x" }));
    if (stdout.trim() === "") await run(ip, ["netns", "del", netns]).catch(() => {});
  }
}

/** Host-wide iptables rules for private job networks, added once per process (idempotent). */
let natRules: Promise<void> | undefined;

async function ensureNatRules(iptables: string): Promise<void> {
  const subnet = `${privateSubnet.prefix}.0.0/${privateSubnet.bits}`;
  const jobs = `${vethPrefix}+`;
  // Inserted at the top in reverse, so they read in this order before any other rule (Docker's
  // FORWARD policy is DROP).
  const rules: string[][] = [
    // Nothing on the host answers a job: no local address (loopback or another interface's).
    ["filter", "INPUT", "-i", jobs, "-j", "DROP"],
    [
      "filter",
      "FORWARD",
      "-o",
      jobs,
      "-m",
      "conntrack",
      "--ctstate",
      "RELATED,ESTABLISHED",
      "-j",
      "ACCEPT",
    ],
    ["filter", "FORWARD", "-i", jobs, "-j", "ACCEPT"],
    // Link-local (cloud metadata endpoints) and other jobs are not the outside world.
    ["filter", "FORWARD", "-i", jobs, "-d", "169.254.0.0/16", "-j", "DROP"],
    ["filter", "FORWARD", "-i", jobs, "-o", jobs, "-j", "DROP"],
    ["nat", "POSTROUTING", "-s", subnet, "!", "-o", jobs, "-j", "MASQUERADE"],
  ];
  for (const [table, chain, ...rule] of rules) {
    const exists = await run(iptables, ["-w", "-t", table!, "-C", chain!, ...rule]).then(
      () => true,
      () => false,
    );
    if (!exists) await run(iptables, ["-w", "-t", table!, "-I", chain!, "1", ...rule]);
  }
}

/** Network namespaces of this process's running jobs, by index (its /30 and its names). */
const indexesInUse = new Set<number>();
const slots = 2 ** (32 - privateSubnet.bits) / 4;

/** Makes the network namespace of a job: loopback up; for private, a veth pair and a route. */
async function createNetns(
  ip: string,
  network: Exclude<JobNetwork, "host">,
): Promise<{ netns: string; remove: () => Promise<void> }> {
  for (let attempt = 0; ; attempt++) {
    let index: number;
    do index = 1 + randomInt(slots - 1);
    while (indexesInUse.has(index));
    indexesInUse.add(index);
    const netns = `forelead-${index}`;
    const remove = async () => {
      await run(ip, ["netns", "del", netns]).catch(() => {});
      indexesInUse.delete(index);
    };
    try {
      // Fails when another runner on this host holds the index: try another.
      await run(ip, ["netns", "add", netns]);
    } catch (err) {
      indexesInUse.delete(index);
      if (attempt < 5) continue;
      throw err;
    }
    try {
      await run(ip, ["-n", netns, "link", "set", "lo", "up"]);
      if (network === "private") {
        const veth = `${vethPrefix}${index}`;
        const base = index * 4;
        const at = (n: number) => `${privateSubnet.prefix}.${(base + n) >> 8}.${(base + n) & 255}`;
        await run(ip, [
          "link",
          "add",
          veth,
          "type",
          "veth",
          "peer",
          "name",
          "eth0",
          "netns",
          netns,
        ]);
        // No IPv6 on the host's end: a link-local address there would answer the job.
        await writeFile(`/proc/sys/net/ipv6/conf/${veth}/disable_ipv6`, "1").catch(
          (err: NodeJS.ErrnoException) => {
            if (err.code !== "ENOENT") throw err; // ENOENT: no IPv6 in this kernel
          },
        );
        await run(ip, ["addr", "add", `${at(1)}/30`, "dev", veth]);
        await run(ip, ["link", "set", veth, "up"]);
        await run(ip, ["-n", netns, "addr", "add", `${at(2)}/30`, "dev", "eth0"]);
        await run(ip, ["-n", netns, "link", "set", "eth0", "up"]);
        await run(ip, ["-n", netns, "route", "add", "default", "via", at(1)]);
      }
      return { netns, remove };
    } catch (err) {
      await remove();
      throw err;
    }
  }
}

/** Makes the sandbox of one job run as `uid`, with what `report` says the host offers. */
export async function createJobSandbox(
  report: IsolationReport,
  uid: number,
  network: JobNetwork,
): Promise<JobSandbox> {
  const { unshare, nsenter, perl, ip, iptables } = report.tools;
  if (!report.pidNamespace.available || !unshare || !perl)
    throw new Error(`no PID namespace here: ${report.pidNamespace.detail}`);
  let cgroup: string | undefined;
  if (report.cgroup.available && report.cgroupParent) {
    cgroup = join(report.cgroupParent, `forelead-job-${randomInt(2 ** 47).toString(16)}`);
    await mkdir(cgroup);
  }
  let netns: { netns: string; remove: () => Promise<void> } | undefined;
  try {
    if (network !== "host") {
      if (!ip || !nsenter) throw new Error("ip (iproute2) or nsenter is not installed");
      if (network === "private") {
        if (!iptables) throw new Error("iptables is not installed");
        await (natRules ??= ensureNatRules(iptables).catch((err: unknown) => {
          natRules = undefined;
          throw err;
        }));
      }
      netns = await createNetns(ip, network);
    }
  } catch (err) {
    if (cgroup) await rmdir(cgroup).catch(() => {});
    throw err;
  }
  const kill = async () => {
    if (cgroup) await writeFile(join(cgroup, "cgroup.kill"), "1").catch(() => {});
  };
  return {
    made: { cgroup, netns: netns?.netns },
    kill,
    command(argv) {
      const namespaced = [
        // Into the job's network namespace first (unshare --net=<file> would make a new one).
        ...(netns ? [nsenter!, `--net=/run/netns/${netns.netns}`, "--"] : []),
        unshare,
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        `--setgid=${uid}`,
        `--setuid=${uid}`,
        "--",
        perl,
        "-e",
        init,
        "--",
        ...argv,
      ];
      // Into the cgroup before anything forks: the shell moves itself, then becomes unshare.
      if (!cgroup) return { file: namespaced[0]!, args: namespaced.slice(1) };
      return {
        file: "/bin/sh",
        args: ["-c", 'echo $$ > "$0" && exec "$@"', join(cgroup, "cgroup.procs"), ...namespaced],
      };
    },
    async remove() {
      if (cgroup) {
        // Busy until the killed processes are gone: a few milliseconds.
        for (let round = 0; round < 100; round++) {
          const removed = await rmdir(cgroup).then(
            () => true,
            (err: NodeJS.ErrnoException) => err.code === "ENOENT",
          );
          if (removed) break;
          await kill();
          await sleep(20);
        }
      }
      await netns?.remove();
    },
  };
}

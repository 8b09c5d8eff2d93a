// What this host lets the process executor isolate a job with, found by trying it: a PID namespace
// with its own /proc (util-linux unshare, as root), a cgroup v2 directory per job whose
// cgroup.kill ends everything in it, and a network namespace per job (iproute2; NAT through
// iptables for the private mode). `forelead runner --check` prints the report; the executor uses
// what is available and refuses a network mode that is not (docs/operations.md, "What a job is
// isolated from").
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { access, constants, mkdir, readFile, rmdir } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

/** How a job's network is set up: docs/operations.md, "What a job is isolated from". */
export const jobNetworks = ["private", "none", "host"] as const;
/** One of jobNetworks. */
export type JobNetwork = (typeof jobNetworks)[number];

/** One isolation feature: whether this host gives it, and why not when it does not. */
interface IsolationFeature {
  readonly available: boolean;
  /** What was found: the reason it is missing, or what is used. */
  readonly detail: string;
}

/** What the process executor can isolate a job with on this host. */
export interface IsolationReport {
  /** A uid of its own per job (the runner runs as root). */
  readonly jobUsers: IsolationFeature;
  /** A PID namespace with its own /proc per job. */
  readonly pidNamespace: IsolationFeature;
  /** A cgroup v2 directory per job, ended with cgroup.kill. */
  readonly cgroup: IsolationFeature;
  /** --job-network none: a network namespace of its own with loopback only. */
  readonly networkNone: IsolationFeature;
  /** --job-network private: its own namespace reaching the outside world through NAT. */
  readonly networkPrivate: IsolationFeature;
  /** The programs the executor runs, by absolute path, where found. */
  readonly tools: Readonly<{
    unshare?: string;
    nsenter?: string;
    perl?: string;
    ip?: string;
    iptables?: string;
  }>;
  /** The cgroup v2 directory job cgroups are made in, when cgroup is available. */
  readonly cgroupParent?: string;
}

/** The addresses private job networks take their /30s from (docs/operations.md). */
export const privateSubnet = { prefix: "10.213", bits: 16 } as const;

/** Interface names of the host ends of job veth pairs: a prefix iptables matches with `+`. */
export const vethPrefix = "fljob";

/** Finds `name` in the usual system directories. */
async function which(name: string): Promise<string | undefined> {
  for (const dir of ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"])
    try {
      await access(join(dir, name), constants.X_OK);
      return join(dir, name);
    } catch {
      // not here
    }
  return undefined;
}

/** The stderr of a failed command, its last line, or its error code. */
function failure(err: unknown): string {
  const e = err as { stderr?: string; code?: string | number; message?: string };
  const line = (e.stderr ?? "").trim().split("\n").pop();
  return line || String(e.code ?? e.message);
}

const missing = (detail: string): IsolationFeature => ({ available: false, detail });
const present = (detail: string): IsolationFeature => ({ available: true, detail });

/**
 * The cgroup v2 mount point (the whole /sys/fs/cgroup on a unified host, or a hybrid host's
 * unified hierarchy such as /sys/fs/cgroup/unified) and this process's cgroup in it.
 */
function cgroup2Mount(): { mount: string; own: string } | undefined {
  let mountinfo: string, self: string;
  try {
    mountinfo = readFileSync("/proc/self/mountinfo", "utf8");
    self = readFileSync("/proc/self/cgroup", "utf8");
  } catch {
    return undefined;
  }
  // mountinfo: id parent major:minor root mount-point options ... - fstype source super-options
  const line = mountinfo.split("\n").find((l) => / - cgroup2 /.test(l));
  const own = self.match(/^0::(.*)$/m)?.[1];
  if (!line || own === undefined) return undefined;
  return { mount: line.split(" ")[4]!, own };
}

async function probeCgroup(root: boolean): Promise<{ feature: IsolationFeature; parent?: string }> {
  if (!root) return { feature: missing("the runner is not root") };
  const found = cgroup2Mount();
  if (!found) return { feature: missing("no cgroup v2 hierarchy is mounted") };
  // Beside the runner in its own cgroup: a systemd unit needs Delegate=yes for this.
  const parent = join(found.mount, found.own);
  const probe = join(parent, `forelead-probe-${process.pid}`);
  try {
    await mkdir(probe);
  } catch (err) {
    return {
      feature: missing(`cannot make a cgroup in ${parent}: ${(err as NodeJS.ErrnoException).code}`),
    };
  }
  try {
    await access(join(probe, "cgroup.kill"), constants.W_OK);
    return { feature: present(`job cgroups in ${parent}, ended by cgroup.kill`), parent };
  } catch {
    return { feature: missing(`${parent} has no cgroup.kill (Linux 5.14 or later needed)`) };
  } finally {
    await rmdir(probe).catch(() => {});
  }
}

async function probePidNamespace(
  root: boolean,
  unshare?: string,
  perl?: string,
): Promise<IsolationFeature> {
  if (!root) return missing("the runner is not root (unshare of a PID namespace needs it)");
  if (!unshare) return missing("unshare (util-linux) is not installed");
  if (!perl) return missing("perl is not installed (the job's init in its namespace runs on it)");
  try {
    const { stdout } = await run(unshare, [
      "--pid",
      "--fork",
      "--mount-proc",
      "--",
      perl,
      "-e",
      "opendir(my $d, '/proc') or die $!; print scalar grep { /^\\d+$/ } readdir $d",
    ]);
    if (stdout.trim() !== "1") return missing(`a new PID namespace's /proc showed ${stdout}`);
    return present(`${unshare} --pid --mount-proc`);
  } catch (err) {
    return missing(`unshare --pid --mount-proc failed: ${failure(err)}`);
  }
}

async function probeNetwork(
  root: boolean,
  ip?: string,
  iptables?: string,
): Promise<{ none: IsolationFeature; private: IsolationFeature }> {
  if (!root) {
    const why = missing("the runner is not root (network namespaces need it)");
    return { none: why, private: why };
  }
  if (!ip) {
    const why = missing("ip (iproute2) or nsenter (util-linux) is not installed");
    return { none: why, private: why };
  }
  const name = `flprobe${process.pid}`;
  try {
    await run(ip, ["netns", "add", name]);
    await run(ip, ["-n", name, "link", "set", "lo", "up"]);
  } catch (err) {
    const why = missing(`ip netns add failed: ${failure(err)}`);
    return { none: why, private: why };
  } finally {
    await run(ip, ["netns", "del", name]).catch(() => {});
  }
  const none = present("a network namespace per job, loopback only");
  if (!iptables) return { none, private: missing("iptables is not installed (NAT needs it)") };
  try {
    await run(iptables, ["-w", "-t", "nat", "-S", "POSTROUTING"]);
  } catch (err) {
    return { none, private: missing(`iptables cannot read the nat table: ${failure(err)}`) };
  }
  const forward = await readFile("/proc/sys/net/ipv4/ip_forward", "utf8").catch(() => "");
  if (forward.trim() !== "1")
    return {
      none,
      private: missing("IPv4 forwarding is off (sysctl -w net.ipv4.ip_forward=1 turns it on)"),
    };
  const resolv = await readFile("/etc/resolv.conf", "utf8").catch(() => "");
  const loopbackDns = /^nameserver\s+(127\.|::1)/m.test(resolv);
  return {
    none,
    private: present(
      `a veth pair per job in ${privateSubnet.prefix}.0.0/${privateSubnet.bits} with NAT; ` +
        `host addresses refused` +
        (loopbackDns
          ? "; /etc/resolv.conf names a loopback nameserver, which jobs cannot reach"
          : ""),
    ),
  };
}

/** Tries every feature on this host (a few short commands; as root only). */
export async function probeIsolation(): Promise<IsolationReport> {
  const root = process.getuid?.() === 0;
  const [unshare, nsenter, perl, ip, iptables] = await Promise.all(
    ["unshare", "nsenter", "perl", "ip", "iptables"].map(which),
  );
  const [pidNamespace, cgroup, network] = await Promise.all([
    probePidNamespace(root, unshare, perl),
    probeCgroup(root),
    probeNetwork(root, nsenter && ip, iptables),
  ]);
  return {
    jobUsers: root ? present("a uid of its own per job") : missing("the runner is not root"),
    pidNamespace,
    cgroup: cgroup.feature,
    networkNone: network.none,
    networkPrivate: network.private,
    tools: { unshare, nsenter, perl, ip, iptables },
    cgroupParent: cgroup.parent,
  };
}

/** Why `network` cannot be had here, or undefined when it can. */
export function networkUnavailable(
  report: IsolationReport,
  network: JobNetwork,
): string | undefined {
  if (network === "host") return undefined;
  const feature = network === "none" ? report.networkNone : report.networkPrivate;
  return feature.available ? undefined : feature.detail;
}

/** The report as lines, one per feature, as `forelead runner --check` prints it. */
export function describeIsolation(report: IsolationReport): string[] {
  const line = (name: string, f: IsolationFeature) =>
    `${name.padEnd(24)} ${f.available ? "available" : "not available"}: ${f.detail}`;
  return [
    line("per-job uid", report.jobUsers),
    line("PID namespace + /proc", report.pidNamespace),
    line("cgroup (cgroup.kill)", report.cgroup),
    line("--job-network none", report.networkNone),
    line("--job-network private", report.networkPrivate),
  ];
}

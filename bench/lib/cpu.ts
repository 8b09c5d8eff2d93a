import { readFileSync, readdirSync } from "node:fs";

/**
 * CPU used during a measurement: by role, in percent of one core, and the whole machine's busy
 * share.
 */
export interface CpuUse {
  readonly wallMs: number;
  /** Busy time of all cores over the wall time, in percent of the whole machine. */
  readonly machineBusyPct: number;
  /** Per role (server, client, postgres, ...): CPU time over wall time in percent of one core. */
  readonly rolesPctOfCore: Record<string, number>;
}

/** A running CPU measurement; `stop` returns what was used since it started. */
export interface CpuMeter {
  stop(): CpuUse | undefined;
}

// Linux reports CPU time in clock ticks; USER_HZ is 100 on every mainstream kernel.
const ticksPerSecond = 100;

/**
 * Measures CPU from /proc (Linux only; elsewhere `stop` returns undefined):
 * the given processes by role, plus, given its postmaster, the Postgres
 * server as the role "postgres" (the postmaster and all its children: other
 * databases on the same server are counted too). The embedded database runs
 * inside the server process and is counted there.
 */
export function startCpuMeter(
  roles: Record<string, readonly number[]>,
  postmasterPid?: number,
): CpuMeter {
  const linux = process.platform === "linux";
  const started = performance.now();
  const machine0 = linux ? machineTicks() : undefined;
  const before = linux ? snapshot(roles, postmasterPid) : undefined;
  return {
    stop() {
      if (!linux || !before || !machine0) return undefined;
      const wallMs = performance.now() - started;
      const machine1 = machineTicks();
      const after = snapshot(roles, postmasterPid);
      const rolesPctOfCore: Record<string, number> = {};
      for (const [role, pids] of after) {
        let ticks = 0;
        for (const [pid, t] of pids) ticks += t - (before.get(role)?.get(pid) ?? 0);
        rolesPctOfCore[role] = Math.round((ticks / ticksPerSecond / (wallMs / 1000)) * 100);
      }
      const busy = machine1.busy - machine0.busy;
      const total = machine1.total - machine0.total;
      return {
        wallMs: Math.round(wallMs),
        machineBusyPct: total > 0 ? Math.round((busy / total) * 100) : 0,
        rolesPctOfCore,
      };
    },
  };
}

function snapshot(
  roles: Record<string, readonly number[]>,
  postmasterPid: number | undefined,
): Map<string, Map<number, number>> {
  const out = new Map<string, Map<number, number>>();
  for (const [role, pids] of Object.entries(roles))
    out.set(role, new Map(pids.map((pid) => [pid, processTicks(pid)])));
  if (postmasterPid !== undefined)
    out.set(
      "postgres",
      new Map(postgresPids(postmasterPid).map((pid) => [pid, processTicks(pid)])),
    );
  return out;
}

/** utime + stime of a process (and its threads), 0 when it is gone. */
function processTicks(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name, which is in parentheses and may hold spaces.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return 0;
  }
}

function postgresPids(postmasterPid: number): number[] {
  const pids: number[] = [postmasterPid];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, "utf8").trim() !== "postgres") continue;
      if (parentPid(Number(entry)) === postmasterPid) pids.push(Number(entry));
    } catch {
      // The process ended while we looked.
    }
  }
  return pids;
}

/** The parent of a process (Linux), or undefined. */
export function parentPid(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
  } catch {
    return undefined;
  }
}

function machineTicks(): { busy: number; total: number } {
  const line = readFileSync("/proc/stat", "utf8").split("\n")[0]!;
  const [, ...values] = line.trim().split(/\s+/);
  const n = values.map(Number);
  const idle = (n[3] ?? 0) + (n[4] ?? 0);
  const total = n.slice(0, 8).reduce((a, b) => a + b, 0);
  return { busy: total - idle, total };
}

/** Resident set size of a process in bytes (Linux), or undefined. */
export function residentBytes(pid: number): number | undefined {
  try {
    const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

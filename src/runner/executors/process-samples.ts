import { execFileSync } from "node:child_process";
import { readdir, readFile } from "node:fs/promises";
import type { ResourceSampler, ResourceUsage } from "./executor.js";

/**
 * A `getconf` figure, read once; `fallback` where getconf is missing (off Linux the sampler reads
 * nothing anyway).
 */
function getconf(name: string, fallback: number): number {
  try {
    const value = Number(execFileSync("getconf", [name], { encoding: "utf8" }).trim());
    return Number.isInteger(value) && value > 0 ? value : fallback;
  } catch {
    return fallback;
  }
}

let units: { clockTicks: number; pageBytes: number } | undefined;
/**
 * Clock ticks per second (CLK_TCK, 100 on Linux) and the page size, asked of getconf on first use.
 */
function procUnits(): { clockTicks: number; pageBytes: number } {
  return (units ??= { clockTicks: getconf("CLK_TCK", 100), pageBytes: getconf("PAGESIZE", 4096) });
}

/**
 * CPU ticks and resident pages of every process in process group `pgid`, from /proc/<pid>/stat;
 * `processes` counts the live ones.
 */
async function groupTotals(
  pgid: number,
): Promise<{ ticks: number; residentPages: number; processes: number }> {
  const totals = { ticks: 0, residentPages: 0, processes: 0 };
  const pids = (await readdir("/proc").catch(() => [] as string[])).filter((name) =>
    /^\d+$/.test(name),
  );
  await Promise.all(
    pids.map(async (pid) => {
      const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => undefined);
      if (!stat) return; // gone meanwhile
      // Fields after "(comm) ", which may itself hold spaces: [0] is field 3 (state), so field n is
      // [n - 3].
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(f[2]) !== pgid) return; // field 5: the process group
      // utime, stime, and cutime, cstime (reaped children): a child's ticks move into its parent's
      // c-fields when it is reaped, so the group's total stays whole as its processes come and go.
      totals.ticks += Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
      const residentPages = Number(f[21]); // field 24: rss in pages
      totals.residentPages += residentPages;
      // A process that has exited (a zombie, state Z, or one whose memory is already released on
      // its way out) has no resident set: a group of such processes only is gone, not a job using
      // no memory.
      if (f[0] !== "Z" && residentPages > 0) totals.processes++;
    }),
  );
  return totals;
}

/**
 * Samples a process job: every process whose process group is the job's
 * (the executor starts each job as the leader of a group of its own). CPU is
 * the change of the group's utime+stime+cutime+cstime over the interval;
 * memory the sum of the processes' resident sets. A process of the group
 * reparented outside it takes its ticks along: that interval reads low,
 * never negative.
 */
export function processGroupSampler(pgid: number | undefined): ResourceSampler {
  let last = { ticks: 0, atMs: performance.now() };
  return {
    async sample(): Promise<ResourceUsage | undefined> {
      if (pgid === undefined) return undefined;
      const { clockTicks, pageBytes } = procUnits();
      const now = await groupTotals(pgid);
      if (now.processes === 0) return undefined;
      const atMs = performance.now();
      const seconds = (atMs - last.atMs) / 1000;
      const cpuCores = seconds > 0 ? Math.max(0, now.ticks - last.ticks) / clockTicks / seconds : 0;
      last = { ticks: now.ticks, atMs };
      return { cpuCores, memoryBytes: now.residentPages * pageBytes };
    },
  };
}

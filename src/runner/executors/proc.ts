// What the process executor reads of /proc about the processes a job starts. Linux only: elsewhere
// every reader answers "unknown", and the executor has the process group alone.
import { readdirSync, readFileSync } from "node:fs";

/** The pids of the live (not zombie) processes whose real uid is `uid`; none off Linux. */
export function processesOf(uid: number): number[] {
  let names: string[];
  try {
    names = readdirSync("/proc");
  } catch {
    return [];
  }
  return names.filter((n) => /^\d+$/.test(n) && processUid(Number(n)) === uid).map(Number);
}

/**
 * The real uid of a live process (/proc/<pid>/status), or undefined off Linux, for a zombie or once
 * it is gone.
 */
export function processUid(pid: number): number | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    if (/^State:\s+Z/m.test(status)) return undefined; // dead, waiting to be reaped: holds nothing
    const line = status.match(/^Uid:\s+(\d+)/m);
    return line ? Number(line[1]) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * SIGKILLs every live process whose real uid is `uid` (a job's own), scanning /proc again until
 * none is left, so one forked meanwhile goes too; nothing off Linux.
 */
export function killUid(uid: number): void {
  for (let round = 0; round < 50; round++) {
    const pids = processesOf(uid);
    for (const pid of pids) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // gone meanwhile
      }
    }
    if (pids.length === 0) return;
  }
}

/**
 * The start time of a process in clock ticks since boot (/proc/<pid>/stat field 22), or undefined
 * off Linux or once it is gone.
 */
export function processStartTicks(pid: number): string | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
}

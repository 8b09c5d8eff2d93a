import { existsSync } from "node:fs";
import { join } from "node:path";
import { jobEventsEnv } from "../../protocol/job-events.js";

/**
 * The parts of a job's directory that both executors give the job
 * (docs/job-contract.md). Paths are relative to the job's directory, where
 * a process job starts; a container sees each at the same path under /
 * (where it starts), so `input/execution.json` works under both.
 */
export const jobDirParts = {
  /**
   * The runner's files for the job (execution.json; pipelines' files/, suspend's checkpoint/):
   * read-only to the job.
   */
  input: "input",
  /** The directory of the job's events file; writable by the job. */
  events: "events",
  /** The events file FORELEAD_EVENTS names. */
  eventsFile: join("events", "events.jsonl"),
} as const;

/**
 * The env a job gets for the parts of `jobDir` the runner made (lifecycle/
 * job-contract.ts makes them; an executor started without it gets none):
 * FORELEAD_EVENTS, the events file as the job sees it, under `root`: "/" in
 * a container; "" for a process, which gets it relative to its directory (where
 * it starts), since the runner's work directory above it may be closed to the
 * job's own user.
 */
export function jobDirEnv(jobDir: string, root: string): Record<string, string> {
  return existsSync(join(jobDir, jobDirParts.eventsFile))
    ? { [jobEventsEnv]: join(root, jobDirParts.eventsFile) }
    : {};
}

/** The container binds of the parts of `jobDir` that exist: /input read-only, /events writable. */
export function jobDirBinds(jobDir: string): string[] {
  const binds: string[] = [];
  if (existsSync(join(jobDir, jobDirParts.input)))
    binds.push(`${join(jobDir, jobDirParts.input)}:/input:ro`);
  if (existsSync(join(jobDir, jobDirParts.events)))
    binds.push(`${join(jobDir, jobDirParts.events)}:/events`);
  return binds;
}

import { RunnerApiError, type RunnerClient } from "../transport/client.js";
import type { JobRun } from "./job-run.js";
import { sleep } from "./settle.js";

/** The runner's watch, kept open while it holds leases. */
export interface NoticeWatch {
  /** A lease was taken: the watch opens if it was waiting for one. */
  leaseTaken(): void;
  /** Ends the watch (the agent has stopped); an open request is given up. */
  stop(): void;
}

/** What the watch needs from the agent. */
export interface NoticeWatchOptions {
  readonly client: RunnerClient;
  /** The leases being run now, by job id. */
  readonly runs: ReadonlyMap<string, JobRun>;
  readonly log: (message: string) => void;
  /** Each watch request's long poll; 20 s (the most the control plane holds one) by default. */
  readonly waitSeconds?: number;
}

/**
 * Keeps one `POST /v1/runner/watch` open while the runner holds leases, and
 * hands each cancel notice to its run, which stops the job exactly as a
 * renewal that says cancelRequested does (lease-keeper.ts). Cancels the
 * runner already has are named in the request, so a job that is still
 * stopping does not bring the same answer back at once. A control plane
 * without the route (404 "no route") is not asked again: the renewals carry
 * cancels there. Other failures are retried with a backoff; the renewals
 * carry cancels meanwhile, so the watch only ever makes a cancel earlier.
 */
export function startNoticeWatch(options: NoticeWatchOptions): NoticeWatch {
  const { client, runs, log } = options;
  const stopping = new AbortController();
  let leaseTaken = () => {};

  const loop = async () => {
    let failures = 0;
    while (!stopping.signal.aborted) {
      if (runs.size === 0) {
        await new Promise<void>((resolve) => (leaseTaken = resolve));
        continue;
      }
      try {
        const known = [...runs.values()].filter((r) => r.cancelSeen).map((r) => r.jobId);
        const notices = await client.watch(options.waitSeconds ?? 20, known, stopping.signal);
        failures = 0;
        // A kind this runner does not know (a later addition) is left alone.
        for (const notice of notices)
          if (notice.kind === "cancel") runs.get(notice.jobId)?.cancelRequested();
      } catch (err) {
        if (stopping.signal.aborted) return;
        if (err instanceof RunnerApiError && err.noRoute) {
          log("the control plane has no watch route; cancels reach this runner with renewals");
          return;
        }
        failures++;
        const waitMs = Math.min(10_000, 250 * 2 ** Math.min(failures, 6));
        if (failures === 1)
          log(`watch failed (${(err as Error).message}); retrying, renewals still carry cancels`);
        await sleep(waitMs, stopping.signal);
      }
    }
  };
  void loop();

  return {
    leaseTaken: () => leaseTaken(),
    stop() {
      stopping.abort();
      leaseTaken();
    },
  };
}

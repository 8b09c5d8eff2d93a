import type { RunningJob } from "../executors/executor.js";
import type { JobOutput } from "../output/output.js";

/**
 * Why a job is stopped before it ends by itself: its timeout, a cancel the renewal reported, or the
 * agent's shutdown (release).
 */
export type StopReason = "timeout" | "cancel" | "release";

/**
 * Where one lease's run is. Each phase holds only what it may use: the job's
 * output from "starting" on, the running job only in "running". "lost" holds
 * neither: entering it kills the job and drops its unsent output, and no
 * phase follows it, so a run whose lease is lost can neither keep its job
 * running nor complete it.
 */
type RunState =
  /** Checking the spec and putting the code in place; nothing runs yet. */
  | { readonly phase: "checkout"; readonly stopping?: StopReason }
  /** The output is open and the executor is starting the job. */
  | { readonly phase: "starting"; readonly output: JobOutput; readonly stopping?: StopReason }
  | {
      readonly phase: "running";
      readonly output: JobOutput;
      readonly job: RunningJob;
      readonly stopping?: StopReason;
    }
  /**
   * The job has ended; its output is flushed and the completion sent. Renewals only bridge this.
   */
  | { readonly phase: "settling"; readonly output: JobOutput | undefined }
  /** Shutdown: the job was stopped and the lease goes back to the queue. */
  | { readonly phase: "releasing"; readonly output: JobOutput | undefined }
  | { readonly phase: "lost"; readonly why: string };

/** One lease's run state and its only transitions. */
export interface LeaseRun {
  readonly state: RunState;
  /** Aborted when the lease is lost: uploads under it stop. */
  readonly lostSignal: AbortSignal;
  /**
   * checkout → starting: opens the job's output and returns it; undefined (nothing may start) when
   * the run is stopping or lost.
   */
  starting(open: () => JobOutput): JobOutput | undefined;
  /**
   * starting → running. A run stopped meanwhile stops the job now; a lost one kills it and stays
   * lost.
   */
  running(job: RunningJob, graceMs: number): void;
  /**
   * Stops the job before it ends by itself; false when it is stopping already, has ended or is
   * lost.
   */
  stop(reason: StopReason, graceMs: number): boolean;
  /**
   * The lease is gone: kills the job and drops its output (after the job ended, only forbids
   * completing). Returns the phase it was in.
   */
  lose(why: string): RunState["phase"];
  /**
   * The job has ended: → settling, or → releasing when it was stopped for a release. Undefined when
   * the lease is lost.
   */
  ended(): Extract<RunState, { phase: "settling" | "releasing" }> | undefined;
}

/** A run in the "checkout" phase. */
export function createLeaseRun(): LeaseRun {
  let state: RunState = { phase: "checkout" };
  const lost = new AbortController();
  return {
    get state() {
      return state;
    },
    lostSignal: lost.signal,
    starting(open) {
      if (state.phase !== "checkout" || state.stopping) return undefined;
      const output = open();
      state = { phase: "starting", output };
      return output;
    },
    running(job, graceMs) {
      if (state.phase === "lost") {
        void job.stop(0);
        return;
      }
      if (state.phase !== "starting") throw new Error(`a job cannot start in phase ${state.phase}`);
      state = { ...state, phase: "running", job };
      if (state.stopping) void job.stop(graceMs); // stopped while it was starting
    },
    stop(reason, graceMs) {
      if (
        (state.phase !== "checkout" && state.phase !== "starting" && state.phase !== "running") ||
        state.stopping
      )
        return false;
      state = { ...state, stopping: reason };
      if (state.phase === "running") void state.job.stop(graceMs);
      return true;
    },
    lose(why) {
      const was = state;
      state = { phase: "lost", why };
      lost.abort();
      if (was.phase === "starting" || was.phase === "running") was.output.abandon();
      if (was.phase === "running") void was.job.stop(0);
      return was.phase;
    },
    ended() {
      if (state.phase === "lost") return undefined;
      const output = "output" in state ? state.output : undefined;
      const next =
        "stopping" in state && state.stopping === "release"
          ? ({ phase: "releasing", output } as const)
          : ({ phase: "settling", output } as const);
      state = next;
      return next;
    },
  };
}

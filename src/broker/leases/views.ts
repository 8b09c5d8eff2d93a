import type { JobSnapshot } from "../jobs/snapshot.js";
import type { LeaseSecrets } from "../jobs/secrets.js";
import type { LeaseHolder } from "./check.js";
import type { LeaseInput } from "../jobs/inputs.js";

// The lease operations are one SQL module each, in sql/: claim, renew,
// release, complete, expire. The rules they share (a live lease, ending one,
// waking claims) are in lease-sql.ts.

/**
 * One input of a pipeline step's job: an artifact of a step it needs (proto
 * forelead.runner.v1.JobInput; pipelines/inputs.ts).
 */
export interface JobInputView {
  readonly name: string;
  readonly digest: string;
  readonly size: number;
  readonly fromStep: string;
  readonly fromJobId: string;
}

/**
 * A lease as the runner sees it: the token, and the job's secrets, only in the claim that issued
 * it.
 */
export interface LeaseView {
  readonly token?: string;
  readonly secrets?: LeaseSecrets;
  readonly expiresAt: Date;
  readonly cancelRequested: boolean;
  readonly job: JobSnapshot;
  /** The runner was ordered to drain (the renew reply only). */
  readonly drain?: boolean;
  /** Which attempt this lease runs (the claim reply only). */
  readonly attempt?: number;
  /**
   * A resumed job's answered input request and checkpoint (docs/suspend.md), only in the claim that
   * issued the lease.
   */
  readonly input?: LeaseInput;
  /**
   * Whether the job is a pipeline step's, only in the claim that issued the lease: only then can it
   * have inputs.
   */
  readonly pipelineStep?: boolean;
  /** A pipeline step's inputs (pipelines/inputs.ts), only in the claim that issued the lease. */
  readonly inputs?: readonly JobInputView[];
}

/** The identity of a lease-scoped call. */
export interface LeaseCall extends LeaseHolder {
  readonly jobId: string;
  readonly leaseToken: string;
}

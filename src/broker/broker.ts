import { Code, ConnectError } from "@connectrpc/connect";
import type { Store } from "../store/database.js";
import { logUnlessUnreachable } from "../store/unreachable.js";
import { batchLimits, createTurns, enqueueJobs, type StoredBatch } from "./job-batch.js";
import {
  cancelJob,
  defaultJobTimeouts,
  enqueueProbed,
  getJob,
  hasQueuedJobs,
  type EnqueueInput,
  type JobProbe,
  type JobTimeouts,
} from "./jobs.js";
import { listJobs, type ListJobsInput } from "./job-list.js";
import { jobStats, type StatsQuery, type WorkspaceStats } from "./stats.js";
import { runnableNow, withWaiting } from "./waiting.js";
import { withInput } from "./job-inputs.js";
import type { JobSnapshot } from "./job-snapshot.js";
import type { LeaseHolder } from "./lease-check.js";
import { createBatcher, type BatcherOptions } from "./batcher.js";
import {
  claimBatch,
  completeAndClaimBatch,
  completeBatch,
  type SettledAndClaimed,
} from "./lease-batches.js";
import type { CompletionInput } from "./completion.js";
import type { JobInputView, LeaseCall, LeaseView } from "./leases.js";
import type { BrokerObserver } from "./observer.js";
import { pinClaimedJob, type CodeHooks } from "./pinning.js";
import { register, type Registered, type Registration } from "./registrations.js";
import { listRunners, type RunnerView } from "./runners.js";
import { anyLeaseExpired, expireInputRequests, expireLeases } from "./sql/expire.js";
import { releaseLease } from "./sql/release.js";
import { renewLease } from "./sql/renew.js";
import { createWakeups, type Wake, type Wakeups } from "./wakeups.js";
import { handoffFor } from "./handoff.js";
import type { SecretBox } from "../secrets/box.js";
import { pipelineSettleHook, strandedStepJobs } from "./pipelines/sequence.js";
import { inTransaction } from "../store/transaction.js";
import { createPipelines, type Pipelines } from "./pipelines/pipelines.js";
import { retryJob } from "./retry.js";
import { leaseInput, withInputs } from "./pipelines/inputs.js";
import { maxLeasesPerClaim } from "../protocol/claims.js";

/** Longest a claim may wait for a job, in seconds. */
export const maxClaimWaitSeconds = 20;

/**
 * The longest a claim is held before it answers "no job": two thirds of the
 * lease length (at most maxClaimWaitSeconds), so a runner that keeps polling
 * is heard from (runners.last_seen_at) well within the lease length, the
 * window in which it counts as live (status, and the refusal of a second
 * process of it at register).
 */
export function pollBoundSeconds(leaseSeconds: number): number {
  return Math.min(maxClaimWaitSeconds, Math.max(1, Math.floor((leaseSeconds * 2) / 3)));
}

/** Refuses a claim's waitSeconds or maxLeases out of range (invalid_argument), before anything is claimed or settled. */
export function checkClaimRequest(waitSeconds: number, maxLeases = 1): void {
  if (!Number.isInteger(waitSeconds) || waitSeconds < 0 || waitSeconds > maxClaimWaitSeconds) {
    throw new ConnectError(
      `waitSeconds must be 0 to ${maxClaimWaitSeconds}; got ${waitSeconds}`,
      Code.InvalidArgument,
    );
  }
  if (!Number.isInteger(maxLeases) || maxLeases < 1 || maxLeases > maxLeasesPerClaim) {
    throw new ConnectError(
      `maxLeases must be 1 to ${maxLeasesPerClaim} (0 or unset means 1); got ${maxLeases}`,
      Code.InvalidArgument,
    );
  }
}

/** The job queue and its leases: every operation runs against the shared database. */
export interface Broker {
  /** Stores a job; a queued job's reply says why it waits when that is already known (waiting.ts). */
  enqueue(input: EnqueueInput): Promise<JobSnapshot>;
  /** Stores a batch of jobs, all or nothing, in one transaction (job-batch.ts); the replies carry no `waiting`. */
  enqueueBatch(inputs: readonly EnqueueInput[]): Promise<StoredBatch>;
  /** One job; a queued one carries why it waits (waiting.ts). */
  get(jobId: string): Promise<JobSnapshot>;
  list(input: ListJobsInput): Promise<{ jobs: JobSnapshot[]; nextPageToken: string }>;
  cancel(jobId: string, by: string): Promise<JobSnapshot>;
  /**
   * Claims up to `maxLeases` jobs (1 by default; checkClaimRequest), waiting up to `waitSeconds`
   * for the first to arrive: answers as soon as any is leased, in pick order, or none.
   */
  claim(
    holder: LeaseHolder,
    waitSeconds: number,
    signal?: AbortSignal,
    maxLeases?: number,
  ): Promise<LeaseView[]>;
  renew(call: LeaseCall): Promise<LeaseView>;
  release(call: LeaseCall): Promise<void>;
  complete(input: CompletionInput): Promise<JobSnapshot>;
  /**
   * Completes and claims the runner's next lease (CompleteRequest.next): in the completion's batch,
   * right after its commit, when it can (completeAndClaimBatch), else by `claim` after it, which also makes the
   * long poll when no job was free. A refused completion claims nothing; a claim that fails after
   * the completion was taken answers no lease (the runner's next claim meets the failure itself).
   */
  completeAndClaim(
    input: CompletionInput,
    waitSeconds: number,
    signal?: AbortSignal,
  ): Promise<{ job: JobSnapshot; lease?: LeaseView }>;
  runners(workspaceId: string): Promise<RunnerView[]>;
  /** Stores or updates a runner's registration; a retired runner's is refused, not revived, and so is a second live process of one runner. */
  register(registration: Registration): Promise<Registered>;
  /** Statistics of the jobs settled in a window, per workspace (stats.ts). */
  stats(query: StatsQuery): Promise<WorkspaceStats[]>;
  /** Pipelines: step graphs whose steps this broker enqueues as their needs settle (pipelines/). */
  readonly pipelines: Pipelines;
  /** Enqueues a new job with a settled job's spec, linked both ways (retry.ts). */
  retry(jobId: string, by: string): Promise<JobSnapshot>;
  /** The input `name` of `fromJobId` that a live lease of `jobId` may read (pipelines/inputs.ts). */
  input(
    holder: LeaseHolder,
    jobId: string,
    leaseToken: string,
    fromJobId: string,
    name: string,
  ): Promise<JobInputView>;
  /** Runs one expiry sweep now (the broker also sweeps on a timer). */
  sweep(): Promise<number>;
  close(): Promise<void>;
}

/** Options of the broker. */
export interface BrokerOptions {
  readonly store: Store;
  readonly leaseSeconds: number;
  /** How often expired leases and overdue jobs are swept; 1 s by default. */
  readonly sweepIntervalMs?: number;
  /** Default and maximum job timeouts and the grace before the sweep fails an overdue job; defaultJobTimeouts unless given. */
  readonly jobTimeouts?: JobTimeouts;
  /** The code host: checks repositories at enqueue, pins base commits at claim. Without it, jobs with a repository are refused. */
  readonly code?: CodeHooks;
  /** How claims and completions arriving together are batched; see defaultBatching. */
  readonly batching?: BatcherOptions;
  /** Told of every lease granted, renewed, settled or swept (metrics); nothing by default. */
  readonly observer?: BrokerObserver;
  /** Seals job secrets at enqueue and opens them at claim; without it, an enqueue with secrets is refused. */
  readonly secrets?: SecretBox;
  /** An enqueue leases its job to a claim waiting on this replica in its own statement (handoff.ts); true unless false. */
  readonly handoff?: boolean;
}

/**
 * Up to 4 batches of claims (and 4 of completions) at once, each serving up
 * to 64 requests: measured in docs/performance.md; fewer batches in flight
 * make bigger batches but leave Postgres idle between them.
 */
export const defaultBatching: BatcherOptions = { maxBatch: 64, maxInFlight: 4 };

/**
 * The leases of claims made together: every one that was taken, in order. A failed claim (its
 * error) fails the call only when none was taken, so a lease taken is never dropped unanswered.
 */
async function claimedLeases(
  claims: ReadonlyArray<Promise<LeaseView | undefined>>,
): Promise<LeaseView[]> {
  const settledClaims = await Promise.allSettled(claims);
  const leases = settledClaims.flatMap((r) =>
    r.status === "fulfilled" && r.value ? [r.value] : [],
  );
  const failed = settledClaims.find((r) => r.status === "rejected");
  if (failed && !leases.length) throw failed.reason;
  return leases;
}

/** Starts a broker: subscribes to wakeups and sweeps expired leases and overdue jobs on a timer. */
export async function createBroker(options: BrokerOptions): Promise<Broker> {
  const { db } = options.store;
  const wakeups: Wakeups<LeaseHolder, LeaseView> = await createWakeups<LeaseHolder, LeaseView>(
    options.store,
  );
  const batching = options.batching ?? defaultBatching;
  const batchedClaim = createBatcher(
    (holders: readonly LeaseHolder[]) =>
      claimBatch(db, holders, options.leaseSeconds, options.secrets),
    batching,
  );
  const { observer } = options;
  const timeouts = options.jobTimeouts ?? defaultJobTimeouts;
  const batchTurns = createTurns(batchLimits.concurrentBatches);
  // Every statement that settles a job moves its pipeline in the same transaction.
  const stepEnqueue = { timeouts, code: options.code, box: options.secrets };
  const settled = pipelineSettleHook(stepEnqueue);
  const batchedComplete = createBatcher(
    (inputs: readonly CompletionInput[]) => completeBatch(db, inputs, observer, settled),
    batching,
  );
  const batchedCompleteAndClaim = createBatcher(
    (inputs: readonly CompletionInput[]) =>
      completeAndClaimBatch(db, inputs, options.leaseSeconds, options.secrets, observer, settled),
    batching,
  );
  /** Leases past their expiry (and jobs past their deadline) ended, their jobs requeued or failed. */
  const sweepLeases = async () => {
    const ended = await expireLeases(db, timeouts, undefined, settled);
    observer?.swept(ended);
    return ended;
  };
  const sweep = async () => {
    const ended = await sweepLeases();
    // Unanswered input requests past their expiry (docs/suspend.md): no lease ends, so not `swept`.
    const expiredInputs = await expireInputRequests(db);
    // Steps whose job settled on a path without the hook (an input request's expiry just above, a
    // runner's retirement): moved here, within a sweep interval.
    const stranded = await strandedStepJobs(db);
    if (stranded.length) await inTransaction(db, (tx) => settled(tx, stranded));
    return ended.length + expiredInputs.length;
  };
  let closed = false;
  let sweeping: Promise<unknown> = Promise.resolve();
  const timer = setInterval(() => {
    sweeping = sweep().catch((err) => logUnlessUnreachable("broker: expiry sweep failed", err));
  }, options.sweepIntervalMs ?? 1000);
  timer.unref();

  /**
   * One lease as its request answers it: its base commit pinned (pinning.ts) and a step's inputs read; undefined
   * when its job could not be pinned (then it was settled). A completion's next lease and a handed-off one.
   */
  const answerable = async (
    holder: LeaseHolder,
    lease: LeaseView,
  ): Promise<LeaseView | undefined> => {
    const pinned = await pinClaimedJob(db, holder, lease, options.code, settled);
    return pinned && withInputs(db, pinned);
  };

  const claim: Broker["claim"] = async (holder, waitSeconds, signal, maxLeases = 1) => {
    checkClaimRequest(waitSeconds, maxLeases);
    const startedAt = performance.now();
    const end = (leases: LeaseView[]) => {
      observer?.claimEnded(leases.length > 0, performance.now() - startedAt);
      return leases;
    };
    const deadline =
      Date.now() + Math.min(waitSeconds, pollBoundSeconds(options.leaseSeconds)) * 1000;
    let swept = false;
    let unused: Wake | undefined;
    for (;;) {
      const waiter = wakeups.arm(holder.workspaceId, holder); // armed before the try: no enqueue slips between
      try {
        // maxLeases requests of one holder go to the batcher in one turn, so one forelead_claim call
        // serves them (one commit) and the function's per-request slot count bounds them together.
        const claimed = await claimedLeases(
          Array.from({ length: maxLeases }, () => batchedClaim(holder)),
        );
        const leases = await claimedLeases(
          claimed.map((c) => pinClaimedJob(db, holder, c, options.code, settled)),
        );
        if (leases.length)
          return end(await Promise.all(leases.map((lease) => withInputs(db, lease))));
        if (claimed.length) continue; // those jobs could not be pinned and were settled: look for others
        // Woken for a job this runner cannot take (labels, slots): pass the wake on while queued
        // jobs remain, so another runner gets its chance; when the job is already gone, stop.
        if (unused && (await hasQueuedJobs(db, holder.workspaceId))) waiter.relay(unused);
        unused = undefined;
        // Once per request: an expired lease may be holding a job the timer has not swept yet. Only the
        // leases, and only when one has expired: the timer's other work (overdue jobs, expired input
        // requests, stranded steps) frees no queued job and can wait for it.
        if (!swept) {
          swept = true;
          if ((await anyLeaseExpired(db)) && (await sweepLeases()).length > 0) continue;
        }
        if (Date.now() >= deadline || signal?.aborted) return end([]);
        observer?.claimWaiting(1);
        const woke = await waiter
          .wait(deadline - Date.now(), signal)
          .finally(() => observer?.claimWaiting(-1));
        if (woke && "lease" in woke) {
          // Handed a lease by an enqueue of this replica (handoff.ts). A request aborted while
          // the enqueue's statement ran cannot take it: given back, the job is queued again.
          if (signal?.aborted) {
            await releaseLease(
              db,
              { ...holder, jobId: woke.lease.job.id as string, leaseToken: woke.lease.token! },
              settled,
            ).catch((err: unknown) =>
              logUnlessUnreachable(
                "broker: a handed-off lease whose claim was gone could not be given back",
                err,
              ),
            );
            return end([]);
          }
          const lease = await answerable(holder, woke.lease);
          if (lease) return end([lease]);
          continue; // its job could not be pinned and was settled: look for others
        }
        unused = woke;
        // Closing wakes every waiter; none may claim from a database about to close. An aborted
        // request (its client closed the stream) must not claim again either: a lease made now
        // would have no one to take it, and its job would wait out the lease.
        if (closed || signal?.aborted) return end([]);
      } finally {
        waiter.cancel();
      }
    }
  };

  // One function for the broker's life: the enqueue's compiled statement is kept per probe (statementShapes).
  const runnableProbe: JobProbe = (ins) => runnableNow(ins, options.leaseSeconds);
  return {
    async enqueue(input) {
      const handoff =
        options.handoff === false
          ? undefined
          : handoffFor(db, wakeups, input, options.leaseSeconds, options.secrets);
      try {
        // Whether a runner can take the job now is a column of the enqueue's statement: the usual reply costs nothing more.
        const { job, probed, handed } = await enqueueProbed(
          db,
          input,
          timeouts,
          runnableProbe,
          options.code,
          options.secrets,
          handoff?.target,
        );
        await handoff?.deliver(handed);
        if (handed) observer?.handedOff();
        return handed?.id === job.id ? job : withWaiting(db, job, options.leaseSeconds, probed);
      } finally {
        handoff?.cancel();
      }
    },
    enqueueBatch: (inputs) =>
      enqueueJobs(db, inputs, timeouts, options.code, options.secrets, batchTurns),
    get: async (jobId) =>
      withInput(db, await withWaiting(db, await getJob(db, jobId), options.leaseSeconds)),
    list: (input) => listJobs(db, input),
    cancel: (jobId, by) => cancelJob(db, jobId, by, settled),
    pipelines: createPipelines(db, stepEnqueue, settled),
    retry: async (jobId, by) =>
      withWaiting(
        db,
        await retryJob(db, jobId, by, timeouts, options.code, options.secrets),
        options.leaseSeconds,
      ),
    claim,
    async renew(call) {
      const lease = await renewLease(db, call, options.leaseSeconds);
      observer?.renewed();
      return lease;
    },
    release: (call) => releaseLease(db, call, settled),
    input: (holder, jobId, token, fromJobId, name) =>
      leaseInput(db, holder, jobId, token, fromJobId, name),
    complete: (input) => batchedComplete(input),
    async completeAndClaim(input, waitSeconds, signal) {
      checkClaimRequest(waitSeconds);
      const startedAt = performance.now();
      const done: SettledAndClaimed = await batchedCompleteAndClaim(input);
      // Leased in the completion's batch: pinned and given its inputs as a claim's lease is.
      const lease = done.lease && (await answerable(input, done.lease));
      if (lease) {
        observer?.claimEnded(true, performance.now() - startedAt);
        return { job: done.job, lease };
      }
      // None yet (or its job could not be pinned): a claim as Claim makes it, long poll and all.
      const leases = await claim(input, waitSeconds, signal).catch((err: unknown) => {
        if (!(err instanceof ConnectError))
          logUnlessUnreachable(
            `broker: the claim after job ${input.jobId}'s completion failed`,
            err,
          );
        return [];
      });
      return leases[0] ? { job: done.job, lease: leases[0] } : { job: done.job };
    },
    runners: (workspaceId) => listRunners(db, workspaceId),
    register: (registration) => register(db, registration, options.leaseSeconds),
    stats: (query) => jobStats(db, query),
    sweep,
    async close() {
      closed = true;
      clearInterval(timer);
      await sweeping;
      await wakeups.close();
    },
  };
}

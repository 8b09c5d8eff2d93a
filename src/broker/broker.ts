import { ConnectError } from "@connectrpc/connect";
import type { Store } from "../store/database.js";
import { logUnlessUnreachable } from "../store/unreachable.js";
import { batchLimits, createTurns, enqueueJobs, type StoredBatch } from "./jobs/batch.js";
import { cancelJob } from "./jobs/cancel.js";
import { defaultJobTimeouts, type EnqueueInput, type JobTimeouts } from "./jobs/rules.js";
import { enqueueProbed, type JobProbe } from "./jobs/enqueue.js";
import { getJob } from "./jobs/snapshot.js";
import { listJobs, type ListJobsInput } from "./jobs/list.js";
import { jobStats, type StatsQuery, type WorkspaceStats } from "./stats.js";
import { runnableNow, withWaiting } from "./jobs/waiting.js";
import { leaseCheckpointFile, withInput, type CheckpointEntry } from "./jobs/inputs.js";
import { answerInput, type AnswerInput } from "./leases/answer.js";
import { suspendJob, type SuspendInput } from "./leases/suspend.js";
import type { JobSnapshot } from "./jobs/snapshot.js";
import type { LeaseHolder } from "./leases/check.js";
import { createBatcher, type BatcherOptions } from "./leases/batcher.js";
import {
  claimBatch,
  completeAndClaimBatch,
  completeBatch,
  type SettledAndClaimed,
} from "./leases/batches.js";
import type { CompletionInput } from "./leases/completion.js";
import type { JobInputView, LeaseCall, LeaseView } from "./leases/views.js";
import type { BrokerObserver } from "./observer.js";
import { type CodeHooks } from "./leases/pinning.js";
import { register, type Registered, type Registration } from "./fleet/registrations.js";
import { listRunners, type RunnerView } from "./fleet/runners.js";
import { forgetRunner, type ForgetInput } from "./fleet/forget.js";
import { drainOrdered, orderDrain, type DrainInput, type DrainState } from "./fleet/drain.js";
import { readDemand, readGroupDemand, type GroupDemand, type KindDemand } from "./fleet/demand.js";
import { putScalingGroup, type GroupHold, type GroupRegistration } from "./fleet/scaling-groups.js";
import { defaultRunnerOfflineSeconds } from "./fleet/state.js";
import { expireInputRequests, expireLeases } from "./leases/expire.js";
import { releaseLease } from "./leases/release.js";
import { renewLease } from "./leases/renew.js";
import { createWakeups, type Wakeups } from "./leases/wakeups.js";
import { createRunnerNotices, type RunnerNoticeView } from "./leases/notices.js";
import { handoffFor } from "./leases/handoff.js";
import { checkClaimRequest, createClaimLoop } from "./leases/claim-loop.js";
import type { SecretBox } from "../secrets/box.js";
import { pipelineSettleHook, strandedStepJobs } from "./pipelines/sequence.js";
import { inTransaction } from "../store/transaction.js";
import { createPipelines, type Pipelines } from "./pipelines/pipelines.js";
import { retryCheck, retryJob } from "./jobs/retry.js";
import {
  listFairnessKeys,
  setFairnessKey,
  type FairnessKeyInput,
  type FairnessKeyView,
} from "./jobs/fairness.js";
import {
  listRateLimits,
  setRateLimit,
  type RateLimitInput,
  type RateLimitView,
} from "./jobs/rate-limits.js";
import { leaseInput } from "./pipelines/inputs.js";
import { createSchedules, type Schedules } from "./schedules/schedules.js";
import { startScheduleTicker } from "./schedules/ticker.js";

/** The job queue and its leases: every operation runs against the shared database. */
export interface Broker {
  /**
   * Stores a job; a queued job's reply says why it waits when that is already known (waiting.ts).
   */
  enqueue(input: EnqueueInput): Promise<JobSnapshot>;
  /**
   * Stores a batch of jobs, all or nothing, in one transaction (job-batch.ts); the replies carry no
   * `waiting`.
   */
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
  /**
   * The runner's notices (a cancel of one of its leases) now, or the first within `waitSeconds`
   * (notices.ts).
   */
  watch(
    holder: LeaseHolder,
    waitSeconds: number,
    knownJobIds: readonly string[],
    signal?: AbortSignal,
  ): Promise<RunnerNoticeView[]>;
  release(call: LeaseCall): Promise<void>;
  complete(input: CompletionInput): Promise<JobSnapshot>;
  /**
   * Completes and claims the runner's next lease (CompleteRequest.next): in the completion's batch,
   * right after its commit, when it can (completeAndClaimBatch), else by `claim` after it, which
   * also makes the long poll when no job was free. A refused completion claims nothing; a claim
   * that fails after the completion was taken answers no lease (the runner's next claim meets the
   * failure itself).
   */
  completeAndClaim(
    input: CompletionInput,
    waitSeconds: number,
    signal?: AbortSignal,
  ): Promise<{ job: JobSnapshot; lease?: LeaseView }>;
  runners(workspaceId: string): Promise<RunnerView[]>;
  /**
   * Removes an offline runner's registration (its identity is not retired: it may register again);
   * refused for a runner in any other state.
   */
  forgetRunner(input: ForgetInput): Promise<{ workspaceId: string }>;
  /**
   * Stores or updates a runner's registration; a retired runner's is refused, not revived, and so
   * is a second live process of one runner.
   */
  register(registration: Registration): Promise<Registered>;
  /** Statistics of the jobs settled in a window, per workspace (stats.ts). */
  stats(query: StatsQuery): Promise<WorkspaceStats[]>;
  /** Orders a registered runner to drain (fleet/drain.ts). */
  drainRunner(input: DrainInput): Promise<DrainState>;
  /** Whether the runner was ordered to drain. */
  drainOrdered(runner: { workspaceId: string; runnerId: string }): Promise<boolean>;
  /** Demand per scaling group and per kind of queued job (fleet/demand.ts); "" for every workspace. */
  demand(workspaceId: string): Promise<{ groups: GroupDemand[]; kinds: KindDemand[] }>;
  /** One scaling group's demand; undefined when no group has the name. */
  groupDemand(name: string): Promise<GroupDemand | undefined>;
  /** Registers or renews a scaling group for its controller, under a lease (fleet/scaling-groups.ts). */
  putScalingGroup(registration: GroupRegistration): Promise<GroupHold>;
  /** Pipelines: step graphs whose steps this broker enqueues as their needs settle (pipelines/). */
  readonly pipelines: Pipelines;
  /**
   * Schedules: cron templates this broker fires exactly once per due time across replicas
   * (schedules/).
   */
  readonly schedules: Schedules;
  /** Sets a fairness key's weight in its workspace (jobs/fairness.ts). */
  setFairnessKey(input: FairnessKeyInput): Promise<FairnessKeyView>;
  /** A workspace's fairness keys (jobs/fairness.ts). */
  fairnessKeys(workspaceId: string): Promise<FairnessKeyView[]>;
  /** Sets a rate limit, creating it (jobs/rate-limits.ts). */
  setRateLimit(input: RateLimitInput): Promise<RateLimitView>;
  /** The rate limits (jobs/rate-limits.ts). */
  rateLimits(): Promise<RateLimitView[]>;
  /** Enqueues a new job with a settled job's spec, linked both ways (retry.ts). */
  retry(jobId: string, by: string): Promise<JobSnapshot>;
  /** Whether a job can be retried now (retry.ts's rules), and its enqueuer. */
  retryCheck(
    jobId: string,
  ): Promise<{ readonly enqueuedBy: string; readonly refusal: string | undefined }>;
  /**
   * The input `name` of `fromJobId` that a live lease of `jobId` may read (pipelines/inputs.ts).
   */
  input(
    holder: LeaseHolder,
    jobId: string,
    leaseToken: string,
    fromJobId: string,
    name: string,
  ): Promise<JobInputView>;
  /** Suspends a leased job until its input request is answered (docs/suspend.md). */
  suspend(input: SuspendInput): Promise<JobSnapshot>;
  /** Answers a suspended job's input request, queueing it again (docs/suspend.md). */
  answerInput(input: AnswerInput): Promise<JobSnapshot>;
  /** The checkpoint file `name` of a resumed job, as its live lease may read it. */
  checkpointFile(
    holder: LeaseHolder,
    jobId: string,
    leaseToken: string,
    name: string,
  ): Promise<CheckpointEntry>;
  /** Runs one expiry sweep now (the broker also sweeps on a timer). */
  sweep(): Promise<number>;
  /** Answers every open runner watch now, with no notices (a closing listener's requests end). */
  endWatches(): void;
  close(): Promise<void>;
}

/** Options of the broker. */
export interface BrokerOptions {
  readonly store: Store;
  readonly leaseSeconds: number;
  /** A runner silent this long is offline; defaultRunnerOfflineSeconds unless given. */
  readonly runnerOfflineSeconds?: number;
  /** How often expired leases and overdue jobs are swept; 1 s by default. */
  readonly sweepIntervalMs?: number;
  /**
   * Default and maximum job timeouts and the grace before the sweep fails an overdue job;
   * defaultJobTimeouts unless given.
   */
  readonly jobTimeouts?: JobTimeouts;
  /**
   * The code host: checks repositories at enqueue, pins base commits at claim. Without it, jobs
   * with a repository are refused.
   */
  readonly code?: CodeHooks;
  /** How claims and completions arriving together are batched; see defaultBatching. */
  readonly batching?: BatcherOptions;
  /** Told of every lease granted, renewed, settled or swept (metrics); nothing by default. */
  readonly observer?: BrokerObserver;
  /**
   * Seals job secrets at enqueue and opens them at claim; without it, an enqueue with secrets is
   * refused.
   */
  readonly secrets?: SecretBox;
  /**
   * An enqueue leases its job to a claim waiting on this replica in its own statement (handoff.ts);
   * true unless false.
   */
  readonly handoff?: boolean;
  /** How often due schedules are fired: each second by default; 0 fires none (tests). */
  readonly scheduleTickMs?: number;
}

/**
 * Up to 4 batches of claims (and 4 of completions) at once, each serving up
 * to 64 requests: measured in docs/performance.md; fewer batches in flight
 * make bigger batches but leave Postgres idle between them.
 */
const defaultBatching: BatcherOptions = { maxBatch: 64, maxInFlight: 4 };

/** Starts a broker: subscribes to wakeups and sweeps expired leases and overdue jobs on a timer. */
export async function createBroker(options: BrokerOptions): Promise<Broker> {
  const { db } = options.store;
  const wakeups: Wakeups<LeaseHolder, LeaseView> = await createWakeups<LeaseHolder, LeaseView>(
    options.store,
  );
  const notices = await createRunnerNotices(options.store);
  const batching = options.batching ?? defaultBatching;
  const batchedClaim = createBatcher(
    (holders: readonly LeaseHolder[]) =>
      claimBatch(db, holders, options.leaseSeconds, options.secrets),
    batching,
  );
  const { observer } = options;
  const offlineSeconds = options.runnerOfflineSeconds ?? defaultRunnerOfflineSeconds;
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
  /**
   * Leases past their expiry (and jobs past their deadline) ended, their jobs requeued or failed.
   */
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

  const schedules = createSchedules(db, stepEnqueue, settled);
  const ticker =
    options.scheduleTickMs === 0
      ? undefined
      : startScheduleTicker(() => schedules.tick(), options.scheduleTickMs ?? 1000);

  const { claim, answerable } = createClaimLoop({
    db,
    wakeups,
    leaseSeconds: options.leaseSeconds,
    code: options.code,
    settled,
    observer,
    batchedClaim,
    sweepLeases,
    isClosed: () => closed,
  });

  // One function for the broker's life: the enqueue's compiled statement is kept per probe
  // (statementShapes).
  const runnableProbe: JobProbe = (ins) => runnableNow(ins, offlineSeconds);
  return {
    async enqueue(input) {
      const handoff =
        options.handoff === false
          ? undefined
          : handoffFor(db, wakeups, input, options.leaseSeconds, options.secrets);
      try {
        // Whether a runner can take the job now is a column of the enqueue's statement: the usual
        // reply costs nothing more.
        const { job, probed, handed } = await enqueueProbed(
          db,
          input,
          timeouts,
          runnableProbe,
          options.code,
          options.secrets,
          handoff?.target,
          settled,
        );
        await handoff?.deliver(handed);
        if (handed) observer?.handedOff();
        return handed?.id === job.id ? job : withWaiting(db, job, offlineSeconds, probed);
      } finally {
        handoff?.cancel();
      }
    },
    enqueueBatch: (inputs) =>
      enqueueJobs(db, inputs, timeouts, options.code, options.secrets, batchTurns),
    get: async (jobId) =>
      withInput(db, await withWaiting(db, await getJob(db, jobId), offlineSeconds)),
    list: (input) => listJobs(db, input),
    cancel: (jobId, by) => cancelJob(db, jobId, by, settled),
    pipelines: createPipelines(db, stepEnqueue, settled),
    schedules,
    retry: async (jobId, by) =>
      withWaiting(
        db,
        await retryJob(db, jobId, by, timeouts, options.code, options.secrets),
        offlineSeconds,
      ),
    retryCheck: (jobId) => retryCheck(db, jobId),
    claim,
    async renew(call) {
      const lease = await renewLease(db, call, options.leaseSeconds);
      observer?.renewed();
      return lease;
    },
    watch: (holder, waitSeconds, knownJobIds, signal) =>
      notices.watch(holder, waitSeconds, knownJobIds, signal),
    release: (call) => releaseLease(db, call, settled),
    suspend: (input) => suspendJob(db, input),
    answerInput: (input) => answerInput(db, input),
    checkpointFile: (holder, jobId, token, name) =>
      leaseCheckpointFile(db, holder, jobId, token, name),
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
    runners: (workspaceId) => listRunners(db, workspaceId, offlineSeconds),
    forgetRunner: (input) => forgetRunner(db, input, offlineSeconds),
    register: (registration) => register(db, registration, options.leaseSeconds),
    stats: (query) => jobStats(db, query),
    setFairnessKey: (input) => setFairnessKey(db, input),
    fairnessKeys: (workspaceId) => listFairnessKeys(db, workspaceId),
    setRateLimit: (input) => setRateLimit(db, input),
    rateLimits: () => listRateLimits(db),
    drainRunner: (input) => orderDrain(db, input),
    drainOrdered: (runner) => drainOrdered(db, runner),
    demand: (workspaceId) => readDemand(db, offlineSeconds, workspaceId),
    groupDemand: (name) => readGroupDemand(db, offlineSeconds, name),
    putScalingGroup: (registration) => putScalingGroup(db, registration),
    sweep,
    endWatches: () => notices.end(),
    async close() {
      closed = true;
      clearInterval(timer);
      await ticker?.close();
      await sweeping;
      await wakeups.close();
      await notices.close();
    },
  };
}

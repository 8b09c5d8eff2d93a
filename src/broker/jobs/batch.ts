import { Code, ConnectError } from "@connectrpc/connect";
import type { Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import { jobSnapshot, type JobSnapshot } from "./snapshot.js";
import { prepareEnqueue, storeEnqueues, type PreparedEnqueue } from "./enqueue.js";
import { type EnqueueInput, type JobTimeouts } from "./rules.js";
import type { CodeHooks } from "../leases/pinning.js";
import type { SecretBox } from "../../secrets/box.js";

/**
 * How many jobs one batch enqueue takes, and how many batches hold a
 * database connection at once on this replica: a batch's transaction holds
 * one for its whole insert, and 32 batches of 1,000 in flight (the bench)
 * took the pool of 20 from claims and completions until waits for a
 * connection passed the pool's 5 s and were answered 503. The others wait
 * their turn in memory, in order.
 */
export const batchLimits = { maxJobs: 1000, concurrentBatches: 4 } as const;

/** A batch as stored: its jobs in the request's order, and how many of them it created. */
export interface StoredBatch {
  readonly jobs: readonly JobSnapshot[];
  readonly created: number;
}

/**
 * Enqueues a batch, all or nothing: every job passes the single enqueue's
 * rules (prepareEnqueue) and is stored by its statement (storeEnqueues), all
 * in one transaction with one wakeup per workspace. An idempotency key
 * already used returns its job, as a single enqueue does; a key repeated
 * within the batch (same workspace) is refused, since two jobs cannot both
 * be the one it names. When any job is refused, nothing is stored and the
 * error names every refused job by index.
 */
export async function enqueueJobs(
  db: Kysely<Database>,
  inputs: readonly EnqueueInput[],
  timeouts: JobTimeouts,
  code?: CodeHooks,
  box?: SecretBox,
  turn: Turns = (run) => run(),
): Promise<StoredBatch> {
  if (inputs.length === 0)
    throw new ConnectError(
      `jobs is empty; a batch holds 1 to ${batchLimits.maxJobs} jobs`,
      Code.InvalidArgument,
    );
  if (inputs.length > batchLimits.maxJobs)
    throw new ConnectError(
      `jobs has ${inputs.length} jobs; a batch holds at most ${batchLimits.maxJobs}: send the rest in another batch`,
      Code.ResourceExhausted,
    );
  const refusals: Array<[number, ConnectError]> = [];
  const settled = await Promise.allSettled(
    inputs.map((input) => prepareEnqueue(input, timeouts, code, box)),
  );
  const prepared: PreparedEnqueue[] = [];
  settled.forEach((s, i) => {
    if (s.status === "fulfilled") prepared.push(s.value);
    else if (s.reason instanceof ConnectError) refusals.push([i, s.reason]);
    // not a refusal of the job: an internal error, logged as the single enqueue's are
    else throw s.reason;
  });
  const firstOfKey = new Map<string, number>();
  inputs.forEach((input, i) => {
    if (!input.idempotencyKey) return;
    const key = `${input.workspaceId}\0${input.idempotencyKey}`;
    const first = firstOfKey.get(key);
    if (first === undefined) firstOfKey.set(key, i);
    else
      refusals.push([
        i,
        new ConnectError(
          `idempotencyKey ${JSON.stringify(input.idempotencyKey)} repeats ` +
            `jobs[${first}]'s in workspace "${input.workspaceId}"; give each job of ` +
            `a batch its own key`,
          Code.InvalidArgument,
        ),
      ]);
  });
  if (refusals.length > 0) throw batchRefused(inputs.length, refusals);
  return turn(() =>
    db.transaction().execute(async (tx) => {
      const stored = await storeEnqueues(tx, prepared, box);
      stored.forEach((s, i) => "refused" in s && refusals.push([i, s.refused]));
      if (refusals.length > 0) throw batchRefused(inputs.length, refusals);
      const jobs = stored
        .map((s) => ("job" in s ? jobSnapshot(s.job) : undefined))
        .filter((j) => j !== undefined);
      return { jobs, created: stored.filter((s) => "created" in s && s.created).length };
    }),
  );
}

/** Runs `run` when a turn is free. */
export type Turns = <T>(run: () => Promise<T>) => Promise<T>;

/** At most `n` runs at once; the others start in the order they asked, as turns free up. */
export function createTurns(n: number): Turns {
  let running = 0;
  const waiting: Array<() => void> = [];
  return async (run) => {
    if (running < n) running++;
    else await new Promise<void>((resolve) => waiting.push(resolve));
    try {
      return await run();
    } finally {
      // The turn passes straight to the next waiter, so `running` stays as it is.
      const next = waiting.shift();
      if (next) next();
      else running--;
    }
  };
}

/**
 * The refusal of a batch: every refused job as `jobs[i]: why`, in index
 * order; its code is theirs when they share one (409 for keys used with
 * another request), else invalid_argument.
 */
function batchRefused(total: number, refusals: Array<[number, ConnectError]>): ConnectError {
  const sorted = [...refusals].sort((a, b) => a[0] - b[0]);
  const codes = new Set(sorted.map(([, e]) => e.code));
  const code = codes.size === 1 ? sorted[0]![1].code : Code.InvalidArgument;
  const listed = sorted.map(([i, e]) => `jobs[${i}]: ${e.rawMessage}`).join("; ");
  return new ConnectError(
    `${sorted.length} of ${total} jobs refused, so nothing was stored: ${listed}`,
    code,
  );
}

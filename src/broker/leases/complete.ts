import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import { checkCompletion, type CheckedCompletion, type CompletionInput } from "./completion.js";
import { jobSnapshot, type JobRow, type JobSnapshot } from "../jobs/snapshot.js";
import { leaseRefusal } from "./check.js";
import { eventsCte } from "../../events/record.js";
import { clearLease, liveLease, retryClaimableAt, wakeWaiters, woken } from "./sql-fragments.js";
import { settledOrRequeued } from "./events.js";
import type { BrokerObserver } from "../observer.js";
import { isStepJob, settleWith, type SettleHook } from "../pipelines/settle-hook.js";
import { statementShapes } from "../../store/statement-shapes.js";

/**
 * Settles a job under its live lease. Idempotent: the same completionId with
 * the same body on the same lease returns the reply stored the first time,
 * even after the lease ended. A different completion after the lease ended is
 * refused (409). A failure marked retryable requeues the job while attempts
 * remain (unless a cancel was requested).
 *
 * The usual case (a live lease, first completion) is one statement
 * (settleLeases); anything else is told apart by completeJobInTransaction.
 */
export async function completeJob(
  db: Kysely<Database>,
  input: CompletionInput,
  observer?: BrokerObserver,
  hook?: SettleHook,
): Promise<JobSnapshot> {
  const checked = checkCompletion(input);
  const [reply] = await settleLeases(db, [{ input, checked }], observer, hook);
  return reply ?? completeJobInTransaction(db, input, checked, observer, hook);
}

/** A completion with its checked fields, as settleLeases takes it. */
export interface CheckedItem {
  readonly input: CompletionInput;
  readonly checked: CheckedCompletion;
}

/**
 * A retryable failure requeues the job while attempts remain and no cancel was requested (i: the
 * completion).
 */
const requeues = sql`i.outcome = 'failed' and i.retryable and jobs.attempts < jobs.max_attempts and
  not jobs.cancel_requested`;

/**
 * Settles the live leases among `items` in one statement (one round trip, one
 * commit): the job rows, the lease rows (ended, with the completion id, hash
 * and the settled job row as the stored reply) and the wakeup for requeued
 * jobs. Returns the reply of each completion it settled, undefined for the
 * others (not a live lease of that runner, already settled, or a second
 * completion of one job in the same call): completeJobInTransaction answers
 * those, a repeat with the stored reply and everything else with its error.
 * The one place a completion settles a lease: each is reported to `observer`,
 * and `hook` (a pipeline's next steps) runs in the same transaction.
 */
export async function settleLeases(
  db: Kysely<Database>,
  items: readonly CheckedItem[],
  observer?: BrokerObserver,
  hook?: SettleHook,
): Promise<Array<JobSnapshot | undefined>> {
  const replies: Array<JobSnapshot | undefined> = items.map(() => undefined);
  const settled = (rows: ReadonlyArray<JobRow & { ord: number }>, at: readonly number[]) => {
    for (const row of rows) {
      replies[at[row.ord]!] = jobSnapshot(row);
      observer?.settled(row.state);
    }
  };
  // Without a hook, one statement. With one, a job of no pipeline step still settles in one
  // statement and one commit (the statement leaves step jobs alone); what is left (a step's job,
  // or a completion that is no live lease's) is tried again in a transaction with the hook, which
  // moves the step's pipeline in that same transaction.
  const all = items.map((_, i) => i);
  settled(await settleStatement(db, items, hook ? "no steps" : "all"), all);
  if (!hook) return replies;
  const left = all.filter((i) => replies[i] === undefined);
  if (left.length)
    settled(
      await settleWith(db, hook, (q) =>
        settleStatement(
          q,
          left.map((i) => items[i]!),
          "all",
        ),
      ),
      left,
    );
  return replies;
}

/**
 * The completion statement over `items`: the rows it settled, each with its
 * index in `items` (ord). `steps`: "no steps" leaves the jobs of pipeline
 * steps as they are (pipeline_steps_job).
 */
async function settleStatement(
  q: Kysely<Database>,
  items: readonly CheckedItem[],
  steps: "all" | "no steps",
): Promise<Array<JobRow & { ord: number }>> {
  // Measured (docs/performance.md, "Profiling and what changed", 3): a completion was BEGIN,
  // SELECT the lease FOR UPDATE, UPDATE jobs, UPDATE leases, COMMIT, five round trips alone and
  // four in a batch. In this one CTE: 173 and 179 jobs/s at N = 1 against 156 and 153, 731 and
  // 716 at N = 16 against 674 and 622; at N = 64 (1,111 and 1,049 against 1,081 and 1,046) the
  // machine was saturated. The stored reply is the settled row as jsonb (to_jsonb of j, less the
  // statement's own columns) so it can be written by this same statement; storedReply reads it
  // back. It is made in the leases update, not returned: the reply does not carry it to pg, which
  // would JSON-parse the whole job once more per completion.
  const values: SettleValues = {
    ord: items.map((_, i) => i),
    jobId: items.map((it) => it.checked.jobId),
    workspaceId: items.map((it) => it.input.workspaceId),
    runnerId: items.map((it) => it.input.runnerId),
    tokenHex: items.map((it) => it.checked.tokenHash.toString("hex")),
    outcome: items.map((it) => it.checked.outcome),
    retryable: items.map((it) => it.checked.error?.retryable ?? false),
    exitCode: items.map((it) => it.input.exitCode ?? null),
    error: items.map((it) => (it.checked.error ? JSON.stringify(it.checked.error) : null)),
    artifacts: items.map((it) => it.checked.artifacts),
    result: items.map((it) => it.checked.result),
    completionId: items.map((it) => it.input.completionId),
    completionSha256: items.map((it) => it.checked.completionSha256),
  };
  return (await settleShapes.execute(q, values, settleModes[steps])).rows;
}

/** The columns of the completion statement's unnest, one array each, one entry per completion. */
interface SettleValues extends Record<string, unknown[]> {
  ord: number[];
  jobId: string[];
  workspaceId: string[];
  runnerId: string[];
  tokenHex: string[];
  outcome: string[];
  retryable: boolean[];
  exitCode: Array<number | null>;
  error: Array<string | null>;
  artifacts: Array<string | null>;
  result: Array<string | null>;
  completionId: string[];
  completionSha256: string[];
}

/** The two forms of the statement, as statementShapes contexts. */
const settleModes = { all: { steps: "all" }, "no steps": { steps: "no steps" } } as const;

/**
 * The completion statement, compiled once per form (statementShapes); its values are arrays, so one
 * shape serves any batch.
 */
const settleShapes = statementShapes(
  (
    _q: Kysely<Database>,
    v: SettleValues,
    mode: (typeof settleModes)[keyof typeof settleModes],
  ) => sql<JobRow & { ord: number }>`
    with j as (
      update jobs set
        state = case when ${requeues} then 'queued' else i.outcome end,
        exit_code = i.exit_code,
        error = i.error::jsonb,
        artifacts = case when ${requeues} then null else i.artifacts::jsonb end,
        result = case when ${requeues} then null else i.result::jsonb end,
        settled_at = case when ${requeues} then null else now() end,
        claimable_at = case when ${requeues} then ${retryClaimableAt} else jobs.claimable_at end,
        ${clearLease}
      from unnest(
        ${v.ord}::int[], ${v.jobId}::uuid[], ${v.workspaceId}::text[],
        ${v.runnerId}::text[], ${v.tokenHex}::text[], ${v.outcome}::text[],
        ${v.retryable}::boolean[], ${v.exitCode}::int[],
        ${v.error}::text[], ${v.artifacts}::text[], ${v.result}::text[],
        ${v.completionId}::text[], ${v.completionSha256}::text[]
      ) as i(ord, job_id, workspace_id, runner_id, token_hex, outcome, retryable, exit_code, error,
        artifacts, result, completion_id, completion_sha256)
      where ${liveLease(
        {
          jobId: sql.ref("i.job_id"),
          workspaceId: sql.ref("i.workspace_id"),
          runnerId: sql.ref("i.runner_id"),
          token: sql`decode(i.token_hex,
        'hex')`,
        },
        "jobs",
      )}
        ${mode.steps === "no steps" ? sql`and not ${isStepJob(sql.ref("jobs.id"))}` : sql``}
      returning jobs.*, i.runner_id as lease_runner_id, i.ord, i.token_hex, i.completion_id as
        settled_by, i.completion_sha256 as settled_sha256
    ), l as (
      update leases set ended_at = now(), end_reason = case when j.state = 'queued' then 'requeued' else 'settled' end,
        completion_id = j.settled_by, completion_sha256 = j.settled_sha256,
        completion_reply = to_jsonb(j.*)
          - ${sql.lit("{lease_runner_id,ord,token_hex,settled_by,settled_sha256}")}::text[]
      from j where leases.token_sha256 = decode(j.token_hex, 'hex')
    ), ${eventsCte("ev", "j", settledOrRequeued("retryable_failure"))}, ${wakeWaiters("j")}
    select j.*, ${woken} from j`,
);

/**
 * completeJob for a completion settleLeases did not settle: in a transaction
 * holding the lease row, a repeat gets the stored reply, a different
 * completion 409, a settled job or a dead lease its refusal (and a lease
 * found live after all is settled by settleLeases under the lock).
 */
export async function completeJobInTransaction(
  db: Kysely<Database>,
  input: CompletionInput,
  checked: CheckedCompletion,
  observer?: BrokerObserver,
  hook?: SettleHook,
): Promise<JobSnapshot> {
  const { jobId, tokenHash, completionSha256 } = checked;
  return db.transaction().execute(async (tx) => {
    const lease = await tx
      .selectFrom("leases")
      .selectAll()
      .where("token_sha256", "=", tokenHash)
      .where("job_id", "=", jobId)
      .where("runner_id", "=", input.runnerId)
      .where("workspace_id", "=", input.workspaceId)
      .forUpdate()
      .executeTakeFirst();
    if (lease?.completion_id) {
      if (
        lease.completion_id === input.completionId &&
        lease.completion_sha256 === completionSha256
      )
        return storedReply(tx, lease.id);
      throw new ConnectError(
        `job ${jobId} was already completed under this lease by completion ` +
          `${JSON.stringify(lease.completion_id)}; a different completion is ` +
          `refused`,
        Code.Aborted,
      );
    }
    // Not completed under this lease: settle it here if it is live after all (the lock is now
    // held), else say why it cannot be.
    const [reply] = await settleLeases(tx, [{ input, checked }], observer, hook);
    if (reply) return reply;
    const settled = await tx
      .selectFrom("jobs")
      .select(["state"])
      .where("id", "=", jobId)
      .where("workspace_id", "=", input.workspaceId)
      .executeTakeFirst();
    // A job the sweep failed past its deadline: leaseRefusal says so, rather than "already failed".
    if (
      settled &&
      lease?.end_reason !== "timed_out" &&
      ["succeeded", "failed", "cancelled"].includes(settled.state)
    ) {
      throw new ConnectError(
        `job ${jobId} is already ${settled.state}; a different completion is refused`,
        Code.Aborted,
      );
    }
    throw await leaseRefusal(tx, input, jobId, tokenHash);
  });
}

/**
 * The reply stored with a completion: the job row as it was settled (stored
 * as jsonb, read back as a row of jobs), so a repeat gets the same view.
 */
async function storedReply(db: Kysely<Database>, leaseId: number): Promise<JobSnapshot> {
  const { rows } =
    await sql<JobRow>`select r.* from leases l cross join lateral jsonb_populate_record(null::jobs,
      l.completion_reply) r where l.id = ${leaseId}`.execute(db);
  return jobSnapshot(rows[0]!);
}

import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import { hashLeaseToken, newLeaseToken } from "../ids.js";
import { leasedJobColumns, leasedJobSnapshot, type JobRow } from "../jobs/snapshot.js";
import type { LeaseHolder } from "./check.js";
import type { LeaseView } from "./views.js";
import { leaseSecrets } from "../jobs/secrets.js";
import { leaseInputs } from "../jobs/inputs.js";
import type { SecretBox } from "../../secrets/box.js";
import { isStepJob } from "../pipelines/settle-hook.js";
import { statementShapes } from "../../store/statement-shapes.js";

/**
 * Claims the highest-priority, oldest eligible job for a runner, or none.
 * One request of claimLeases: see there for the guarantees.
 */
export async function claimJob(
  db: Kysely<Database>,
  holder: LeaseHolder,
  leaseSeconds: number,
  box?: SecretBox,
): Promise<LeaseView | undefined> {
  const [lease] = await claimLeases(db, [holder], leaseSeconds, box);
  return lease;
}

/**
 * Claims a job for each request, in one statement: the function
 * forelead_claim (src/store/sql/functions/forelead_claim.sql), which for each
 * request in turn locks the runner's row, counts its live leases with a fresh
 * snapshot and takes the highest-priority, oldest eligible job FOR UPDATE SKIP
 * LOCKED, then writes the call's leases, their jobs and job.leased events as
 * one set (forelead_claim_write). So a runner never holds more than its slots,
 * however its claims interleave (a runner asking k times gets at most its free
 * slots), and concurrent claims on any replica never take the same job.
 * Requests are sent sorted by workspace and runner, so concurrent calls lock
 * runner rows in one order. Answers in the order of `holders`: the lease, or
 * undefined when none was free. Eligible is every claim clause at once (due,
 * neither workspace nor runner paused, labels, requirements, group room, slot
 * free: the functions forelead_claim names), the same clauses waiting.ts asks
 * one by one; a group's limit holds exactly across replicas (forelead_claim.sql
 * reasons it through). Throws failed_precondition, claiming nothing, when a
 * runner is not registered.
 * A leased job with secrets gets them opened (with `box`) into its lease.
 */
export async function claimLeases(
  db: Kysely<Database>,
  holders: readonly LeaseHolder[],
  leaseSeconds: number,
  box?: SecretBox,
): Promise<Array<LeaseView | undefined>> {
  const tokens = holders.map(() => newLeaseToken());
  const hashes = tokens.map((t) => hashLeaseToken(t).toString("hex"));
  const order = holders
    .map((_, i) => i)
    .sort((x, y) => compareHolders(holders[x]!, holders[y]!) || x - y);
  // pipeline_step: whether the leased job is a pipeline step's (isStepJob), so
  // only such a lease costs the query for its inputs (pipelines/inputs.ts withInputs).
  let rows: LeaseRow[];
  try {
    // Measured (docs/performance.md, "Profiling and what changed", 2): the claim was BEGIN,
    // UPDATE runners (the lock that makes the live-lease count exact), the claim CTE and COMMIT,
    // four round trips, and Postgres socket writes were about a quarter of the control plane's
    // busy CPU. As one function call: 676 and 648 jobs/s at N = 16 against 554 and 573, claim
    // p50 8.9 and 9.8 ms against 13.8 and 12.9 ms. It stays flat with the queue's size (section
    // 5: p50 1.9 ms with 10,000 queued, 1.8 ms with 1,000,000, on the index jobs_claimable);
    // batching claims into one call (lease-batches.ts) gave 1.8x at N = 16 and 2.5x at N = 64.
    // Not measured yet: the pause check (a probe of workspace_pauses by its key) and the
    // job.leased insert of each request. The eligibility clauses, EXPLAIN ANALYZE with 100,000
    // queued (docs/fleet.md "Scheduling"): free when nothing ineligible is ahead of the first
    // eligible job; a job not yet due costs an index tuple, one with unmet requirements or a full
    // group a heap visit; still one round trip.
    ({ rows } = await claimStatement.execute(
      db,
      {
        workspaces: order.map((i) => holders[i]!.workspaceId),
        runners: order.map((i) => holders[i]!.runnerId),
        hashes: order.map((i) => hashes[i]!),
        leaseSeconds,
      },
      undefined,
    ));
  } catch (err) {
    // SQLSTATE FL001: raised by forelead_claim for a runner that is not registered (or retired).
    if ((err as { code?: string }).code === "FL001")
      throw new ConnectError((err as Error).message, Code.FailedPrecondition);
    throw err;
  }
  return leaseViews(db, rows, tokens, hashes, box);
}

/**
 * The leases of a claim's rows (forelead_claim's jobs rows, each with pipeline_step), in the
 * order of `tokens`: each token's lease, or undefined when no row carries its hash (`hashes`:
 * the tokens' SHA-256, hex). Reads the secrets and resumed input of the leased jobs that have
 * them. Also how an enqueue's direct handoff (handoff.ts) answers the lease it made.
 */
export async function leaseViews(
  db: Kysely<Database>,
  rows: readonly LeaseRow[],
  tokens: readonly string[],
  hashes: readonly string[],
  box?: SecretBox,
): Promise<Array<LeaseView | undefined>> {
  // PGlite returns bytea as a Uint8Array, pg as a Buffer.
  const byHash = new Map(
    rows.map((row) => [Buffer.from(row.lease_token_sha256!).toString("hex"), row]),
  );
  // A second query only when a leased job has secrets (its row lists their names); after the
  // claim committed, which is safe: a lease is live from then on, and rows go only at settle.
  const secrets = await leaseSecrets(
    db,
    box,
    rows.filter((r) => r.secret_names.length || r.secret_file_names.length).map((r) => r.id),
  );
  // Likewise for a resumed job (docs/suspend.md): the answer and checkpoint of its latest input
  // request.
  const inputs = await leaseInputs(
    db,
    rows.flatMap((r) => (r.input_lease_id === null ? [] : [Number(r.input_lease_id)])),
  );
  return tokens.map((_, i) => {
    const row = byHash.get(hashes[i]!);
    const delivered = row && secrets.get(row.id);
    const input = row?.input_lease_id != null ? inputs.get(Number(row.input_lease_id)) : undefined;
    return (
      row && {
        token: tokens[i]!,
        expiresAt: row.lease_expires_at!,
        cancelRequested: row.cancel_requested,
        job: leasedJobSnapshot(row),
        attempt: row.attempts,
        pipelineStep: row.pipeline_step,
        ...(delivered ? { secrets: delivered } : {}),
        ...(input ? { input } : {}),
      }
    );
  });
}

/** The columns of a leased job's row that its lease is made of (leaseViews). */
const leaseColumns = [
  ...leasedJobColumns,
  "lease_token_sha256",
  "lease_expires_at",
  "cancel_requested",
  "attempts",
  "secret_names",
  "secret_file_names",
  "input_lease_id",
] as const satisfies readonly (keyof JobRow)[];

/**
 * A leased job's row as leaseViews reads it: a claim selects just these columns, a handoff has the
 * whole row.
 */
export type LeaseRow = Pick<JobRow, (typeof leaseColumns)[number]> & {
  readonly pipeline_step: boolean;
};

/**
 * The claim's one statement, compiled once (statementShapes): forelead_claim and, per leased job,
 * whether it is a pipeline step's. It returns the lease's columns only: `c.*` was 58 columns of
 * which a lease reads 17; Postgres formatted and pg parsed every one of them (timestamps, jsonb)
 * for each leased job (docs/performance.md, "Profiling and what changed" 8).
 */
const claimStatement = statementShapes(
  (
    _db: Kysely<Database>,
    v: { workspaces: string[]; runners: string[]; hashes: string[]; leaseSeconds: number },
  ) => sql<LeaseRow>`
      select ${sql.join(leaseColumns.map((c) => sql.ref(`c.${c}`)))}, ${isStepJob(sql.ref("c.id"))} as pipeline_step
      from forelead_claim(${v.workspaces}::text[], ${v.runners}::text[], ${v.hashes}::text[], ${v.leaseSeconds}::int)
        c`,
);

function compareHolders(a: LeaseHolder, b: LeaseHolder): number {
  return a.workspaceId < b.workspaceId
    ? -1
    : a.workspaceId > b.workspaceId
      ? 1
      : a.runnerId < b.runnerId
        ? -1
        : a.runnerId > b.runnerId
          ? 1
          : 0;
}

import { sql, type Kysely, type RawBuilder, type SqlBool, type Transaction } from "kysely";
import type { Database } from "../../store/schema.js";
import { inTransaction } from "../../store/transaction.js";

/** Called with the jobs a statement settled, in that statement's transaction. */
export type SettleHook = (tx: Transaction<Database>, jobIds: readonly string[]) => Promise<void>;

/**
 * Runs `settle` (a statement that may settle jobs, returning their rows) and
 * the hook over what it returned, in one transaction; without a hook, as it is.
 */
export async function settleWith<R extends { id: string }>(
  db: Kysely<Database>,
  hook: SettleHook | undefined,
  settle: (q: Kysely<Database>) => Promise<R[]>,
): Promise<R[]> {
  if (!hook) return settle(db);
  return inTransaction(db, async (tx) => {
    const rows = await settle(tx);
    if (rows.length)
      await hook(
        tx,
        rows.map((r) => r.id),
      );
    return rows;
  });
}

/**
 * The job `jobId` (a column reference) is a pipeline step's job: one probe of
 * pipeline_steps_job, by forelead_is_step_job, which reads with a snapshot of
 * its own: a claim asks it of jobs its function leased, which may have been
 * enqueued after the claim's statement began. What decides whether a settle
 * needs the hook, and whether a lease can have inputs.
 */
export function isStepJob(jobId: RawBuilder<unknown>): RawBuilder<SqlBool> {
  return sql<SqlBool>`forelead_is_step_job(${jobId})`;
}

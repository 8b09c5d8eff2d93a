import { sql, type Kysely, type RawBuilder, type Transaction } from "kysely";
import type { Database } from "../store/schema.js";

// The one home of how an event row is written. Every change the global
// stream reports writes its row in the transaction of the change: inside the
// statement that makes it where that is one statement (claim, complete,
// expire, release, cancel, enqueue), so the hot path keeps its one round trip,
// or as one more statement of its transaction (pause, retire). forelead_claim
// (through forelead_claim_write) writes job.leased itself, in PL/pgSQL, where these cannot
// reach. The insert's statement trigger NOTIFYs forelead_events.

/** The event types of the stream, in the protocol's words. */
export const eventTypes = [
  "job.queued",
  "job.leased",
  "job.settled",
  "job.requeued",
  "job.cancel_requested",
  "job.suspended",
  "job.input_answered",
  "job.input_expired",
  "runner.registered",
  "runner.paused",
  "runner.resumed",
  "runner.retired",
  "runner.forgotten",
  "runner.lease_lost",
  "runner.drain_ordered",
  "workspace.paused",
  "workspace.resumed",
  "pipeline.queued",
  "pipeline.settled",
  "step.queued",
  "step.succeeded",
  "step.failed",
  "step.skipped",
  "step.cancelled",
  "schedule.fired",
  "schedule.missed",
  "webhook.disabled",
] as const;

/** One of eventTypes. */
export type EventType = (typeof eventTypes)[number];

/** Why a job.requeued event's job went back to the queue. */
export type RequeueReason = "released" | "lease_lost" | "retryable_failure";

/** The NOTIFY channel the events trigger sends on (payload-less). */
export const eventsChannel = "forelead_events";

/** The columns of one event as SQL expressions over the CTE or table a statement reads. */
export interface EventColumns {
  readonly type: RawBuilder<string>;
  readonly workspaceId: RawBuilder<string | null>;
  readonly runnerId?: RawBuilder<string | null>;
  readonly jobId?: RawBuilder<string | null>;
  /** A jsonb expression; never a secret (no token, grant, key or env value). */
  readonly data?: RawBuilder<unknown>;
}

/**
 * The CTE `name`: an event row for each row of `from` (a CTE name, or a
 * FROM item) that `where` keeps, returning each row's job_id. A
 * data-modifying CTE runs whether or not it is referenced; two in one
 * statement run in no set order, unless one reads the other's rows.
 */
export function eventsCte(
  name: string,
  from: string | RawBuilder<unknown>,
  columns: EventColumns,
  where: RawBuilder<unknown> = sql`true`,
): RawBuilder<unknown> {
  return sql`${sql.id(name)} as (
    insert into events (type, workspace_id, runner_id, job_id, data)
    select ${columns.type}, ${columns.workspaceId}, ${columns.runnerId ?? sql`null`},
      ${columns.jobId ?? sql`null`}::uuid,
      coalesce(${columns.data ?? sql`null`}, '{}'::jsonb)
    from ${typeof from === "string" ? sql.table(from) : from} where ${where}
    returning job_id
  )`;
}

/** One event, as a statement of the caller's transaction. */
export interface EventInput {
  readonly type: EventType;
  readonly workspaceId: string | null;
  readonly runnerId?: string | null;
  readonly jobId?: string | null;
  readonly data?: Readonly<Record<string, unknown>>;
}

/** Writes one event in `tx`: commit it with the change it reports. */
export async function recordEvent(
  tx: Kysely<Database> | Transaction<Database>,
  e: EventInput,
): Promise<void> {
  await tx
    .insertInto("events")
    .values({
      type: e.type,
      workspace_id: e.workspaceId,
      runner_id: e.runnerId ?? null,
      job_id: e.jobId ?? null,
      data: JSON.stringify(e.data ?? {}),
    })
    .execute();
}

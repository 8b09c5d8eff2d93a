import { sql, type Kysely, type RawBuilder } from "kysely";
import type { Database } from "../store/schema.js";

/**
 * Every kind of record that has a retention, in the order a prune run takes them; the one table
 * `forelead serve`'s flags, docs/retention.md, the metrics and the doctor are built from.
 */
export const retentionKinds = [
  "jobs",
  "events",
  "audit",
  "runners",
  "certificates",
  "grants",
  "webhookDeliveries",
  "scheduleFires",
  "sessions",
  "blobs",
] as const;

/** One kind of record with a retention. */
export type RetentionKind = (typeof retentionKinds)[number];

/** How long each kind is kept, in milliseconds. */
export type Retentions = Readonly<Record<RetentionKind, number>>;

/** What a kind's flag says and what it may be set to. */
export interface RetentionRule {
  /** The `forelead serve` flag that sets it. */
  readonly flag: string;
  /** Its default, as the flag is written. */
  readonly defaultText: string;
  /** The shortest retention the flag accepts, as the flag is written. */
  readonly minimumText: string;
  /** What is deleted, and when, in the flag's help. */
  readonly help: string;
}

const hour = 3600;
const day = 24 * hour;

/** Defaults and minimums in seconds, beside their written forms (checked by the unit test). */
const seconds: Readonly<Record<RetentionKind, { readonly d: number; readonly min: number }>> = {
  jobs: { d: 30 * day, min: hour },
  events: { d: 7 * day, min: hour },
  audit: { d: 400 * day, min: day },
  runners: { d: 30 * day, min: hour },
  certificates: { d: 30 * day, min: hour },
  grants: { d: 30 * day, min: hour },
  webhookDeliveries: { d: 7 * day, min: hour },
  scheduleFires: { d: 30 * day, min: hour },
  sessions: { d: 7 * day, min: hour },
  blobs: { d: day, min: hour },
};

/** The rule of each kind. */
export const retentionRules: Readonly<Record<RetentionKind, RetentionRule>> = {
  jobs: {
    flag: "--job-retention",
    defaultText: "30d",
    minimumText: "1h",
    help:
      "how long a settled job is kept with its attempts, logs, events, samples, uploads and " +
      "inputs; a pipeline's jobs go with the pipeline once it settled that long ago, a retry " +
      "chain as a whole once its newest job did",
  },
  events: {
    flag: "--event-retention",
    defaultText: "7d",
    minimumText: "1h",
    help: "how long the global event stream (GET /v1/admin/events) keeps events",
  },
  audit: {
    flag: "--audit-retention",
    defaultText: "400d",
    minimumText: "1d",
    help: "how long audit records are kept, from their last occurrence",
  },
  runners: {
    flag: "--runner-retention",
    defaultText: "30d",
    minimumText: "1h",
    help:
      "how long a runner not heard from (and holding no lease) stays registered, with its " +
      "inventory; a retired runner's row is kept",
  },
  certificates: {
    flag: "--certificate-retention",
    defaultText: "30d",
    minimumText: "1h",
    help: "how long an issued certificate's record is kept after it expired",
  },
  grants: {
    flag: "--grant-retention",
    defaultText: "30d",
    minimumText: "1h",
    help: "how long an enrollment grant is kept after it was used or expired",
  },
  webhookDeliveries: {
    flag: "--webhook-delivery-retention",
    defaultText: "7d",
    minimumText: "1h",
    help: "how long a webhook delivery is kept after it was delivered or failed",
  },
  scheduleFires: {
    flag: "--schedule-fire-retention",
    defaultText: "30d",
    minimumText: "1h",
    help: "how long a schedule's fires are kept (its newest fire always is)",
  },
  sessions: {
    flag: "--session-retention",
    defaultText: "7d",
    minimumText: "1h",
    help: "how long a person's sign-in session is kept after it ended or expired",
  },
  blobs: {
    flag: "--blob-grace",
    defaultText: "1d",
    minimumText: "1h",
    help:
      "how long an artifact blob no upload of a kept job names is kept before it is deleted " +
      "(uploads in progress are never touched)",
  },
};

/** The default retention of every kind, in milliseconds. */
export const defaultRetentions: Retentions = Object.fromEntries(
  retentionKinds.map((k) => [k, seconds[k].d * 1000]),
) as Retentions;

/** The shortest retention of `kind` an operator may set, in milliseconds. */
export function minimumRetentionMs(kind: RetentionKind): number {
  return seconds[kind].min * 1000;
}

/** A statement deleting at most `batch` rows of one kind past `cutoff`; how many it deleted. */
export type PruneStatement = (
  db: Kysely<Database>,
  retentionMs: number,
  batch: number,
) => Promise<number>;

/** "now() - retention", in the database's clock. */
export function cutoff(retentionMs: number): RawBuilder<Date> {
  return sql<Date>`(now() - make_interval(secs => ${retentionMs / 1000}))`;
}

/**
 * Deletes up to `batch` rows of `table` matching `where`: the rows are picked with FOR UPDATE SKIP
 * LOCKED, so replicas pruning at once take different rows and never wait on each other, and each
 * statement holds its few row locks only until it commits.
 */
function pruneRows(table: string, where: (c: RawBuilder<Date>) => RawBuilder<unknown>) {
  return async (db: Kysely<Database>, retentionMs: number, batch: number) => {
    const t = sql.table(table);
    const { numAffectedRows } = await sql`delete from ${t} where ctid = any(array(
      select ctid from ${t} where ${where(cutoff(retentionMs))}
      limit ${batch} for update skip locked))`.execute(db);
    return Number(numAffectedRows ?? 0);
  };
}

/**
 * The prune statement of every kind but jobs (src/ops/prune-jobs.ts) and blobs
 * (src/artifacts/gc.ts).
 */
export const pruneStatements: Readonly<
  Record<Exclude<RetentionKind, "jobs" | "blobs">, PruneStatement>
> = {
  events: pruneRows("events", (c) => sql`at < ${c}`),
  // A record aggregating repeats is kept until its last occurrence is past the retention.
  audit: pruneRows("audit_records", (c) => sql`at < ${c} and coalesce(last_at, at) < ${c}`),
  runners: async (db, retentionMs, batch) => {
    const { rows } = await sql<{ n: number | string }>`with gone as (
        delete from runners where ctid = any(array(
          select r.ctid from runners r
          where r.retired_at is null and r.last_seen_at < ${cutoff(retentionMs)}
            and not exists (select 1 from leases l where l.workspace_id = r.workspace_id
              and l.runner_id = r.runner_id and l.ended_at is null)
          limit ${batch} for update of r skip locked))
        returning workspace_id, runner_id),
      reports as (delete from inventory_reports i using gone g
        where i.workspace_id = g.workspace_id and i.runner_id = g.runner_id),
      items as (delete from inventory_items i using gone g
        where i.workspace_id = g.workspace_id and i.runner_id = g.runner_id),
      flags as (delete from inventory_flags i using gone g
        where i.workspace_id = g.workspace_id and i.runner_id = g.runner_id)
      select count(*) as n from gone`.execute(db);
    return Number(rows[0]?.n ?? 0);
  },
  certificates: pruneRows("issued_certificates", (c) => sql`not_after < ${c}`),
  grants: pruneRows("enrollment_grants", (c) => sql`coalesce(used_at, expires_at) < ${c}`),
  webhookDeliveries: pruneRows(
    "webhook_deliveries",
    (c) => sql`finished_at is not null and finished_at < ${c} and status <> 'pending'`,
  ),
  scheduleFires: pruneRows(
    "schedule_fires",
    (c) => sql`fired_at < ${c} and exists (select 1 from schedule_fires n
      where n.schedule_id = schedule_fires.schedule_id and n.fired_at > schedule_fires.fired_at)`,
  ),
  sessions: pruneRows("person_sessions", (c) => sql`least(ended_at, expires_at) < ${c}`),
};

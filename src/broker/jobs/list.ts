import { sql, type Kysely } from "kysely";
import type { Database, JobState } from "../../store/schema.js";
import { checkSegmentId } from "../../identity/segment-id.js";
import { checkJobId } from "../ids.js";
import { jobSnapshot, type JobSnapshot } from "./snapshot.js";
import { attemptHistory } from "./attempts.js";
import { bad, checkLabels, jobStates } from "./rules.js";

/**
 * A short job id: the last 8 to 36 characters of one (UUIDv7 ids of one batch share their leading
 * timestamp, so the end is what tells them apart).
 */
const jobIdSuffixPattern = /^[0-9a-f-]{8,36}$/;

/** The orders a job listing takes: by creation, newest or oldest first. */
const jobListOrders = ["newest", "oldest"] as const;

/** Filter and page of a job listing, decoded (times already parsed). */
export interface ListJobsInput {
  readonly workspaceId: string;
  readonly state: string;
  /** Any of these states, beside `state`. */
  readonly states?: readonly string[];
  /** Created at or after. */
  readonly since?: Date;
  /** Created before. */
  readonly until?: Date;
  /** The job's labels include all of these. */
  readonly labels?: readonly string[];
  /** A lease of this runner ever held the job. */
  readonly runnerId?: string;
  /** "newest" (default) or "oldest". */
  readonly order?: string;
  /** The job's id ends with this (a short id: jobIdSuffixPattern). */
  readonly idSuffix?: string;
  readonly pageSize: number;
  readonly pageToken: string;
  /** When set, only the jobs this reader may see: those in its workspaces and those it enqueued. */
  readonly visibleTo?: JobReader;
}

/** A reader scoped to workspaces: it sees their jobs and the jobs it enqueued itself. */
export interface JobReader {
  readonly spiffeId: string;
  readonly workspaces: readonly string[];
}

/**
 * Jobs keyset-paged by (created_at, id), newest first or oldest first: a
 * unique order that never changes for a row, so while jobs are added no row
 * is listed twice or skipped (new ones appear on pages already read, or at
 * the end of an oldest-first listing). The token carries created_at to the
 * microsecond as Postgres stores it: a JS Date keeps milliseconds, and a
 * token rounded to them skipped the jobs created later in the same
 * millisecond as a page's last one. The token does not record the order or
 * the filters: a client pages with the request it started with.
 *
 * Indexes jobs_workspace_created (workspace_id, created_at, id) and
 * jobs_workspace_state_created (workspace_id, state, created_at, id) serve a
 * workspace's listing in either direction; the runner filter probes leases by
 * (runner_id, job_id).
 */
export async function listJobs(
  db: Kysely<Database>,
  input: ListJobsInput,
): Promise<{ jobs: JobSnapshot[]; nextPageToken: string }> {
  const states = [...new Set([...(input.state ? [input.state] : []), ...(input.states ?? [])])];
  states.forEach(
    (s) =>
      jobStates.includes(s as JobState) ||
      bad(`state ${JSON.stringify(s.slice(0, 40))} is not one of ${jobStates.join(", ")}`),
  );
  if (input.pageSize < 0 || input.pageSize > 500)
    bad(`pageSize must be 1 to 500 (0 means 50); got ${input.pageSize}`);
  const order = input.order || "newest";
  if (!(jobListOrders as readonly string[]).includes(order))
    bad(`order ${JSON.stringify(order.slice(0, 40))} is not one of ${jobListOrders.join(", ")}`);
  if (input.labels) checkLabels("labels", input.labels);
  if (input.runnerId) checkSegmentId("runnerId", input.runnerId);
  const idSuffix = input.idSuffix?.toLowerCase();
  if (idSuffix && !jobIdSuffixPattern.test(idSuffix))
    bad(
      `idSuffix ${JSON.stringify(idSuffix.slice(0, 40))} is not a short job id: the last 8 to 36 ` +
        `characters of a job id (hex digits and dashes)${idSuffix.length < 8 ? "; give at least 8" : ""}`,
    );
  const direction: "asc" | "desc" = order === "oldest" ? "asc" : "desc";
  const pageSize = input.pageSize || 50;
  let query = db
    .selectFrom("jobs")
    .selectAll()
    .select(pageKey.as("page_key"))
    .select(attemptHistory("jobs").as("attempt_history"))
    .orderBy("created_at", direction)
    .orderBy("id", direction)
    .limit(pageSize + 1);
  if (input.workspaceId) query = query.where("workspace_id", "=", input.workspaceId);
  const reader = input.visibleTo;
  if (reader)
    query = query.where((eb) =>
      eb.or([
        eb("enqueued_by", "=", reader.spiffeId),
        ...(reader.workspaces.length ? [eb("workspace_id", "in", reader.workspaces)] : []),
      ]),
    );
  if (states.length) query = query.where("state", "in", states as JobState[]);
  if (input.since) query = query.where("created_at", ">=", input.since);
  if (input.until) query = query.where("created_at", "<", input.until);
  if (input.labels?.length)
    query = query.where(sql<boolean>`labels @> ${[...input.labels]}::text[]`);
  if (input.runnerId)
    query = query.where(
      sql<boolean>`exists (select 1 from leases l where l.runner_id = ${input.runnerId} and l.job_id = jobs.id)`,
    );
  // A scan of the ids in the other filters' range: short ids are typed by people, seldom.
  if (idSuffix) query = query.where(sql<boolean>`jobs.id::text like ${`%${idSuffix}`}`);
  if (input.pageToken) query = query.where(afterPageToken(input.pageToken, direction));
  const rows = await query.execute();
  const page = rows.slice(0, pageSize);
  const last = page[page.length - 1];
  return {
    jobs: page.map(({ page_key: _key, attempt_history, ...row }) =>
      jobSnapshot(row, attempt_history),
    ),
    nextPageToken: rows.length > pageSize && last ? pageTokenOf(last) : "",
  };
}

/**
 * The page key of a row keyset-paged by (created_at, id): created_at to the microsecond, as text.
 */
export const pageKey = sql<string>`to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

/** The token of the page after `last` (a row selected with pageKey as page_key). */
export function pageTokenOf(last: { page_key: string; id: string }): string {
  return Buffer.from(JSON.stringify([last.page_key, last.id])).toString("base64url");
}

/**
 * The condition for the rows after a page token, in the listing's direction (400 for a token not
 * from a reply).
 */
export function afterPageToken(token: string, direction: "asc" | "desc") {
  const after = decodePageToken(token);
  const key = sql`(${after.createdAt}::timestamptz, ${after.id}::uuid)`;
  return direction === "asc"
    ? sql<boolean>`(created_at, id) > ${key}`
    : sql<boolean>`(created_at, id) < ${key}`;
}

const pageKeyPattern = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$/;

function decodePageToken(token: string): { createdAt: string; id: string } {
  try {
    const [createdAt, id] = JSON.parse(Buffer.from(token, "base64url").toString("utf8")) as [
      unknown,
      unknown,
    ];
    if (typeof createdAt !== "string" || !pageKeyPattern.test(createdAt) || typeof id !== "string")
      throw new Error("bad token");
    return { createdAt, id: checkJobId(id) };
  } catch {
    return bad("pageToken is not a token from a previous reply; start again without it");
  }
}

import "reflect-metadata";
import { describe, expect, it } from "vitest";
import { sql } from "kysely";
import { jobBody } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

const cp = useControlPlane();
const { admin } = cp;
const ws = "paging";

/**
 * Enqueues `n` jobs over the admin's one connection, `inFlight` at a time; resolves with their ids.
 */
async function enqueueConcurrently(n: number, inFlight = 64): Promise<string[]> {
  const ids: string[] = [];
  let next = 0;
  const worker = async () => {
    while (next < n) {
      next++;
      const reply = await admin.rest.request(
        "POST",
        "/v1/admin/jobs",
        jobBody({ workspaceId: ws }),
      );
      expect(reply.status, reply.text).toBe(200);
      ids.push(reply.json.job.id);
    }
  };
  await Promise.all(Array.from({ length: inFlight }, worker));
  return ids;
}

/** Every page of ListJobs in the workspace, by `pageSize`; the ids in listing order. */
async function listAll(pageSize: number): Promise<string[]> {
  const listed: string[] = [];
  let token = "";
  do {
    const reply = await admin.rest.request(
      "GET",
      `/v1/admin/jobs?workspaceId=${ws}&pageSize=${pageSize}${token ? `&pageToken=${token}` : ""}`,
    );
    expect(reply.status, reply.text).toBe(200);
    listed.push(...reply.json.jobs.map((j: { id: string }) => j.id));
    token = reply.json.nextPageToken ?? "";
  } while (token);
  return listed;
}

/**
 * Enqueues `n` jobs in one statement (copies of one enqueued job, over the
 * store's one connection), created 7 µs apart: ~140 to a millisecond, as a
 * burst of concurrent enqueues on a fast server writes them (the embedded
 * database's clock_timestamp() ticks in whole milliseconds, so the spacing is
 * set); resolves with their ids.
 */
async function enqueueBurst(n: number): Promise<string[]> {
  const template = await admin.enqueue({ workspaceId: ws });
  expect(template.status, template.text).toBe(200);
  const db = cp.plane.store.db;
  const { rows: columns } = await sql<{ name: string }>`
    select column_name as name from information_schema.columns where table_name = 'jobs' and
      column_name not in ('id', 'created_at', 'updated_at', 'idempotency_key') order by ordinal_position`.execute(
    db,
  );
  const copied = sql.join(columns.map((c) => sql.ref(c.name)));
  const { rows } = await sql<{ id: string }>`
    insert into jobs (id, created_at, updated_at, ${copied})
    select gen_random_uuid(), now() - g * interval '7 microseconds', now(), ${copied} from jobs,
      generate_series(2, ${n}) g
    where id = ${template.json.job.id}
    returning id`.execute(db);
  return [template.json.job.id as string, ...rows.map((r) => r.id)];
}

describe(`ListJobs paging (${databaseKind})`, () => {
  it(
    "lists each of 5,000 jobs enqueued in a burst exactly once, also while " +
      "more are enqueued concurrently, though many share a millisecond of " +
      "created_at",
    async () => {
      const started = performance.now();
      const enqueued = await enqueueBurst(5000);
      const enqueueMs = performance.now() - started;

      // The case the page token must order: jobs whose created_at shares a millisecond with
      // another's.
      const { rows } = await sql<{ n: number }>`
      select count(*)::int as n from (
        select date_trunc('milliseconds', created_at) from jobs where workspace_id = ${ws} group by
          1 having count(*) > 1
      ) tied`.execute(cp.plane.store.db);
      expect(rows[0]!.n).toBeGreaterThan(0);

      const listingStarted = performance.now();
      const [listed, more] = await Promise.all([listAll(50), enqueueConcurrently(200, 8)]);
      const listMs = performance.now() - listingStarted;

      expect(new Set(listed).size).toBe(listed.length); // nothing repeated
      const seen = new Set(listed);
      expect(enqueued.filter((id) => !seen.has(id))).toEqual([]); // nothing that existed was skipped
      const known = new Set([...enqueued, ...more]);
      expect(listed.filter((id) => !known.has(id))).toEqual([]);
      // One total order: paged by 500 afterwards, the burst's jobs come in the same order.
      const burst = new Set(enqueued);
      expect((await listAll(500)).filter((id) => burst.has(id))).toEqual(
        listed.filter((id) => burst.has(id)),
      );
      console.log(
        `ListJobs paging (${databaseKind}): enqueued 5000 in ` +
          `${Math.round(enqueueMs)} ms; ${Math.ceil(listed.length / 50)} pages of ` +
          `50 listed in ${Math.round(listMs)} ms while 200 more were enqueued; ` +
          `${rows[0]!.n} milliseconds held two or more jobs`,
      );
    },
    120_000,
  );
});

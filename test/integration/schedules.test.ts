// Schedules over the real server (HTTP/2, mTLS, REST): the create shape, bad input refused by
// field with nothing stored, template secrets sealed and given to each fired job but never shown,
// the overlap policies through run-now, and the ticker firing a seconds-field schedule once per
// due time. Every route here is new, so each test fails on the code before schedules.
import { describe, expect, it } from "vitest";
import { sql } from "kysely";
import { eventually, jobBody, registeredRunner } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { parseRoleGrant } from "../../src/identity/roles.js";
import { useControlPlane, useServiceClients } from "../support/fixture.js";

const id = (name: string) => `spiffe://forelead/services/${name}`;
const cp = useControlPlane({
  grants: [
    parseRoleGrant(`${id("sched-ci")}=enqueue:wsc`),
    parseRoleGrant(`${id("sched-ci2")}=enqueue:wsc`),
    parseRoleGrant(`${id("sched-reader")}=read:wsc`),
  ],
});
const service = useServiceClients(cp);
const { admin } = cp;
let seq = 0;
const ws = () => `sch${++seq}`;

/** A job template: an enqueue body without the fields the schedule sets. */
function template(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  const { workspaceId: _w, apiVersion: _a, ...job } = jobBody(overrides);
  return job;
}

function scheduleBody(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    apiVersion: "v1",
    name: `nightly-${seq}`,
    workspaceId: ws(),
    cron: "0 3 * * *",
    timeZone: "Europe/Berlin",
    job: template(),
    ...overrides,
  };
}

const create = (body: Record<string, unknown>) =>
  admin.rest.request("POST", "/v1/admin/schedules", body);

async function storedSchedules(): Promise<number> {
  const { rows } = await sql<{ n: string }>`select count(*) as n from schedules`.execute(
    cp.plane.store.db,
  );
  return Number(rows[0]!.n);
}

describe(`schedules (${databaseKind})`, () => {
  it("create answers the schedule with its id and next due time; get and list show it", async () => {
    const body = scheduleBody({ missedRuns: "runOnce", overlap: "skip" });
    const reply = await create(body);
    expect(reply.status, reply.text).toBe(200);
    const s = reply.json.schedule;
    expect(s.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(s).toMatchObject({
      name: body.name,
      workspaceId: body.workspaceId,
      cron: "0 3 * * *",
      timeZone: "Europe/Berlin",
      missedRuns: "runOnce",
      overlap: "skip",
      job: { labels: ["linux"], spec: { image: "busybox", argv: ["true"] } },
    });
    // 03:00 in Berlin is 01:00 or 02:00 UTC, whichever offset that day has.
    const next = new Date(s.nextRunAt);
    expect(next.getTime()).toBeGreaterThan(Date.now());
    expect(next.getTime() - Date.now()).toBeLessThanOrEqual(24 * 3600 * 1000);
    expect([1, 2]).toContain(next.getUTCHours());
    const got = await admin.rest.request("GET", `/v1/admin/schedules/${s.id}`);
    expect(got.status, got.text).toBe(200);
    expect(got.json.schedule).toMatchObject({ id: s.id, nextRunAt: s.nextRunAt });
    const list = await admin.rest.request(
      "GET",
      `/v1/admin/schedules?workspaceId=${String(body.workspaceId)}`,
    );
    expect(list.status, list.text).toBe(200);
    expect(list.json.schedules.map((x: { id: string }) => x.id)).toEqual([s.id]);
    // A second schedule of the same name in the workspace is refused.
    const again = await create({ ...body });
    expect(again.status, again.text).toBe(409);
  });

  it.each([
    ["an invalid cron expression", { cron: "61 * * * *" }, /^cron "61 \* \* \* \*"/],
    ["a cron with 4 fields", { cron: "* * * *" }, /^cron .* 5 fields/],
    ["an unknown @name", { cron: "@fortnightly" }, /^cron "@fortnightly"/],
    ["an invalid time zone", { timeZone: "Mars/Olympus" }, /^timeZone "Mars\/Olympus" is not/],
    [
      "a template with idempotencyKey",
      { job: template({ idempotencyKey: "k1" }) },
      /^job\.idempotencyKey is set by the schedule/,
    ],
    [
      "a template with runAt",
      { job: template({ runAt: "2030-01-01T00:00:00Z" }) },
      /^job\.runAt is set by the schedule/,
    ],
    [
      "a template with workspaceId",
      { job: { ...template(), workspaceId: "other" } },
      /^job\.workspaceId is set by the schedule/,
    ],
    ["an invalid workspace", { workspaceId: "no/such" }, /^workspaceId "no\/such"/],
    ["no workspace", { workspaceId: "" }, /^workspaceId/],
    ["no template", { job: undefined }, /^give one of job or pipeline/],
    ["a bad template field", { job: template({ spec: { image: "x" } }) }, /^job: spec\.argv/],
    ["an unknown missedRuns", { missedRuns: "some" }, /^missedRuns "some" is not one of/],
    ["an unknown overlap", { overlap: "queue" }, /^overlap "queue" is not one of/],
    [
      "a pipeline with idempotencyKey",
      {
        job: undefined,
        pipeline: {
          name: "p",
          idempotencyKey: "k",
          steps: [{ name: "a", ...template() }],
        },
      },
      /^pipeline\.idempotencyKey is set by the schedule/,
    ],
  ])("%s is a 400 naming the field, and nothing is stored", async (_what, overrides, message) => {
    const before = await storedSchedules();
    const reply = await create(scheduleBody(overrides));
    expect(reply.status, reply.text).toBe(400);
    expect(reply.json.code).toBe("invalid_argument");
    expect(reply.json.message).toMatch(message);
    expect(await storedSchedules()).toBe(before);
  });

  it("template secrets are sealed, never shown, and given to each fired job's lease", async () => {
    const workspaceId = ws();
    const secret = "s3cr3t-value-for-schedules-9931";
    const reply = await create(
      scheduleBody({
        workspaceId,
        job: template({ secrets: { API_TOKEN: secret }, secretFiles: { "key.pem": secret } }),
      }),
    );
    expect(reply.status, reply.text).toBe(200);
    expect(reply.text).not.toContain(secret);
    const id: string = reply.json.schedule.id;
    expect(reply.json.schedule.secretNames).toEqual(["API_TOKEN", "file:key.pem"]);
    const { rows } = await sql<{ sealed: Buffer }>`
      select sealed from schedule_secrets where schedule_id = ${id}`.execute(cp.plane.store.db);
    expect(rows).toHaveLength(2);
    for (const r of rows) expect(Buffer.from(r.sealed).toString("latin1")).not.toContain(secret);
    const run = await admin.rest.request("POST", `/v1/admin/schedules/${id}/run`, {
      apiVersion: "v1",
    });
    expect(run.status, run.text).toBe(200);
    expect(run.json.fire).toMatchObject({ cause: "manual", outcome: "enqueued" });
    const runner = await registeredRunner(cp, "sr1", workspaceId);
    const claim = await runner.claim();
    expect(claim.status, claim.text).toBe(200);
    expect(claim.json.job.id).toBe(run.json.fire.jobId);
    expect(claim.json.secrets).toEqual({ API_TOKEN: secret });
    expect(claim.json.secretFiles).toEqual({ "key.pem": secret });
    for (const path of [
      `/v1/admin/schedules/${id}`,
      `/v1/admin/schedules?workspaceId=${workspaceId}`,
    ])
      expect((await admin.rest.request("GET", path)).text).not.toContain(secret);
    await runner.close();
  });

  it("pause, resume and delete: a paused schedule shows who paused it; delete removes it", async () => {
    const reply = await create(scheduleBody());
    const id: string = reply.json.schedule.id;
    const paused = await admin.rest.request("POST", `/v1/admin/schedules/${id}/pause`, {
      apiVersion: "v1",
    });
    expect(paused.status, paused.text).toBe(200);
    expect(paused.json.schedule).toMatchObject({ paused: true });
    expect(paused.json.schedule.pausedBy).toContain("test-admin");
    const resumed = await admin.rest.request("POST", `/v1/admin/schedules/${id}/resume`, {
      apiVersion: "v1",
    });
    expect(resumed.json.schedule.paused ?? false).toBe(false);
    const deleted = await admin.rest.request("POST", `/v1/admin/schedules/${id}/delete`, {
      apiVersion: "v1",
    });
    expect(deleted.status, deleted.text).toBe(200);
    const gone = await admin.rest.request("GET", `/v1/admin/schedules/${id}`);
    expect(gone.status, gone.text).toBe(404);
  });

  it("an enqueuer creates schedules in its workspace only and acts on its own; a reader reads", async () => {
    const ci = await service("sched-ci");
    const ci2 = await service("sched-ci2");
    const reader = await service("sched-reader");
    const created = await ci.request(
      "POST",
      "/v1/admin/schedules",
      scheduleBody({ workspaceId: "wsc", name: "scoped" }),
    );
    expect(created.status, created.text).toBe(200);
    const sid: string = created.json.schedule.id;
    expect(created.json.schedule.createdBy).toBe(id("sched-ci"));
    const elsewhere = await ci.request("POST", "/v1/admin/schedules", scheduleBody());
    expect(elsewhere.status, elsewhere.text).toBe(403);
    const pause = (c: typeof ci) =>
      c.request("POST", `/v1/admin/schedules/${sid}/pause`, { apiVersion: "v1" });
    const other = await pause(ci2);
    expect(other.status, other.text).toBe(403);
    expect(other.json.message).toContain(`schedule ${sid}`);
    expect((await pause(ci)).status).toBe(200);
    expect((await reader.request("GET", `/v1/admin/schedules/${sid}`)).status).toBe(200);
    expect((await reader.request("GET", "/v1/admin/schedules?workspaceId=wsc")).status).toBe(200);
    expect((await pause(reader)).status).toBe(403);
  });

  it("overlap skip: a fire while the previous job is unsettled enqueues nothing", async () => {
    const reply = await create(scheduleBody({ cron: "0 0 1 1 *", overlap: "skip" }));
    const id: string = reply.json.schedule.id;
    const run = () =>
      admin.rest.request("POST", `/v1/admin/schedules/${id}/run`, { apiVersion: "v1" });
    const first = await run();
    expect(first.json.fire, first.text).toMatchObject({ outcome: "enqueued" });
    const second = await run();
    expect(second.json.fire, second.text).toMatchObject({ outcome: "skipped_overlap" });
    expect(second.json.fire.jobId).toBeUndefined();
    // Once the previous job settled, the next fire enqueues again.
    expect((await admin.cancel(first.json.fire.jobId)).status).toBe(200);
    const third = await run();
    expect(third.json.fire, third.text).toMatchObject({ outcome: "enqueued" });
    const got = await admin.rest.request("GET", `/v1/admin/schedules/${id}`);
    expect(got.json.schedule.recentFires.map((f: { outcome: string }) => f.outcome)).toEqual([
      "enqueued",
      "skipped_overlap",
      "enqueued",
    ]);
  });

  it("overlap cancelPrevious: the unsettled previous job is cancelled, naming the schedule", async () => {
    const reply = await create(scheduleBody({ cron: "0 0 1 1 *", overlap: "cancelPrevious" }));
    const id: string = reply.json.schedule.id;
    const run = () =>
      admin.rest.request("POST", `/v1/admin/schedules/${id}/run`, { apiVersion: "v1" });
    const first = await run();
    const second = await run();
    expect(second.json.fire, second.text).toMatchObject({
      outcome: "enqueued",
      cancelledId: first.json.fire.jobId,
    });
    const old = await admin.job(first.json.fire.jobId);
    expect(old.json.job.state).toBe("cancelled");
    expect(old.json.job.failure.message).toContain(`schedule ${id}`);
    expect((await admin.job(second.json.fire.jobId)).json.job.state).toBe("queued");
  });

  it("a pipeline template: each fire submits it, step secrets sealed; cancelPrevious cancels it", async () => {
    const secret = "pipeline-step-secret-5512";
    const reply = await create(
      scheduleBody({
        cron: "0 0 1 1 *",
        overlap: "cancelPrevious",
        job: undefined,
        pipeline: {
          name: "build",
          steps: [
            { name: "compile", ...template({ secrets: { TOKEN: secret } }) },
            { name: "test", needs: ["compile"], ...template() },
          ],
        },
      }),
    );
    expect(reply.status, reply.text).toBe(200);
    expect(reply.text).not.toContain(secret);
    expect(reply.json.schedule.secretNames).toEqual(["compile/TOKEN"]);
    expect(reply.json.schedule.pipeline.steps.map((s: { name: string }) => s.name)).toEqual([
      "compile",
      "test",
    ]);
    const sid: string = reply.json.schedule.id;
    const run = () =>
      admin.rest.request("POST", `/v1/admin/schedules/${sid}/run`, { apiVersion: "v1" });
    const first = await run();
    expect(first.json.fire, first.text).toMatchObject({ outcome: "enqueued" });
    const p1 = await admin.rest.request("GET", `/v1/admin/pipelines/${first.json.fire.pipelineId}`);
    expect(p1.json.pipeline).toMatchObject({
      name: "build",
      state: "queued",
      idempotencyKey: first.json.fire.idempotencyKey,
    });
    const second = await run();
    expect(second.json.fire).toMatchObject({
      outcome: "enqueued",
      cancelledId: first.json.fire.pipelineId,
    });
    const after = await admin.rest.request(
      "GET",
      `/v1/admin/pipelines/${first.json.fire.pipelineId}`,
    );
    expect(after.json.pipeline.state).toBe("cancelled");
    const { rows } = await sql<{ n: string }>`
      select count(*) as n from job_secrets s join pipeline_steps p on p.job_id = s.job_id
      where p.pipeline_id = ${second.json.fire.pipelineId}`.execute(cp.plane.store.db);
    expect(Number(rows[0]!.n)).toBe(1);
  });

  it("the ticker fires a seconds-field schedule once per due time, with distinct keys", async () => {
    const workspaceId = ws();
    const reply = await create(
      scheduleBody({ workspaceId, cron: "*/2 * * * * *", timeZone: "UTC" }),
    );
    expect(reply.status, reply.text).toBe(200);
    const id: string = reply.json.schedule.id;
    const fires = await eventually(
      "three fires",
      async () => {
        const got = await admin.rest.request("GET", `/v1/admin/schedules/${id}`);
        const f = (got.json.schedule.recentFires ?? []) as Array<Record<string, string>>;
        return f.length >= 3 ? f : undefined;
      },
      20_000,
      200,
    );
    await admin.rest.request("POST", `/v1/admin/schedules/${id}/pause`, { apiVersion: "v1" });
    const due = fires.map((f) => Date.parse(f.dueAt!)).sort((a, b) => a - b);
    for (const [i, t] of due.entries()) {
      expect(new Date(t).getUTCSeconds() % 2).toBe(0);
      if (i > 0) expect(t - due[i - 1]!).toBe(2000);
    }
    for (const f of fires) expect(f).toMatchObject({ cause: "due", outcome: "enqueued" });
    const keys = new Set(fires.map((f) => f.idempotencyKey));
    expect(keys.size).toBe(fires.length);
    for (const f of fires) {
      const job = await admin.job(f.jobId!);
      expect(job.json.job).toMatchObject({ workspaceId, idempotencyKey: f.idempotencyKey });
    }
  });
});

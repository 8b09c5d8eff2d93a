import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import { sql } from "kysely";
import { parseRoleGrant } from "../../src/identity/roles.js";
import { eventually, registeredRunner, type RunnerActor } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane, useServiceClients } from "../support/fixture.js";

const id = (name: string) => `spiffe://forelead/services/${name}`;
const cp = useControlPlane({
  grants: [
    parseRoleGrant(`${id("ci")}=enqueue:w1`),
    parseRoleGrant(`${id("reader")}=read:w1`),
    parseRoleGrant(`${id("other")}=read:w2`),
  ],
});
const { admin } = cp;
const service = useServiceClients(cp);

const post = (path: string, body: Record<string, unknown> = {}) =>
  admin.rest.request("POST", path, { apiVersion: "v1", ...body });
const job = { labels: ["linux"], spec: { image: "busybox", argv: ["true"], timeoutSeconds: 60 } };
const step = (name: string, needs: string[] = [], extra: Record<string, unknown> = {}) => ({
  name,
  needs,
  ...job,
  ...extra,
});
const diamond = (extra: Record<string, Record<string, unknown>> = {}) => [
  step("A", [], extra.A),
  step("B", ["A"], extra.B),
  step("C", ["A"], extra.C),
  step("D", ["B", "C"], extra.D),
];

interface StepJson {
  name: string;
  state: string;
  attempts?: number;
  jobId?: string;
}
interface PipelineJson {
  id: string;
  state: string;
  steps: StepJson[];
}

async function submit(
  workspaceId: string,
  steps: unknown[],
  name = "diamond",
): Promise<PipelineJson> {
  const reply = await post("/v1/admin/pipelines", { workspaceId, name, steps });
  expect(reply.status, reply.text).toBe(200);
  return reply.json.pipeline as PipelineJson;
}
async function pipeline(pid: string): Promise<PipelineJson> {
  const reply = await admin.rest.request("GET", `/v1/admin/pipelines/${pid}`);
  expect(reply.status, reply.text).toBe(200);
  return reply.json.pipeline as PipelineJson;
}
const states = (p: PipelineJson) => Object.fromEntries(p.steps.map((s) => [s.name, s.state]));
const stepJob = (p: PipelineJson, name: string) => p.steps.find((s) => s.name === name)!.jobId!;

/** Claims without waiting: the job id leased, or undefined when nothing is claimable. */
async function claimNow(
  runner: RunnerActor,
): Promise<{ jobId: string; token: string } | undefined> {
  const reply = await runner.claim({ waitSeconds: 0 });
  if (reply.status === 204) return undefined;
  expect(reply.status, reply.text).toBe(200);
  return { jobId: reply.json.job.id as string, token: reply.json.token as string };
}
async function complete(
  runner: RunnerActor,
  lease: { jobId: string; token: string },
  outcome = "succeeded",
) {
  const reply = await runner.complete(
    lease.jobId,
    lease.token,
    outcome === "failed"
      ? { outcome, exitCode: 1, error: { code: "exit_code", message: "exited 1" } }
      : { outcome },
  );
  expect(reply.status, reply.text).toBe(200);
}
async function events(
  workspaceId: string,
): Promise<Array<{ type: string; jobId?: string; data?: Record<string, unknown> }>> {
  const reply = await admin.rest.request(
    "GET",
    `/v1/admin/events?workspaceId=` +
      `${workspaceId}&types=pipeline.queued&types=pipeline.settled&types=step.queued&types=step.succeeded&types=step.failed&types=step.skipped&types=step.cancelled`,
  );
  expect(reply.status, reply.text).toBe(200);
  return reply.text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l));
}
const freshWorkspace = () => `p${randomUUID().slice(0, 8)}`;

describe(`pipelines (${databaseKind})`, () => {
  it(
    "a diamond runs in order: B and C only after A, D only after both, and " +
      "the pipeline settles succeeded with its events",
    async () => {
      const w = freshWorkspace();
      const runner = await registeredRunner(cp, "r-diamond", w, { slots: 4 });
      const p = await submit(w, diamond());
      expect(states(p)).toEqual({ A: "queued", B: "pending", C: "pending", D: "pending" });
      const a = (await claimNow(runner))!;
      expect(a.jobId).toBe(stepJob(p, "A"));
      expect(await claimNow(runner)).toBeUndefined();
      expect(states(await pipeline(p.id))).toEqual({
        A: "running",
        B: "pending",
        C: "pending",
        D: "pending",
      });
      await complete(runner, a);
      const afterA = await pipeline(p.id);
      expect(states(afterA)).toEqual({ A: "succeeded", B: "queued", C: "queued", D: "pending" });
      expect(afterA.state).toBe("running");
      const first = (await claimNow(runner))!;
      const second = (await claimNow(runner))!;
      expect(new Set([first.jobId, second.jobId])).toEqual(
        new Set([stepJob(afterA, "B"), stepJob(afterA, "C")]),
      );
      expect(await claimNow(runner)).toBeUndefined();
      await complete(runner, first);
      expect(await claimNow(runner)).toBeUndefined(); // D waits for the other one
      await complete(runner, second);
      const d = (await claimNow(runner))!;
      expect(d.jobId).toBe(stepJob(await pipeline(p.id), "D"));
      await complete(runner, d);
      const done = await pipeline(p.id);
      expect(done.state).toBe("succeeded");
      expect(states(done)).toEqual({
        A: "succeeded",
        B: "succeeded",
        C: "succeeded",
        D: "succeeded",
      });
      expect(done.steps.every((s) => s.attempts === 1)).toBe(true);
      const types = (await events(w)).map(
        (e) => `${e.type}${e.data?.step ? `:${String(e.data.step)}` : ""}`,
      );
      expect(types[0]).toBe("pipeline.queued");
      expect(types.at(-1)).toBe("pipeline.settled");
      expect(types.indexOf("step.succeeded:A")).toBeLessThan(types.indexOf("step.queued:B"));
      expect(types.indexOf("step.queued:D")).toBeGreaterThan(
        Math.max(types.indexOf("step.succeeded:B"), types.indexOf("step.succeeded:C")),
      );
      await runner.close();
    },
  );

  it("a failed B skips D; resume re-runs B and D only, keeping A and C and their jobs", async () => {
    const w = freshWorkspace();
    const runner = await registeredRunner(cp, "r-resume", w, { slots: 4 });
    const p = await submit(w, diamond({ B: { maxAttempts: 1 } }));
    await complete(runner, (await claimNow(runner))!);
    const mid = await pipeline(p.id);
    for (let i = 0; i < 2; i++) {
      const lease = (await claimNow(runner))!;
      await complete(runner, lease, lease.jobId === stepJob(mid, "B") ? "failed" : "succeeded");
    }
    const failed = await pipeline(p.id);
    expect(states(failed)).toEqual({ A: "succeeded", B: "failed", C: "succeeded", D: "skipped" });
    expect(failed.state).toBe("failed");
    expect(await claimNow(runner)).toBeUndefined();
    const resumed = await post(`/v1/admin/pipelines/${p.id}/resume`);
    expect(resumed.status, resumed.text).toBe(200);
    const again = resumed.json.pipeline as PipelineJson;
    expect(states(again)).toEqual({ A: "succeeded", B: "queued", C: "succeeded", D: "pending" });
    expect(stepJob(again, "A")).toBe(stepJob(failed, "A"));
    expect(stepJob(again, "C")).toBe(stepJob(failed, "C"));
    expect(stepJob(again, "B")).not.toBe(stepJob(failed, "B"));
    const b = (await claimNow(runner))!;
    expect(b.jobId).toBe(stepJob(again, "B"));
    await complete(runner, b);
    const d = (await claimNow(runner))!;
    await complete(runner, d);
    expect(await claimNow(runner)).toBeUndefined();
    const done = await pipeline(p.id);
    expect(done.state).toBe("succeeded");
    expect(Object.fromEntries(done.steps.map((s) => [s.name, s.attempts]))).toEqual({
      A: 1,
      B: 2,
      C: 1,
      D: 1,
    });
    // A running pipeline is not resumed; an unknown fromStep is named.
    const p2 = await submit(w, [step("x")]);
    const early = await post(`/v1/admin/pipelines/${p2.id}/resume`);
    expect(early.status).toBe(400);
    expect(early.json.message).toContain("is still queued; resume it once it settled");
    await complete(runner, (await claimNow(runner))!);
    const unknown = await post(`/v1/admin/pipelines/${p2.id}/resume`, { fromStep: "nope" });
    expect(unknown.status).toBe(400);
    expect(unknown.json.message).toBe(
      `fromStep "nope" is not a step of pipeline ${p2.id}; its steps are x`,
    );
    await runner.close();
  });

  it(
    "a failure with allowFailure lets its dependents run; resume fromStep " +
      "re-runs that step and everything downstream",
    async () => {
      const w = freshWorkspace();
      const runner = await registeredRunner(cp, "r-allow", w, { slots: 4 });
      const p = await submit(w, [
        step("A", [], { allowFailure: true, maxAttempts: 1 }),
        step("B", ["A"]),
        step("C"),
      ]);
      for (let i = 0; i < 2; i++) {
        const lease = (await claimNow(runner))!;
        await complete(runner, lease, lease.jobId === stepJob(p, "A") ? "failed" : "succeeded");
      }
      await complete(runner, (await claimNow(runner))!);
      const done = await pipeline(p.id);
      expect(states(done)).toEqual({ A: "failed", B: "succeeded", C: "succeeded" });
      expect(done.state).toBe("succeeded");
      const p2 = await submit(w, [step("A"), step("B", ["A"]), step("C")], "from");
      for (let i = 0; i < 3; i++) await complete(runner, (await claimNow(runner))!);
      expect((await pipeline(p2.id)).state).toBe("succeeded");
      const resumed = await post(`/v1/admin/pipelines/${p2.id}/resume`, { fromStep: "A" });
      expect(resumed.status, resumed.text).toBe(200);
      expect(states(resumed.json.pipeline)).toEqual({ A: "queued", B: "pending", C: "succeeded" });
      await runner.close();
    },
  );

  it(
    "cancel mid-run: pending steps are cancelled, the running job is asked " +
      "to stop, and the pipeline settles cancelled when it does",
    async () => {
      const w = freshWorkspace();
      const runner = await registeredRunner(cp, "r-cancel", w, { slots: 4 });
      const p = await submit(w, diamond());
      const a = (await claimNow(runner))!;
      const cancel = await post(`/v1/admin/pipelines/${p.id}/cancel`);
      expect(cancel.status, cancel.text).toBe(200);
      const cancelled = cancel.json.pipeline as PipelineJson & { cancelRequested: boolean };
      expect(cancelled.cancelRequested).toBe(true);
      expect(states(cancelled)).toEqual({
        A: "running",
        B: "cancelled",
        C: "cancelled",
        D: "cancelled",
      });
      const renew = await runner.renew(a.jobId, a.token);
      expect(renew.json.cancelRequested).toBe(true);
      await complete(runner, a, "cancelled");
      const done = await pipeline(p.id);
      expect(done.state).toBe("cancelled");
      expect(states(done).A).toBe("cancelled");
      expect(await claimNow(runner)).toBeUndefined();
      // A queued step's job is cancelled at once, and so is the pipeline.
      const q = await submit(w, [step("only")]);
      const qc = await post(`/v1/admin/pipelines/${q.id}/cancel`);
      expect(qc.json.pipeline.state).toBe("cancelled");
      expect((await admin.job(stepJob(q, "only"))).json.job.state).toBe("cancelled");
      await runner.close();
    },
  );

  it(
    "a step whose job settles on a path that moves no pipeline (its runner " +
      "retired while the cancel was asked) is moved by the sweep",
    async () => {
      const w = freshWorkspace();
      const runner = await registeredRunner(cp, "r-retired", w, { slots: 4 });
      const p = await submit(w, diamond());
      const a = (await claimNow(runner))!;
      expect((await post(`/v1/admin/pipelines/${p.id}/cancel`)).status).toBe(200);
      // The runner never completes: it is retired, which releases its job (cancel asked: cancelled).
      const retire = await post(`/v1/admin/runners/r-retired/retire`, {
        workspaceId: w,
        reason: "drill",
      });
      expect(retire.status, retire.text).toBe(200);
      expect(retire.json.releasedJobIds).toEqual([a.jobId]);
      expect((await admin.job(a.jobId)).json.job.state).toBe("cancelled");
      const done = await eventually(`pipeline ${p.id} to settle`, async () => {
        const now = await pipeline(p.id);
        return now.state === "cancelled" ? now : undefined;
      });
      expect(states(done)).toEqual({
        A: "cancelled",
        B: "cancelled",
        C: "cancelled",
        D: "cancelled",
      });
      expect((await events(w)).filter((e) => e.type === "pipeline.settled")).toHaveLength(1);
      await runner.close();
    },
  );

  it(
    "a step's secrets reach its job's lease only, never a view or an event; " +
      "a resumed step gets them again",
    async () => {
      const w = freshWorkspace();
      const runner = await registeredRunner(cp, "r-secrets", w);
      const value = "pipeline-secret-value-0123";
      const p = await submit(w, [
        step("A", [], {
          secrets: { TOKEN: value },
          secretFiles: { "key.pem": value },
          maxAttempts: 1,
        }),
      ]);
      const claim = await runner.claim({ waitSeconds: 0 });
      expect(claim.json.secrets).toEqual({ TOKEN: value });
      expect(claim.json.secretFiles).toEqual({ "key.pem": value });
      await complete(runner, { jobId: claim.json.job.id, token: claim.json.token }, "failed");
      const resumed = await post(`/v1/admin/pipelines/${p.id}/resume`);
      expect(resumed.status, resumed.text).toBe(200);
      const again = await runner.claim({ waitSeconds: 0 });
      expect(again.json.job.id).toBe(stepJob(resumed.json.pipeline, "A"));
      expect(again.json.secrets).toEqual({ TOKEN: value });
      await complete(runner, { jobId: again.json.job.id, token: again.json.token });
      const seen = [
        (await admin.rest.request("GET", `/v1/admin/pipelines/${p.id}`)).text,
        (await admin.job(again.json.job.id)).text,
        JSON.stringify(await events(w)),
      ];
      for (const text of seen) expect(text).not.toContain(value);
      await runner.close();
    },
  );

  it(
    "a step whose lease expires with no attempts left fails in the sweep's " +
      "transaction, and its dependents are skipped",
    async () => {
      const w = freshWorkspace();
      const runner = await registeredRunner(cp, "r-expiry", w);
      const p = await submit(w, [step("A", [], { maxAttempts: 1 }), step("B", ["A"])]);
      const a = (await claimNow(runner))!;
      await sql`update jobs set lease_expires_at = now() - interval '1 second' where id = ${a.jobId}`.execute(
        cp.plane.store.db,
      );
      expect(await claimNow(runner)).toBeUndefined(); // the claim sweeps the expired lease first
      const done = await pipeline(p.id);
      expect(states(done)).toEqual({ A: "failed", B: "skipped" });
      expect(done.state).toBe("failed");
      expect((await admin.job(a.jobId)).json.job.failure.reason).toBe("lease_lost");
      await runner.close();
    },
  );

  it("every bad graph is refused with 400 naming the cause", async () => {
    const refused = async (steps: unknown[], message: string) => {
      const reply = await post("/v1/admin/pipelines", { workspaceId: "w1", name: "bad", steps });
      expect(reply.status, reply.text).toBe(400);
      expect(reply.json.message).toBe(message);
    };
    await refused(
      [step("a", ["c"]), step("b", ["a"]), step("c", ["b"])],
      "the steps form a cycle: a → c → b → a (each needs the next); a step cannot (transitively) need itself",
    );
    await refused([step("a", ["a"])], "steps[0] (a) needs itself: cycle a → a");
    await refused([step("a", ["zz"])], 'steps[0] (a) needs[0] names unknown step "zz"');
    await refused(
      [step("a"), step("b", [], { inputs: [{ step: "zz", name: "out.txt" }] })],
      'steps[1] (b) inputs[0] names unknown step "zz"',
    );
    await refused(
      [step("a"), step("b", [], { inputs: [{ step: "a", name: "out.txt" }] })],
      'steps[1] (b) inputs[0] is from step "a", which b does not need (directly or through its needs); add it to needs',
    );
    await refused(
      [step("a"), step("b", ["a"], { inputs: [{ step: "a" }] })],
      'steps[1] (b) inputs[0] needs exactly one of name (an artifact\'s name) or glob (e.g. "dist/**")',
    );
    await refused(
      [step("a"), step("b", ["a"], { inputs: [{ step: "a", name: ".." }] })],
      'steps[1] (b) inputs[0].name ".." has a ".." segment',
    );
    await refused(
      [step("a"), step("b", ["a"], { inputs: [{ step: "a", glob: "../*" }] })],
      'steps[1] (b) inputs[0].glob "../*" has a ".." segment',
    );
    await refused(
      [step("a"), step("b", ["a"], { inputs: [{ step: "a", glob: "/etc/*" }] })],
      'steps[1] (b) inputs[0].glob "/etc/*" is an absolute path; names are relative to the output directory',
    );
    await refused(
      [step("a"), step("b", ["a"], { inputs: [{ step: "a", name: "out\u202Etxt.exe" }] })],
      'steps[1] (b) inputs[0].name "out\u202etxt.exe" holds U+202E, an invisible or bidirectional control character',
    );
    await refused(
      [step("a"), step("a")],
      'steps[1].name "a" is a duplicate: step names are unique in a pipeline',
    );
    await refused([], "steps is empty: a pipeline needs at least one step");
    await refused(
      Array.from({ length: 257 }, (_, i) => step(`s${i}`)),
      "the pipeline has 257 steps; at most 256 are allowed",
    );
    await refused(
      [step("a b")],
      'steps[0].name "a b" is not a step name: 1 to 63 characters of A-Z a-z ' +
        "0-9 . _ -, starting with a letter or digit",
    );
    await refused(
      [step("a"), step("b", ["a"], { spec: { image: "busybox", argv: [] } })],
      'steps[1] (b): spec.argv is required: the command as an array, e.g. ["sh", "-c", "make test"]',
    );
    // A transitive input is fine: c needs b needs a.
    const ok = await post("/v1/admin/pipelines", {
      workspaceId: "w1",
      name: "ok",
      steps: [
        step("a"),
        step("b", ["a"]),
        step("c", ["b"], { inputs: [{ step: "a", glob: "dist/**" }] }),
      ],
    });
    expect(ok.status, ok.text).toBe(200);
    await post(`/v1/admin/pipelines/${ok.json.pipeline.id}/cancel`);
  });

  it("the same idempotencyKey returns the pipeline stored first; a different request with it is 409", async () => {
    const w = freshWorkspace();
    const body = { workspaceId: w, name: "idem", idempotencyKey: "k1", steps: [step("a")] };
    const first = await post("/v1/admin/pipelines", body);
    const again = await post("/v1/admin/pipelines", body);
    expect(again.json.pipeline.id).toBe(first.json.pipeline.id);
    const other = await post("/v1/admin/pipelines", { ...body, steps: [step("b")] });
    expect(other.status).toBe(409);
    const list = await admin.rest.request("GET", `/v1/admin/pipelines?workspaceId=${w}&pageSize=1`);
    expect(list.json.pipelines.map((p: PipelineJson) => p.id)).toEqual([first.json.pipeline.id]);
    expect(list.json.nextPageToken ?? "").toBe("");
  });

  it("a listing pages newest first with the job listing's token rule and filters by state", async () => {
    const w = freshWorkspace();
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push((await submit(w, [step("a")], `p${i}`)).id);
    await post(`/v1/admin/pipelines/${ids[1]}/cancel`);
    const page1 = await admin.rest.request(
      "GET",
      `/v1/admin/pipelines?workspaceId=${w}&pageSize=2`,
    );
    const page2 = await admin.rest.request(
      "GET",
      `/v1/admin/pipelines?workspaceId=${w}&pageSize=2&pageToken=${page1.json.nextPageToken}`,
    );
    expect(
      [...page1.json.pipelines, ...page2.json.pipelines].map((p: PipelineJson) => p.id),
    ).toEqual([...ids].reverse());
    const cancelled = await admin.rest.request(
      "GET",
      `/v1/admin/pipelines?workspaceId=${w}&state=cancelled`,
    );
    expect(cancelled.json.pipelines.map((p: PipelineJson) => p.id)).toEqual([ids[1]]);
    const bad = await admin.rest.request(
      "GET",
      `/v1/admin/pipelines?workspaceId=${w}&pageToken=nope`,
    );
    expect(bad.status).toBe(400);
    expect(bad.json.message).toBe(
      "pageToken is not a token from a previous reply; start again without it",
    );
    for (const pid of ids) await post(`/v1/admin/pipelines/${pid}/cancel`);
  });

  it(
    "roles: enqueue:w1 submits and cancels in w1 only; read:w1 views but " +
      "cannot submit; read:w2 cannot view w1's pipeline",
    async () => {
      const ci = await service("ci");
      const reader = await service("reader");
      const other = await service("other");
      const body = { apiVersion: "v1", name: "roles", steps: [step("a")] };
      const mine = await ci.request("POST", "/v1/admin/pipelines", { ...body, workspaceId: "w1" });
      expect(mine.status, mine.text).toBe(200);
      const pid = mine.json.pipeline.id as string;
      const w2 = await ci.request("POST", "/v1/admin/pipelines", { ...body, workspaceId: "w2" });
      expect(w2.status).toBe(403);
      expect(w2.json.message).toContain('not in workspace "w2"; grant it with --grant');
      expect((await reader.request("GET", `/v1/admin/pipelines/${pid}`)).status).toBe(200);
      expect(
        (await reader.request("POST", "/v1/admin/pipelines", { ...body, workspaceId: "w1" }))
          .status,
      ).toBe(403);
      expect(
        (await reader.request("POST", `/v1/admin/pipelines/${pid}/cancel`, { apiVersion: "v1" }))
          .status,
      ).toBe(403);
      const denied = await other.request("GET", `/v1/admin/pipelines/${pid}`);
      expect(denied.status).toBe(403);
      expect(denied.json.message).toContain(`not on pipeline ${pid} in workspace "w1"`);
      expect(
        (await ci.request("POST", `/v1/admin/pipelines/${pid}/cancel`, { apiVersion: "v1" }))
          .status,
      ).toBe(200);
    },
  );

  it(
    "retry enqueues a new job with the same spec, linked both ways; a job is " +
      "retried once, and only once it settled",
    async () => {
      const w = freshWorkspace();
      const runner = await registeredRunner(cp, "r-retry", w);
      const enq = await admin.enqueue({
        workspaceId: w,
        maxAttempts: 1,
        spec: {
          image: "busybox",
          argv: ["sh", "-c", "exit 3"],
          env: { A: "1" },
          timeoutSeconds: 60,
        },
      });
      const oldId = enq.json.job.id as string;
      const early = await post(`/v1/admin/jobs/${oldId}/retry`);
      expect(early.status).toBe(400);
      expect(early.json.message).toBe(
        `job ${oldId} is still queued; retry it once it settled (or cancel it first)`,
      );
      await complete(runner, (await claimNow(runner))!, "failed");
      const retry = await post(`/v1/admin/jobs/${oldId}/retry`);
      expect(retry.status, retry.text).toBe(200);
      const fresh = retry.json.job;
      expect(fresh.retryOf).toBe(oldId);
      expect(fresh.state).toBe("queued");
      expect(fresh.spec).toEqual(enq.json.job.spec);
      expect(fresh.maxAttempts).toBe(1);
      expect((await admin.job(oldId)).json.job.retriedBy).toBe(fresh.id);
      expect((await admin.job(fresh.id)).json.job.retryOf).toBe(oldId);
      const twice = await post(`/v1/admin/jobs/${oldId}/retry`);
      expect(twice.status).toBe(409);
      expect(twice.json.message).toBe(
        `job ${oldId} was already retried by job ${fresh.id}; retry that one to run it again`,
      );
      expect((await claimNow(runner))!.jobId).toBe(fresh.id);
      await runner.close();
    },
  );
});

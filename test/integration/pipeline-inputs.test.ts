import { createHash } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually, registeredRunner } from "../support/actors.js";
import { restUploads } from "../support/artifacts.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import {
  executorsUnderTest,
  specFor,
  startTestRunner,
  type ExecutorKind,
  type TestRunner,
} from "../support/runner-agent.js";

const cp = useControlPlane();
const { admin } = cp;
const executors = await executorsUnderTest();
const post = (path: string, body: Record<string, unknown> = {}) =>
  admin.rest.request("POST", path, { apiVersion: "v1", ...body });
const sha = (text: string) => createHash("sha256").update(text).digest("hex");

interface StepJson {
  name: string;
  state: string;
  jobId?: string;
}

describe.each(executors)(
  `pipeline inputs, %s executor (${databaseKind})`,
  (executor: ExecutorKind) => {
    const ws = `pi-${executor}`;
    let runner: TestRunner;
    beforeAll(async () => {
      runner = await startTestRunner(cp, {
        runnerId: `r-inputs-${executor}`,
        workspaceId: ws,
        executor,
        slots: 2,
      });
    });
    afterAll(async () => runner?.close());

    // Each job prints the sha256 of the inputs it sees, tries to write one, and leaves its own
    // output.
    const sh = (script: string) => specFor(executor, { argv: ["sh", "-c", script] });
    const inDir = executor === "docker" ? "/input/files" : "input/files";
    const outDir = executor === "docker" ? "/output" : "output";
    const tryWrite = (file: string) =>
      `(echo tamper >> ${inDir}/${file}) 2>/dev/null && echo WRITABLE || echo READONLY`;

    it(
      "a diamond passes A's output to B and C and theirs to D, read-only, each " +
        "checked by digest inside the job",
      async () => {
        const step = (name: string, needs: string[], script: string, inputs: unknown[] = []) => ({
          name,
          needs,
          labels: ["linux"],
          spec: sh(script),
          inputs,
        });
        const reply = await post("/v1/admin/pipelines", {
          workspaceId: ws,
          name: "inputs",
          steps: [
            step("A", [], `printf alpha > ${outDir}/a.txt`),
            step(
              "B",
              ["A"],
              `sha256sum ${inDir}/A/a.txt; ${tryWrite("A/a.txt")}; printf beta > ${outDir}/b.txt`,
              [{ step: "A", name: "a.txt" }],
            ),
            step("C", ["A"], `sha256sum ${inDir}/A/a.txt; printf gamma > ${outDir}/c.txt`, [
              { step: "A", glob: "*.txt" },
            ]),
            step(
              "D",
              ["B", "C"],
              `sha256sum ${inDir}/B/b.txt ${inDir}/C/c.txt ${inDir}/A/a.txt 2>&1; ${tryWrite("B/b.txt")}`,
              [
                { step: "B", name: "b.txt" },
                { step: "C", name: "c.txt" },
              ],
            ),
          ],
        });
        expect(reply.status, reply.text).toBe(200);
        const pid = reply.json.pipeline.id as string;
        const done = await eventually(
          "the pipeline to settle",
          async () => {
            const p = (await admin.rest.request("GET", `/v1/admin/pipelines/${pid}`)).json.pipeline;
            return ["succeeded", "failed", "cancelled"].includes(p.state) ? p : undefined;
          },
          60_000,
        );
        expect(done.state, JSON.stringify(done)).toBe("succeeded");
        const jobOf = (name: string) =>
          (done.steps as StepJson[]).find((s) => s.name === name)!.jobId!;
        const artifact = async (step: string, name: string) => {
          const listed = await admin.rest.request("GET", `/v1/admin/jobs/${jobOf(step)}/artifacts`);
          return (listed.json.artifacts as Array<{ name: string; digest: string }>)
            .find((a) => a.name === name)!
            .digest.replace("sha256:", "");
        };
        const lines = (step: string) => runner.recorded.job(jobOf(step)).logs.map((l) => l.text);
        const a = await artifact("A", "a.txt");
        expect(a).toBe(sha("alpha"));
        const seen = (step: string) => `${step}'s log: ${JSON.stringify(lines(step))}`;
        expect(lines("B"), seen("B")).toContain(`${a}  ${inDir}/A/a.txt`);
        expect(lines("B"), seen("B")).toContain("READONLY");
        expect(lines("C"), seen("C")).toContain(`${a}  ${inDir}/A/a.txt`);
        expect(lines("D"), seen("D")).toContain(
          `${await artifact("B", "b.txt")}  ${inDir}/B/b.txt`,
        );
        expect(lines("D"), seen("D")).toContain(
          `${await artifact("C", "c.txt")}  ${inDir}/C/c.txt`,
        );
        // D did not name A's output: it is not there.
        expect(
          lines("D").some((l) => l.includes(`${inDir}/A/a.txt`) && /No such file/.test(l)),
        ).toBe(true);
        expect(lines("D")).toContain("READONLY");

        // Another job's lease cannot read A's artifact: 404 for a job that does not name it, 409 for
        // a dead token.
        const other = await registeredRunner(cp, `r-other-${executor}`, `${ws}-x`);
        const enq = await admin.enqueue({ workspaceId: `${ws}-x` });
        const claim = await other.claim({ waitSeconds: 5 });
        expect(claim.json.job.id).toBe(enq.json.job.id);
        const ask = (token: string) =>
          other.rest.request("POST", "/v1/runner/inputs/content", {
            apiVersion: "v1",
            jobId: claim.json.job.id,
            leaseToken: token,
            fromJobId: jobOf("A"),
            name: "a.txt",
          });
        const refused = await ask(claim.json.token);
        expect(refused.status).toBe(404);
        expect(refused.json.message).toBe(
          `job ${claim.json.job.id} has no input "a.txt" from job ${jobOf("A")}; ` +
            `its lease lists the inputs it may read`,
        );
        expect((await ask("not-the-token")).status).toBe(409);
        await other.close();
      },
      120_000,
    );
  },
);

// A claim is one statement, `select …, <is it a step's job> from forelead_claim(…)`. The function
// is volatile: each statement in it sees what has committed by then. The outer select sees only
// what had committed when it began. So a claim could begin, wait on its runner's row (held by
// another request of that runner), and then lease a step's job whose enqueue committed while it
// waited, reading it as "not a step's job". The job was leased without its inputs and ran without
// them. Postgres only: the embedded database runs one statement at a time, so it has no such wait.
describe.skipIf(databaseKind !== "postgres")(
  "a claim that waits on its runner's row while a step's job is enqueued (postgres)",
  () => {
    it("leases the step's job with its inputs", async () => {
      const ws = "pi-wait";
      const step = (name: string, needs: string[], inputs: unknown[] = []) => ({
        name,
        needs,
        labels: ["linux"],
        spec: { image: "busybox", argv: ["true"], timeoutSeconds: 60 },
        inputs,
      });
      const first = await registeredRunner(cp, "r-wait-a", ws);
      const waiting = await registeredRunner(cp, "r-wait-b", ws);
      // Two transactions holding rows, so the test decides the order the control plane's statements
      // reach them.
      const [pipelineRow, runnerRow] = [
        new pg.Client({ connectionString: cp.database.location }),
        new pg.Client({ connectionString: cp.database.location }),
      ];
      await Promise.all([pipelineRow.connect(), runnerRow.connect()]);
      const blocksSomeone = (c: pg.Client, what: string) =>
        eventually(
          what,
          async () =>
            (
              await c.query(
                "select 1 from pg_stat_activity where pg_backend_pid() = any(pg_blocking_pids(pid))",
              )
            ).rows.length > 0 || undefined,
        );
      try {
        const made = await post("/v1/admin/pipelines", {
          workspaceId: ws,
          name: "wait",
          steps: [step("A", []), step("B", ["A"], [{ step: "A", name: "a.txt" }])],
        });
        expect(made.status, made.text).toBe(200);
        const a = await first.claim({ waitSeconds: 5 });
        expect(a.status, a.text).toBe(200);
        const leased = {
          runner: first,
          jobId: a.json.job.id as string,
          token: a.json.token as string,
        };
        const up = restUploads(leased);
        const bytes = Buffer.from("alpha");
        const opened = await up.open("a.txt", bytes.length, `sha256:${sha("alpha")}`);
        expect(opened.status, opened.text).toBe(200);
        expect((await up.put(opened.json.uploadId, 0, bytes)).status).toBe(200);
        const artifact = (await up.finalize(opened.json.uploadId)).json;

        // A's completion begins (B's job will be due from then: claimable_at is its transaction's
        // now()) and waits for the pipeline's row.
        await pipelineRow.query("begin");
        expect(
          (
            await pipelineRow.query("select 1 from pipelines where id = $1 for update", [
              made.json.pipeline.id,
            ])
          ).rowCount,
        ).toBe(1);
        const completed = first.complete(leased.jobId, leased.token, {
          artifacts: [
            { name: artifact.name, digest: artifact.digest, size: artifact.size, mediaType: "" },
          ],
        });
        await blocksSomeone(pipelineRow, "A's completion to wait on the pipeline's row");
        // The other runner's claim begins, before B's job exists, and waits for its runner's row.
        await runnerRow.query("begin");
        expect(
          (
            await runnerRow.query(
              "select 1 from runners where workspace_id = $1 and runner_id = $2 for update",
              [ws, "r-wait-b"],
            )
          ).rowCount,
        ).toBe(1);
        const claim = waiting.claim({ waitSeconds: 10 });
        await blocksSomeone(runnerRow, "the claim to wait on its runner's row");
        // A's completion goes on: A succeeds, B's job is enqueued with A's artifact as its input,
        // and that commits.
        await pipelineRow.query("commit");
        const done = await completed;
        expect(done.status, done.text).toBe(200);
        // Then the claim goes on, and finds B's job.
        await runnerRow.query("commit");

        const b = await claim;
        expect(b.status, b.text).toBe(200);
        const pipeline = (
          await admin.rest.request("GET", `/v1/admin/pipelines/${made.json.pipeline.id}`)
        ).json.pipeline;
        expect(b.json.job.id).toBe(
          (pipeline.steps as StepJson[]).find((s) => s.name === "B")!.jobId,
        );
        expect(b.json.inputs, b.text).toEqual([
          {
            name: "a.txt",
            digest: artifact.digest,
            size: String(bytes.length),
            fromStep: "A",
            fromJobId: leased.jobId,
          },
        ]);
      } finally {
        for (const c of [pipelineRow, runnerRow]) {
          await c.query("rollback").catch(() => undefined);
          await c.end();
        }
        await Promise.all([first.close(), waiting.close()]);
      }
    }, 60_000);
  },
);

describe(`a declared input that matches nothing (${databaseKind})`, () => {
  it("fails its step with missing_input, never leased, unless the input is optional", async () => {
    const ws = "pi-missing";
    const step = (name: string, needs: string[], inputs: unknown[] = []) => ({
      name,
      needs,
      labels: ["linux"],
      spec: { image: "busybox", argv: ["true"], timeoutSeconds: 60 },
      inputs,
    });
    const runner = await registeredRunner(cp, "r-missing", ws);
    const made = await post("/v1/admin/pipelines", {
      workspaceId: ws,
      name: "missing",
      steps: [
        step("A", []),
        step("B", ["A"], [{ step: "A", name: "nothing.txt" }]),
        step("C", ["A"], [{ step: "A", glob: "dist/**", optional: true }]),
      ],
    });
    expect(made.status, made.text).toBe(200);
    const pid = made.json.pipeline.id as string;
    const a = await runner.claim({ waitSeconds: 5 });
    expect(a.status, a.text).toBe(200);
    expect((await runner.complete(a.json.job.id, a.json.token)).status).toBe(200);
    const steps = async () =>
      (await admin.rest.request("GET", `/v1/admin/pipelines/${pid}`)).json.pipeline.steps as Array<
        StepJson & { inputs: unknown[] }
      >;
    const b = (await steps()).find((s) => s.name === "B")!;
    expect(b.state).toBe("failed");
    const job = (await admin.job(b.jobId!)).json.job;
    expect(job).toMatchObject({
      state: "failed",
      failure: {
        reason: "missing_input",
        message:
          'no artifact matches the input(s) name "nothing.txt" from step A; the step did ' +
          "not run (declare an input optional: true to run without it)",
      },
    });
    expect(job.attempts ?? 0).toBe(0);
    // The optional input matched nothing too: C runs without it.
    const c = (await steps()).find((s) => s.name === "C")!;
    expect(c.state).toBe("queued");
    expect(c.inputs).toEqual([{ step: "A", glob: "dist/**", optional: true }]);
    const claimed = await runner.claim({ waitSeconds: 5 });
    expect(claimed.json.job.id).toBe(c.jobId);
    expect(claimed.json.inputs ?? []).toEqual([]);
    await runner.close();
  });
});

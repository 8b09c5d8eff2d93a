import "reflect-metadata";
import { describe, expect, it } from "vitest";
import { leasedJob } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { runnerJobs } from "../support/runner-jobs.js";
import { executorsUnderTest, testImage, type TestRunner } from "../support/runner-agent.js";
import { readEntries } from "../support/streams.js";

// The job's side of the contract (issue 21 items 1 and 2; docs/job-contract.md): execution.json in
// a read-only input directory, result.json and result lines reported with the completion and shown
// in the job view, progress and error lines, and the FORELEAD_EVENTS file reaching the job's event
// stream. The body bound is raised here so the control plane's own result bound (1 MiB) is what
// refuses.
const cp = useControlPlane({ leaseSeconds: 6, maxBodyBytes: 3 * 1024 * 1024 });
const { admin } = cp;
const tag = Math.random().toString(36).slice(2, 8);
const executors = await executorsUnderTest();

const secretValue = "tok-5b1e9d2c-7a44-4f0e-9c3b-2d8e6f1a0b77";
const specSecretValue = "pw-8c2f41d9e7b3a6";
const secretFileContent =
  "-----BEGIN TEST " +
  "KEY-----\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\n-----END " +
  "TEST KEY-----\n";

const { freshRunner, enqueue, settled } = runnerJobs(cp, "jc");

const stdout = (runner: TestRunner, jobId: string) =>
  runner.recorded
    .job(jobId)
    .logs.filter((l) => l.stream === "stdout")
    .map((l) => l.text);

describe.each(executors)(
  `the job's files and lines on the %s executor (${databaseKind})`,
  (executor) => {
    it(
      "input/execution.json holds the job's execution spec field by field, " +
        "never a secret value, and the job cannot change or replace input/",
      async () => {
        const { runner, ws } = await freshRunner(executor);
        try {
          const script = [
            "echo 'B64<'; base64 input/execution.json; echo '>B64'",
            "if (echo x >> input/execution.json) 2>/dev/null; then echo spec-writable; else echo spec-read-only; fi",
            "if (echo x > input/new-file) 2>/dev/null; then echo input-writable; else echo input-read-only; fi",
            "if mv input input-moved 2>/dev/null; then echo input-moved; else echo input-kept; fi",
            'echo "events=$FORELEAD_EVENTS"',
          ].join("\n");
          const jobId = await enqueue(
            ws,
            executor,
            {
              argv: ["sh", "-c", script],
              env: { GREETING: "hello", DB_PASSWORD: specSecretValue },
              cpu: 0.5,
              memoryBytes: String(64 * 1024 * 1024),
              timeoutSeconds: 45,
            },
            {
              labels: ["linux"],
              secrets: { API_TOKEN: secretValue },
              secretFiles: { "key.pem": secretFileContent },
            },
          );
          const job = await settled(jobId);
          expect(job.state, JSON.stringify(job)).toBe("succeeded");
          const lines = stdout(runner, jobId);
          const b64 = lines.slice(lines.indexOf("B64<") + 1, lines.indexOf(">B64")).join("");
          const raw = Buffer.from(b64, "base64").toString("utf8");
          for (const value of [
            secretValue,
            specSecretValue,
            "MIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu",
          ])
            expect(raw).not.toContain(value);
          const spec = JSON.parse(raw) as Record<string, unknown>;
          expect(spec).toEqual({
            schema: "forelead.execution/v1",
            id: jobId,
            attempt: 1,
            workspaceId: ws,
            runnerId: runner.client.runnerId,
            executor,
            labels: ["linux"],
            kind: "command",
            argv: ["sh", "-c", script],
            env: { GREETING: "hello" },
            secretEnv: ["API_TOKEN", "DB_PASSWORD"],
            secretFiles: ["key.pem"],
            image: executor === "docker" ? testImage : "busybox",
            limits: { cpu: 0.5, memoryBytes: 64 * 1024 * 1024 },
            timeoutSeconds: 45,
            repository: null,
            inputs: [],
            checkpoint: null,
          });
          expect(lines).toContain("spec-read-only");
          expect(lines).toContain("input-read-only");
          expect(lines).toContain("input-kept");
          const events = lines.find((l) => l.startsWith("events="));
          // A process job is given it relative to its directory: the runner's work directory above it
          // may be closed to the job's user.
          expect(events).toBe(
            executor === "docker" ? "events=/events/events.jsonl" : "events=events/events.jsonl",
          );
        } finally {
          await runner.close();
        }
      },
    );

    it(
      "output/result.json is sent with the completion and shown in the job " +
        "view; it wins over a result line",
      async () => {
        const { runner, ws } = await freshRunner(executor);
        try {
          const script =
            `echo '::forelead::result {"from":"line"}'; printf '%s' ` +
            `'{"passed":12,"failed":0,"suite":{"name":"unit"}}' > output/result.json`;
          const jobId = await enqueue(ws, executor, { argv: ["sh", "-c", script] });
          const job = await settled(jobId);
          expect(job).toMatchObject({
            state: "succeeded",
            result: { passed: 12, failed: 0, suite: { name: "unit" } },
          });
          expect((await admin.job(jobId)).json.job.result).toEqual({
            passed: 12,
            failed: 0,
            suite: { name: "unit" },
          });
        } finally {
          await runner.close();
        }
      },
    );

    it(
      "an invalid result.json (not JSON, not an object, over 1 MiB, a symbolic " +
        "link) fails the job with invalid_result naming the problem",
      async () => {
        const { runner, ws } = await freshRunner(executor);
        try {
          const cases = [
            {
              script: "echo 'passed: 12' > output/result.json",
              message: /output\/result\.json is not JSON/,
            },
            {
              script: "echo '[1, 2]' > output/result.json",
              message: /output\/result\.json is an array, not a JSON object/,
            },
            {
              script: "head -c 1100000 /dev/zero | tr '\\0' ' ' > output/result.json",
              message:
                /output\/result\.json is 1100000 bytes of JSON; a result is at most 1048576 bytes \(1 MiB\)/,
            },
            {
              script: "echo '{\"ok\":1}' > /tmp/r.json; ln -s /tmp/r.json output/result.json",
              message: /output\/result\.json is a symbolic link/,
            },
          ];
          const ids: string[] = [];
          for (const c of cases)
            ids.push(await enqueue(ws, executor, { argv: ["sh", "-c", c.script] }));
          for (const [i, c] of cases.entries()) {
            const job = await settled(ids[i]!);
            expect(job.state, JSON.stringify(job)).toBe("failed");
            expect(job.error.code).toBe("invalid_result");
            expect(job.error.message).toMatch(c.message);
            expect(job.result).toBeUndefined();
          }
        } finally {
          await runner.close();
        }
      },
    );

    it(
      "progress, result and error lines reach the job view and the event " +
        "stream; unknown and malformed directives stay plain log lines",
      async () => {
        const { runner, ws } = await freshRunner(executor);
        try {
          const directives = [
            "::forelead::progress 10",
            "::forelead::progress 3/10",
            "::forelead::bogus 1",
            "::forelead::progress 300",
            "::forelead::progress 42",
            '::forelead::result {"coverage":81.5}',
            "::forelead::result [1]",
            "::forelead::error the integration suite broke",
          ];
          const script = `${directives.map((d) => `echo '${d}'`).join("; ")}; exit 3`;
          const jobId = await enqueue(ws, executor, { argv: ["sh", "-c", script] });
          const job = await settled(jobId);
          expect(job).toMatchObject({
            state: "failed",
            exitCode: 3,
            error: { code: "exit_code", message: "the integration suite broke" },
            result: { coverage: 81.5 },
          });
          expect(job.progress).toMatchObject({ percent: 42 });
          expect(Date.parse(job.progress.updatedAt)).toBeGreaterThan(0);
          // Every line stays in the log, directive or not.
          expect(stdout(runner, jobId)).toEqual(directives);
          const events = (await readEntries(admin, jobId, "events", "?pageSize=1000")).map(
            (e) => e.data as Record<string, unknown>,
          );
          const progress = events.filter((e) => e.type === "job.progress");
          // At most one a second: the first at once, the last one always; here the job printed all of
          // them within the second.
          expect(progress[0]).toEqual({ type: "job.progress", percent: 10 });
          expect(progress.at(-1)).toEqual({ type: "job.progress", percent: 42 });
          expect(progress.length).toBeLessThanOrEqual(3);
          expect(events.map((e) => e.type).indexOf("job.progress")).toBeGreaterThan(
            events.map((e) => e.type).indexOf("job.started"),
          );
        } finally {
          await runner.close();
        }
      },
    );

    it(
      "a job.progress event is sent only when the value changes: a job " +
        "repeating one value for seconds sends it once",
      async () => {
        const { runner, ws } = await freshRunner(executor);
        try {
          // Each value printed every 0.1 s for 1.5 s: longer than the least interval between two
          // progress events, so an unchanged value would be sent again.
          const script = [
            "for v in 5 5/20 5/20 50; do",
            '  i=0; while [ $i -lt 15 ]; do echo "::forelead::progress $v"; sleep 0.1; i=$((i+1)); done',
            "done",
          ].join("\n");
          const jobId = await enqueue(ws, executor, { argv: ["sh", "-c", script] });
          const job = await settled(jobId);
          expect(job.state, JSON.stringify(job)).toBe("succeeded");
          expect(job.progress).toMatchObject({ percent: 50 });
          const events = (await readEntries(admin, jobId, "events", "?pageSize=1000")).map(
            (e) => e.data as Record<string, unknown>,
          );
          expect(events.filter((e) => e.type === "job.progress")).toEqual([
            { type: "job.progress", percent: 5 },
            { type: "job.progress", done: 5, total: 20 },
            { type: "job.progress", percent: 50 },
          ]);
        } finally {
          await runner.close();
        }
      },
      30_000,
    );

    it(
      "the FORELEAD_EVENTS file reaches the job's event stream in order with " +
        "sequences; reserved, non-JSON and over-long lines are dropped with a " +
        "warning event",
      async () => {
        const { runner, ws } = await freshRunner(executor);
        try {
          const script = [
            'for i in 1 2 3; do echo "{\\"type\\":\\"test.step\\",\\"n\\":$i}" >> "$FORELEAD_EVENTS"; done',
            'echo \'{"type":"job.exited","exitCode":0}\' >> "$FORELEAD_EVENTS"',
            "echo 'not json' >> \"$FORELEAD_EVENTS\"",
            'printf \'{"type":"test.big","pad":"%s"}\\n\' "$(head -c 20000 /dev/zero ' +
              '| tr \'\\0\' x)" >> "$FORELEAD_EVENTS"',
            'printf \'{"type":"test.done"}\' >> "$FORELEAD_EVENTS"',
          ].join("\n");
          const jobId = await enqueue(ws, executor, { argv: ["sh", "-c", script] });
          const job = await settled(jobId);
          expect(job.state, JSON.stringify(runner.recorded.job(jobId).logs)).toBe("succeeded");
          const entries = await readEntries(admin, jobId, "events", "?pageSize=1000");
          const data = entries.map((e) => e.data as Record<string, unknown>);
          expect(data.map((e) => e.type)).toEqual([
            "job.started",
            "test.step",
            "test.step",
            "test.step",
            "runner.event_dropped",
            "runner.event_dropped",
            "runner.event_dropped",
            "test.done",
            "job.exited",
          ]);
          expect(data.filter((e) => e.type === "test.step").map((e) => e.n)).toEqual([1, 2, 3]);
          const reasons = data
            .filter((e) => e.type === "runner.event_dropped")
            .map((e) => e.reason);
          expect(reasons[0]).toMatch(
            /^line 4 of the events file has type "job\.exited": the prefix "job\." is reserved/,
          );
          expect(reasons[1]).toMatch(/^line 5 of the events file is not JSON/);
          expect(reasons[2]).toBe("line 6 of the events file is over 16384 bytes");
          const sequences = entries.map((e) => Number(e.sequence));
          expect(sequences).toEqual(sequences.map((_, i) => sequences[0]! + i));
          // Only one job.exited: the runner's own.
          expect(data.filter((e) => e.type === "job.exited")).toHaveLength(1);
        } finally {
          await runner.close();
        }
      },
    );
  },
);

describe(`the control plane's result bound and progress (${databaseKind})`, () => {
  it(
    "a runner's job.progress event becomes the job's progress, the last of a " +
      "batch winning; figures out of range or not numbers are left out",
    async () => {
      const { runner, jobId, token, msg } = await leasedJob(cp, admin, `prog-${tag}`, "jcprog");
      try {
        const sent = await runner.rest.ndjson("/v1/runner/events", [
          msg(1, { type: "job.progress", percent: 10 }),
          msg(2, { type: "job.progress", done: 4, total: 8, note: "x" }),
        ]);
        expect(sent.status, sent.text).toBe(204);
        expect((await admin.job(jobId)).json.job.progress).toMatchObject({ done: 4, total: 8 });
        expect((await admin.job(jobId)).json.job.progress.percent).toBeUndefined();
        const odd = await runner.rest.ndjson("/v1/runner/events", [
          msg(3, { type: "job.progress", percent: 250, done: 1e12, total: 2.5 }),
          msg(4, { type: "job.progress", percent: "50", done: 3 }),
        ]);
        expect(odd.status, odd.text).toBe(204);
        const view = await admin.job(jobId);
        expect(view.status, view.text).toBe(200);
        expect(view.json.job.progress).toEqual({ done: 3, updatedAt: expect.any(String) });
        const done = await runner.complete(jobId, token);
        expect(done.json.job.progress).toEqual({ done: 3, updatedAt: expect.any(String) });
      } finally {
        await runner.close();
      }
    },
  );

  it(
    "a completion's result over 1 MiB is refused with 400 naming the bound; " +
      "one within it is stored and shown",
    async () => {
      const { runner, jobId, token } = await leasedJob(cp, admin, `bound-${tag}`, "jcbound");
      try {
        const big = await runner.complete(jobId, token, {
          result: { blob: "x".repeat(1024 * 1024) },
        });
        expect(big.status, big.text).toBe(400);
        expect(big.json.message).toMatch(
          /^result is 1048587 bytes of JSON; a result is at most 1048576 bytes \(1 MiB\)/,
        );
        const notObject = await runner.complete(jobId, token, { result: [1, 2] });
        expect(notObject.status, notObject.text).toBe(400);
        const ok = await runner.complete(jobId, token, { result: { passed: 1 } });
        expect(ok.status, ok.text).toBe(200);
        expect(ok.json.job.result).toEqual({ passed: 1 });
        // The same completion again gets the stored reply, result included.
        const again = await runner.complete(jobId, token, { result: { passed: 1 } });
        expect(again.json.job.result).toEqual({ passed: 1 });
        expect((await admin.job(jobId)).json.job.result).toEqual({ passed: 1 });
      } finally {
        await runner.close();
      }
    },
  );
});

import "reflect-metadata";
import { describe, expect, it } from "vitest";
import { eventually } from "../support/actors.js";
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
let n = 0;
/**
 * Runner ids unique to this run: Docker resources are found by the forelead.runner label, and other
 * suites may share the engine.
 */
const tag = Math.random().toString(36).slice(2, 8);
const executors = await executorsUnderTest();

const request = {
  id: "approve",
  prompt: "Go on?",
  schema: { type: "object", properties: { approved: { type: "boolean" } }, required: ["approved"] },
  expiresInSeconds: 600,
};

// The job's two lives, as one script: resumed (input/answer.json is there), it prints the answer
// and the checkpoint and succeeds; the first time, it leaves a checkpoint and asks for input.
// Relative paths: the process executor runs the job in its directory, a container in /.
const script = [
  'if [ -f input/answer.json ]; then echo "answer: $(cat ' +
    'input/answer.json)"; echo "checkpoint: $(cat ' +
    'input/checkpoint/progress/state.txt)"; exit 0; fi',
  "mkdir -p output/checkpoint/progress",
  "echo step=41 > output/checkpoint/progress/state.txt",
  `printf '%s' '${JSON.stringify(request)}' > output/input-request.json`,
].join("\n");

async function waitForState(jobId: string, state: string) {
  return eventually(
    `job ${jobId} to be ${state}`,
    async () => {
      const job = (await admin.job(jobId)).json.job;
      return job.state === state ? job : undefined;
    },
    30_000,
  );
}

describe.each(executors)(
  `suspend and resume on the %s executor (${databaseKind})`,
  (executor: ExecutorKind) => {
    it(
      "a job that writes an input request and exits 0 is suspended with its " +
        "checkpoint; answered, it resumes with the answer and the checkpoint in " +
        "input/",
      async () => {
        const ws = `rs${++n}`;
        const runner: TestRunner = await startTestRunner(cp, {
          runnerId: `r${n}-${tag}`,
          workspaceId: ws,
          executor,
          suspends: true,
        });
        try {
          const enq = await admin.enqueue({
            workspaceId: ws,
            maxAttempts: 1,
            spec: specFor(executor, { argv: ["sh", "-c", script] }),
          });
          expect(enq.status, enq.text).toBe(200);
          const jobId: string = enq.json.job.id;
          const waiting = await waitForState(jobId, "waiting_input");
          expect(waiting).toMatchObject({
            attempts: 0,
            inputRequest: { id: "approve", prompt: "Go on?", schema: request.schema },
          });
          expect(waiting.checkpoint).toEqual([
            expect.objectContaining({ name: "progress/state.txt", size: "8" }),
          ]);
          expect(runner.recorded.job(jobId).events.map((e) => e.type)).toEqual([
            "job.started",
            "job.exited",
            "job.suspending",
          ]);

          const answered = await admin.rest.request("POST", `/v1/admin/jobs/${jobId}/input`, {
            apiVersion: "v1",
            requestId: "approve",
            answer: { approved: true },
          });
          expect(answered.status, answered.text).toBe(200);
          const done = await waitForState(jobId, "succeeded");
          // maxAttempts 1: the suspension did not use up the job's only attempt.
          expect(done).toMatchObject({ attempts: 1, exitCode: 0 });
          const logs = await admin.rest.request("GET", `/v1/admin/jobs/${jobId}/logs`, undefined, {
            accept: "text/plain",
          });
          expect(logs.text).toContain('answer: {"approved":true}');
          expect(logs.text).toContain("checkpoint: step=41");
        } finally {
          await runner.close();
        }
      },
    );

    it(
      "the ::forelead::input directive suspends like the file (the last one " +
        "counts); answered, the job resumes with the answer",
      async () => {
        const ws = `rs${++n}`;
        const runner = await startTestRunner(cp, {
          runnerId: `r${n}-${tag}`,
          workspaceId: ws,
          executor,
          suspends: true,
        });
        try {
          const lines = [
            'if [ -f input/answer.json ]; then echo "answer: $(cat input/answer.json)"; exit 0; fi',
            "mkdir -p output/checkpoint",
            "echo kept > output/checkpoint/state.txt",
            `echo '::forelead::input ${JSON.stringify({ ...request, id: "first" })}'`,
            `echo '::forelead::input ${JSON.stringify(request)}'`,
          ].join("\n");
          const enq = await admin.enqueue({
            workspaceId: ws,
            maxAttempts: 1,
            spec: specFor(executor, { argv: ["sh", "-c", lines] }),
          });
          expect(enq.status, enq.text).toBe(200);
          const jobId: string = enq.json.job.id;
          const waiting = await waitForState(jobId, "waiting_input");
          expect(waiting).toMatchObject({
            attempts: 0,
            inputRequest: { id: "approve", prompt: "Go on?", schema: request.schema },
          });
          expect(waiting.checkpoint).toEqual([
            expect.objectContaining({ name: "state.txt", size: "5" }),
          ]);
          const answered = await admin.rest.request("POST", `/v1/admin/jobs/${jobId}/input`, {
            apiVersion: "v1",
            requestId: "approve",
            answer: { approved: false },
          });
          expect(answered.status, answered.text).toBe(200);
          expect(await waitForState(jobId, "succeeded")).toMatchObject({
            attempts: 1,
            exitCode: 0,
          });
          const logs = await admin.rest.request("GET", `/v1/admin/jobs/${jobId}/logs`, undefined, {
            accept: "text/plain",
          });
          expect(logs.text).toContain('answer: {"approved":false}');
          expect(logs.text).toContain("::forelead::input "); // the directive stays in the log
        } finally {
          await runner.close();
        }
      },
    );

    it(
      "the file wins over an input directive; an invalid directive fails the " +
        "job by name; a failing job's directive is ignored",
      async () => {
        const ws = `rs${++n}`;
        const runner = await startTestRunner(cp, {
          runnerId: `r${n}-${tag}`,
          workspaceId: ws,
          executor,
          suspends: true,
        });
        try {
          const run = async (lines: string[]) => {
            const enq = await admin.enqueue({
              workspaceId: ws,
              maxAttempts: 1,
              spec: specFor(executor, { argv: ["sh", "-c", lines.join("\n")] }),
            });
            expect(enq.status, enq.text).toBe(200);
            return enq.json.job.id as string;
          };
          const both = await run([
            `echo '::forelead::input ${JSON.stringify({ ...request, id: "from-line" })}'`,
            `printf '%s' '${JSON.stringify(request)}' > output/input-request.json`,
          ]);
          expect((await waitForState(both, "waiting_input")).inputRequest).toMatchObject({
            id: "approve",
          });
          const invalid = await run([`echo '::forelead::input ${JSON.stringify({ id: "q" })}'`]);
          const failed = await waitForState(invalid, "failed");
          expect(failed.error).toMatchObject({
            code: "invalid_input_request",
            message: "the job's ::forelead::input directive needs prompt, a string",
          });
          const exited = await run([
            `echo '::forelead::input ${JSON.stringify(request)}'`,
            "exit 3",
          ]);
          expect((await waitForState(exited, "failed")).error).toMatchObject({ code: "exit_code" });
        } finally {
          await runner.close();
        }
      },
    );

    it("a runner without the suspend routes fails a job that asks for input, naming why", async () => {
      const ws = `rs${++n}`;
      const runner = await startTestRunner(cp, {
        runnerId: `r${n}-${tag}`,
        workspaceId: ws,
        executor,
      });
      try {
        const enq = await admin.enqueue({
          workspaceId: ws,
          spec: specFor(executor, { argv: ["sh", "-c", script] }),
        });
        const failed = await waitForState(enq.json.job.id, "failed");
        expect(failed.error).toMatchObject({ code: "suspend_refused" });
        expect(failed.error.message).toContain("this runner cannot suspend jobs");
      } finally {
        await runner.close();
      }
    });
  },
);

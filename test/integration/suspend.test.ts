import "reflect-metadata";
import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { sql } from "kysely";
import { registeredRunner, type RunnerActor } from "../support/actors.js";
import { parseRoleGrant } from "../../src/identity/roles.js";
import { createRestClient } from "../support/clients.js";
import { restUploads, sha256 } from "../support/artifacts.js";
import { expireLease } from "../support/streams.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

/** The features a runner declares at register to be let suspend (src/broker/fleet/features.ts). */
const suspendFeatures = ["checkpoint-v1", "input-v1"];

const approval = {
  id: "approve-1",
  prompt: "Deploy to production?",
  schema: {
    type: "object",
    properties: { approved: { type: "boolean" }, note: { type: "string", maxLength: 20 } },
    required: ["approved"],
    additionalProperties: false,
  },
  expiresInSeconds: 3600,
};

describe(`suspend and answer (${databaseKind})`, () => {
  // No sweep on a timer: the tests sweep when they mean to.
  const cp = useControlPlane({
    sweepIntervalMs: 3_600_000,
    grants: [
      parseRoleGrant("spiffe://forelead/services/approver=enqueue:sus-approve"),
      parseRoleGrant("spiffe://forelead/services/outsider=enqueue:elsewhere"),
    ],
  });
  const { admin } = cp;
  let counter = 0;
  const fresh = () => `sus${++counter}`;

  /**
   * A runner (with the suspend features unless `features` says otherwise) holding the lease on a
   * new job.
   */
  async function leased(features = suspendFeatures, maxAttempts = 2, ws = fresh()) {
    const runner = await registeredRunner(cp, "r1", ws, { features });
    const enq = await admin.enqueue({ workspaceId: ws, maxAttempts });
    expect(enq.status, enq.text).toBe(200);
    const claim = await runner.claim();
    expect(claim.status, claim.text).toBe(200);
    return { ws, runner, jobId: claim.json.job.id as string, token: claim.json.token as string };
  }

  const suspend = (
    runner: RunnerActor,
    jobId: string,
    token: string,
    overrides: Record<string, unknown> = {},
  ) =>
    runner.rest.request("POST", "/v1/runner/suspend", {
      apiVersion: "v1",
      jobId,
      leaseToken: token,
      inputRequest: approval,
      ...overrides,
    });
  /** The types of the workspace's events on the global stream, in order. */
  async function eventTypes(workspaceId: string): Promise<string[]> {
    const reply = await admin.rest.request("GET", `/v1/admin/events?workspaceId=${workspaceId}`);
    expect(reply.status, reply.text).toBe(200);
    return reply.text
      .split("\n")
      .filter(Boolean)
      .map((l) => (JSON.parse(l) as { type: string }).type);
  }
  const answer = (jobId: string, body: Record<string, unknown>) =>
    admin.rest.request("POST", `/v1/admin/jobs/${jobId}/input`, { apiVersion: "v1", ...body });

  it(
    "suspend → answer → resume: the lease ends without charging the attempt, " +
      "the next lease carries the answer and the checkpoint",
    async () => {
      const j = await leased();
      const bytes = Buffer.from("step=41\n");
      const up = restUploads({ runner: j.runner, jobId: j.jobId, token: j.token });
      const opened = await up.open("state.txt", bytes.length, sha256(bytes));
      expect(opened.status, opened.text).toBe(200);
      expect((await up.put(opened.json.uploadId, 0, bytes)).status).toBe(200);
      const fin = await up.finalize(opened.json.uploadId);
      expect(fin.status, fin.text).toBe(200);
      const checkpoint = [
        {
          name: "state.txt",
          digest: fin.json.digest,
          size: fin.json.size,
          mediaType: fin.json.mediaType,
        },
      ];

      const s = await suspend(j.runner, j.jobId, j.token, { checkpoint });
      expect(s.status, s.text).toBe(200);
      expect(s.json.job).toMatchObject({
        state: "waiting_input",
        attempts: 0,
        inputRequest: { id: "approve-1", prompt: approval.prompt, schema: approval.schema },
        checkpoint,
      });
      // The same suspend again is answered with the job; a different one under the same lease is
      // refused.
      const again = await suspend(j.runner, j.jobId, j.token, { checkpoint });
      expect(again.status, again.text).toBe(200);
      expect(again.json.job.state).toBe("waiting_input");
      const other = await suspend(j.runner, j.jobId, j.token, {
        checkpoint,
        inputRequest: { ...approval, id: "approve-2" },
      });
      expect(other.status).toBe(409);
      expect(other.json.message).toContain(
        'already suspended under this lease with input request "approve-1"',
      );
      // The lease is over: renew says why; no other lease is handed out while the job waits.
      const renew = await j.runner.renew(j.jobId, j.token);
      expect(renew.status).toBe(409);
      expect(renew.json.message).toContain("suspended for input");
      expect((await j.runner.claim()).status).toBe(204);

      const view = await admin.job(j.jobId);
      expect(view.json.job).toMatchObject({
        state: "waiting_input",
        inputRequest: { id: "approve-1" },
        checkpoint,
      });
      const expiresAt = Date.parse(view.json.job.inputRequest.expiresAt);
      expect(expiresAt).toBeGreaterThan(Date.now() + 3000 * 1000);
      // The operator's status counts it, apart from queued and running.
      const status = await admin.rest.request("GET", "/v1/admin/status");
      expect(status.status, status.text).toBe(200);
      expect(
        status.json.workspaces.find((w: { workspaceId: string }) => w.workspaceId === j.ws),
      ).toMatchObject({ waitingInput: "1" });

      const answered = await answer(j.jobId, {
        requestId: "approve-1",
        answer: { approved: true, note: "ship it" },
      });
      expect(answered.status, answered.text).toBe(200);
      expect(answered.json.job.state).toBe("queued");
      expect(answered.json.job.inputRequest.answeredAt).toBeDefined();

      const resumed = await j.runner.claim();
      expect(resumed.status, resumed.text).toBe(200);
      expect(resumed.json).toMatchObject({
        job: { id: j.jobId },
        inputRequestId: "approve-1",
        inputAnswer: { approved: true, note: "ship it" },
        checkpoint,
      });
      expect((await admin.job(j.jobId)).json.job.attempts).toBe(1); // the suspension was not charged
      const got = await j.runner.rest.request("POST", "/v1/runner/checkpoint", {
        apiVersion: "v1",
        jobId: j.jobId,
        leaseToken: resumed.json.token,
        name: "state.txt",
      });
      expect(got.status, got.text).toBe(200);
      expect(got.text).toBe("step=41\n");
      const missing = await j.runner.rest.request("POST", "/v1/runner/checkpoint", {
        apiVersion: "v1",
        jobId: j.jobId,
        leaseToken: resumed.json.token,
        name: "nope",
      });
      expect(missing.status).toBe(404);
      expect(missing.json.message).toContain('its checkpoint has "state.txt"');
      // The old lease cannot read it.
      expect(
        (
          await j.runner.rest.request("POST", "/v1/runner/checkpoint", {
            apiVersion: "v1",
            jobId: j.jobId,
            leaseToken: j.token,
            name: "state.txt",
          })
        ).status,
      ).toBe(409);

      const done = await j.runner.complete(j.jobId, resumed.json.token);
      expect(done.status, done.text).toBe(200);
      expect(done.json.job).toMatchObject({ state: "succeeded", attempts: 1 });

      expect(await eventTypes(j.ws)).toEqual([
        "runner.registered",
        "job.queued",
        "job.leased",
        "job.suspended",
        "job.input_answered",
        "job.leased",
        "job.settled",
      ]);
      await j.runner.close();
    },
  );

  it(
    "any identity granted enqueue in the job's workspace may answer; one " +
      "granted elsewhere is refused naming the grant",
    async () => {
      const j = await leased(suspendFeatures, 2, "sus-approve");
      expect((await suspend(j.runner, j.jobId, j.token)).status).toBe(200);
      const body = { apiVersion: "v1", requestId: "approve-1", answer: { approved: true } };
      const outsider = createRestClient(
        cp.url,
        cp.pki.ca.certPem,
        await cp.pki.service("outsider"),
      );
      const approver = createRestClient(
        cp.url,
        cp.pki.ca.certPem,
        await cp.pki.service("approver"),
      );
      try {
        const refused = await outsider.request("POST", `/v1/admin/jobs/${j.jobId}/input`, body);
        expect(refused.status, refused.text).toBe(403);
        expect(refused.json.message).toContain(
          `job ${j.jobId} in workspace "sus-approve" is another identity's`,
        );
        expect((await admin.job(j.jobId)).json.job.state).toBe("waiting_input");
        const answered = await approver.request("POST", `/v1/admin/jobs/${j.jobId}/input`, body);
        expect(answered.status, answered.text).toBe(200);
        expect(answered.json.job.state).toBe("queued");
      } finally {
        await outsider.close();
        await approver.close();
      }
      await j.runner.close();
    },
  );

  it(
    "an answer that breaks the schema is refused naming the JSON path and " +
      "rule; a stale requestId or a job not waiting is 409 naming the state",
    async () => {
      const j = await leased();
      expect((await suspend(j.runner, j.jobId, j.token)).status).toBe(200);
      const wrongType = await answer(j.jobId, {
        requestId: "approve-1",
        answer: { approved: "yes" },
      });
      expect(wrongType.status).toBe(400);
      expect(wrongType.json.code).toBe("invalid_argument");
      expect(wrongType.json.message).toContain("answer at /approved must be boolean");
      expect(wrongType.json.message).toContain('rule "type"');
      const tooLong = await answer(j.jobId, {
        requestId: "approve-1",
        answer: { approved: true, note: "x".repeat(30) },
      });
      expect(tooLong.status).toBe(400);
      expect(tooLong.json.message).toContain(
        "answer at /note must NOT have more than 20 characters",
      );
      const missing = await answer(j.jobId, { requestId: "approve-1", answer: {} });
      expect(missing.json.message).toContain("answer at / must have required property 'approved'");
      const stale = await answer(j.jobId, { requestId: "approve-0", answer: { approved: true } });
      expect(stale.status).toBe(409);
      expect(stale.json.message).toContain('waits on input request "approve-1", not "approve-0"');
      expect((await admin.job(j.jobId)).json.job.state).toBe("waiting_input");

      const queued = await admin.enqueue({ workspaceId: j.ws });
      const notWaiting = await answer(queued.json.job.id, {
        requestId: "approve-1",
        answer: { approved: true },
      });
      expect(notWaiting.status).toBe(409);
      expect(notWaiting.json.message).toContain("is queued, not waiting_input");
      await j.runner.close();
    },
  );

  it(
    "a suspend with a schema that does not compile, or a bad request, is " +
      "refused with 400 and the lease stays live",
    async () => {
      const j = await leased();
      const badSchema = await suspend(j.runner, j.jobId, j.token, {
        inputRequest: {
          ...approval,
          schema: { type: "object", properties: { a: { type: "bogus" } } },
        },
      });
      expect(badSchema.status).toBe(400);
      expect(badSchema.json.message).toContain("inputRequest.schema is not a valid JSON Schema");
      const unknownKeyword = await suspend(j.runner, j.jobId, j.token, {
        inputRequest: { ...approval, schema: { typo: 1 } },
      });
      expect(unknownKeyword.status).toBe(400);
      expect(unknownKeyword.json.message).toContain('unknown keyword: "typo"');
      const badExpiry = await suspend(j.runner, j.jobId, j.token, {
        inputRequest: { ...approval, expiresInSeconds: 0 },
      });
      expect(badExpiry.status).toBe(400);
      expect(badExpiry.json.message).toContain("inputRequest.expiresInSeconds must be 1 to 604800");
      const notAnObject = await suspend(j.runner, j.jobId, j.token, {
        inputRequest: { ...approval, schema: "string" },
      });
      expect(notAnObject.status).toBe(400);
      expect(notAnObject.json.code).toBe("invalid_argument");
      const badId = await suspend(j.runner, j.jobId, j.token, {
        inputRequest: { ...approval, id: "a b" },
      });
      expect(badId.status).toBe(400);
      expect(badId.json.message).toContain('inputRequest.id "a b" must be 1 to 64 characters');
      expect((await j.runner.renew(j.jobId, j.token)).status).toBe(200);
      await j.runner.close();
    },
  );

  it("an unanswered request expires and fails the job input_expired; it can no longer be answered", async () => {
    const j = await leased();
    expect((await suspend(j.runner, j.jobId, j.token)).status).toBe(200);
    // Its expiry moved to the past, so the one sweep below is the one that finds it due.
    await sql`update job_inputs set expires_at = now() - interval '1 second' where job_id = ${j.jobId}`.execute(
      cp.plane.store.db,
    );
    const late = await answer(j.jobId, { requestId: "approve-1", answer: { approved: true } });
    expect(late.status).toBe(409);
    expect(late.json.message).toContain("expired at");
    expect(await cp.plane.broker.sweep()).toBe(1);
    const view = await admin.job(j.jobId);
    expect(view.json.job).toMatchObject({ state: "failed", failure: { reason: "input_expired" } });
    expect(view.json.job.failure.message).toContain(
      'input request "approve-1" was not answered by',
    );
    expect((await eventTypes(j.ws)).slice(-2)).toEqual(["job.input_expired", "job.settled"]);
    const after = await answer(j.jobId, { requestId: "approve-1", answer: { approved: true } });
    expect(after.status).toBe(409);
    expect(after.json.message).toContain("is failed, not waiting_input");
    await j.runner.close();
  });

  it("suspend is refused naming the missing features for a runner that did not declare them", async () => {
    const j = await leased(["checkpoint-v1"]);
    const refused = await suspend(j.runner, j.jobId, j.token);
    expect(refused.status).toBe(400);
    expect(refused.json.code).toBe("failed_precondition");
    expect(refused.json.message).toContain("did not declare the feature(s) input-v1");
    expect((await admin.job(j.jobId)).json.job.state).toBe("running");
    await j.runner.close();
  });

  it("a runner cannot suspend a job whose lease it lost (released, or expired and the job leased again)", async () => {
    const j = await leased();
    expect((await j.runner.release(j.jobId, j.token)).status).toBe(204);
    const refused = await suspend(j.runner, j.jobId, j.token);
    expect(refused.status).toBe(409);
    expect(refused.json.message).toContain("was released");
    expect((await admin.job(j.jobId)).json.job.state).toBe("queued");

    const again = await j.runner.claim();
    expect(again.status, again.text).toBe(200);
    await expireLease(cp, j.jobId);
    expect(await cp.plane.broker.sweep()).toBe(1);
    const third = await j.runner.claim();
    expect(third.status, third.text).toBe(200);
    const expired = await suspend(j.runner, j.jobId, again.json.token);
    expect(expired.status).toBe(409);
    expect(expired.json.message).toContain("expired at");
    expect((await admin.job(j.jobId)).json.job).toMatchObject({ state: "running", attempts: 2 });
    await j.runner.close();
  });

  it("a waiting job can be cancelled: it settles cancelled at once", async () => {
    const j = await leased();
    expect((await suspend(j.runner, j.jobId, j.token)).status).toBe(200);
    const cancelled = await admin.cancel(j.jobId);
    expect(cancelled.status, cancelled.text).toBe(200);
    expect(cancelled.json.job).toMatchObject({
      state: "cancelled",
      failure: { reason: "cancelled" },
    });
    expect(cancelled.json.job.failure.message).toContain("while it waited for input");
    expect(
      (await answer(j.jobId, { requestId: "approve-1", answer: { approved: true } })).status,
    ).toBe(409);
    await j.runner.close();
  });

  it(
    "forelead jobs answer answers from a file; a refusal is the control " +
      "plane's message and a non-zero exit",
    async () => {
      const j = await leased();
      expect((await suspend(j.runner, j.jobId, j.token)).status).toBe(200);
      const dir = await mkdtemp(join(tmpdir(), "forelead-answer-"));
      try {
        const identity = await cp.pki.service("test-admin");
        await writeFile(join(dir, "ca.pem"), cp.pki.ca.certPem);
        await writeFile(join(dir, "admin.pem"), identity.certPem);
        await writeFile(join(dir, "admin-key.pem"), identity.keyPem);
        await writeFile(join(dir, "bad.json"), JSON.stringify({ approved: 1 }));
        await writeFile(join(dir, "good.json"), JSON.stringify({ approved: true }));
        const flags = [
          "--server",
          cp.url,
          "--ca",
          join(dir, "ca.pem"),
          "--cert",
          join(dir, "admin.pem"),
          "--key",
          join(dir, "admin-key.pem"),
        ];
        const forelead = (...args: string[]) =>
          promisify(execFile)(
            process.execPath,
            [join(process.cwd(), "bin/forelead.js"), "jobs", "answer", j.jobId, ...args, ...flags],
            { timeout: 60_000 },
          ).then(
            (r) => ({ code: 0, ...r }),
            (e: { code?: number; stdout?: string; stderr?: string }) => ({
              code: e.code ?? -1,
              stdout: e.stdout ?? "",
              stderr: e.stderr ?? "",
            }),
          );
        const bad = await forelead(
          "--request-id",
          "approve-1",
          "--answer-file",
          join(dir, "bad.json"),
        );
        expect(bad.code).not.toBe(0);
        expect(bad.stderr).toContain("answer at /approved must be boolean");
        const good = await forelead(
          "--request-id",
          "approve-1",
          "--answer-file",
          join(dir, "good.json"),
        );
        expect(good.code, good.stderr).toBe(0);
        expect(good.stdout).toBe(
          `job ${j.jobId}: input request approve-1 answered; the job is queued\n`,
        );
      } finally {
        await rm(dir, { recursive: true, force: true });
        await j.runner.close();
      }
    },
  );
});

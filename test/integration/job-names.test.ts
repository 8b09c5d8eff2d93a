import { describe, expect, it } from "vitest";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

// Job names (issue 46 item 6): an optional displayName on an enqueue and on a pipeline step,
// checked (length, no control characters), stored and shown in the job views and the pipeline's
// step view; a step's `name` stays its key.
const cp = useControlPlane();
const { admin } = cp;
const post = (path: string, body: Record<string, unknown>) =>
  admin.rest.request("POST", path, { apiVersion: "v1", ...body });

describe(`job display names (${databaseKind})`, () => {
  it("an enqueue's displayName is stored and shown by get and list, and kept by a retry's job", async () => {
    const name = "Nightly build — ünïcode ✓";
    const enq = await admin.enqueue({ workspaceId: "jn1", displayName: name });
    expect(enq.status, enq.text).toBe(200);
    const id = enq.json.job.id as string;
    expect(enq.json.job.displayName).toBe(name);
    expect((await admin.job(id)).json.job.displayName).toBe(name);
    const list = await admin.rest.request("GET", "/v1/admin/jobs?workspaceId=jn1");
    expect(list.json.jobs.map((j: { displayName?: string }) => j.displayName)).toEqual([name]);
    const plain = await admin.enqueue({ workspaceId: "jn1" });
    expect(plain.json.job.displayName).toBeUndefined();
    // A retry enqueues the job again under its name.
    expect((await admin.cancel(id)).status).toBe(200);
    const retried = await post(`/v1/admin/jobs/${id}/retry`, {});
    expect(retried.status, retried.text).toBe(200);
    expect(retried.json.job.displayName).toBe(name);
  });

  it("the same idempotency key with another displayName is a different request", async () => {
    const first = await admin.enqueue({ workspaceId: "jn2", idempotencyKey: "k1" });
    expect(first.status, first.text).toBe(200);
    const again = await admin.enqueue({ workspaceId: "jn2", idempotencyKey: "k1" });
    expect(again.json.job.id).toBe(first.json.job.id);
    const renamed = await admin.enqueue({
      workspaceId: "jn2",
      idempotencyKey: "k1",
      displayName: "other",
    });
    expect(renamed.status).toBe(409);
  });

  it("a displayName over 200 characters or with a control character is a clear 400", async () => {
    const cases: Array<[string, RegExp]> = [
      ["x".repeat(201), /^displayName is 201 characters long; at most 200 are allowed$/],
      ["line one\nline two", /^displayName holds a control character \(U\+000A at index 8\)/],
      ["tab\there", /U\+0009 at index 3/],
      ["evil\u202Egnp.exe", /U\+202E at index 4/],
      ["bell\u0007", /U\+0007 at index 4/],
    ];
    for (const [displayName, message] of cases) {
      const reply = await admin.enqueue({ workspaceId: "jn3", displayName });
      expect(reply.status, displayName).toBe(400);
      expect(reply.json.message).toMatch(message);
    }
    expect((await admin.enqueue({ workspaceId: "jn3", displayName: "é".repeat(200) })).status).toBe(
      200,
    );
  });

  it("a pipeline step's displayName names the step in the pipeline's view and its job; its name stays the key", async () => {
    const spec = { image: "busybox", argv: ["true"], timeoutSeconds: 60 };
    const submitted = await post("/v1/admin/pipelines", {
      workspaceId: "jn4",
      name: "release",
      steps: [
        { name: "build", displayName: "Build the images", spec },
        { name: "test", needs: ["build"], spec },
      ],
    });
    expect(submitted.status, submitted.text).toBe(200);
    const steps = submitted.json.pipeline.steps as Array<Record<string, unknown>>;
    expect(steps.map((s) => [s.name, s.displayName])).toEqual([
      ["build", "Build the images"],
      ["test", undefined],
    ]);
    const build = steps[0]!.jobId as string;
    expect((await admin.job(build)).json.job.displayName).toBe("Build the images");
    const bad = await post("/v1/admin/pipelines", {
      workspaceId: "jn4",
      name: "bad",
      steps: [{ name: "build", displayName: "a\rb", spec }],
    });
    expect(bad.status).toBe(400);
    expect(bad.json.message).toMatch(
      /^steps\[0\] \(build\): displayName holds a control character \(U\+000D at index 1\)/,
    );
  });
});

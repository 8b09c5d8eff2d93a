import "reflect-metadata";
import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { adminActor, leasedJob, runnerActor } from "../support/actors.js";
import { restUploads, sha256, storedArtifacts } from "../support/artifacts.js";
import { databaseKind } from "../support/database.js";
import { useReplicaPair } from "../support/fixture.js";

const MiB = 1024 * 1024;

// Two control planes on one Postgres database, no --artifacts-dir: artifacts live in Postgres, so
// a replica serves uploads and downloads it never saw start. Needs DATABASE_URL.
describe.runIf(databaseKind === "postgres")("artifacts across replicas (postgres store)", () => {
  const replicas = useReplicaPair();

  it("an upload put on replica A, resumed and finalized on B, completes on B and downloads from A", async () => {
    const { a, b } = replicas;
    expect([a.plane.artifacts.store.kind, b.plane.artifacts.store.kind]).toEqual([
      "postgres",
      "postgres",
    ]);
    const adminA = await adminActor(a);
    const onA = await leasedJob(a, adminA, "r1", "w1");
    const runnerB = await runnerActor(a, "r1", "w1", b.url);
    const onB = { ...onA, runner: runnerB };
    const data = randomBytes(5 * MiB + 17);
    const digest = sha256(data);

    const opened = await restUploads(onA).open("dist/app.bin", data.length, digest);
    expect(opened.status, opened.text).toBe(200);
    const id = opened.json.uploadId;
    expect((await restUploads(onA).put(id, 0, data.subarray(0, 3 * MiB))).json.durableSize).toBe(
      String(3 * MiB),
    );
    // B sees what A holds
    expect((await restUploads(onB).put(id, 0)).json.durableSize).toBe(String(3 * MiB));
    expect((await restUploads(onB).put(id, 3 * MiB, data.subarray(3 * MiB))).json.durableSize).toBe(
      String(data.length),
    );
    const done = await restUploads(onB).finalize(id);
    expect(done.status, done.text).toBe(200);
    expect(done.json).toMatchObject({ digest, size: String(data.length) });
    expect(await storedArtifacts(a.plane).blobs()).toEqual([digest]);
    expect(await storedArtifacts(b.plane).staged()).toEqual([]);

    const entry = {
      name: done.json.name,
      digest,
      size: done.json.size,
      mediaType: done.json.mediaType,
    };
    const completed = await runnerB.complete(onA.jobId, onA.token, { artifacts: [entry] });
    expect(completed.status, completed.text).toBe(200);
    const got = await adminA.rest.request(
      "GET",
      `/v1/admin/jobs/${onA.jobId}/artifacts/content?name=dist%2Fapp.bin`,
    );
    expect(got.status).toBe(200);
    expect(got.headers["forelead-artifact-digest"]).toBe(digest);
    expect(sha256(got.body!)).toBe(digest);
    await Promise.all([onA.runner.close(), runnerB.close(), adminA.close()]);
  });
});

import "reflect-metadata";
import { randomBytes, randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { collectBlobs } from "../../src/artifacts/gc.js";
import { createRetention } from "../../src/ops/retention.js";
import { leasedJob, type LeasedJob } from "../support/actors.js";
import {
  artifactStoreKinds,
  artifactStoreOptions,
  restUploads,
  sha256,
  storedArtifacts,
} from "../support/artifacts.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

const hour = 3600_000;

describe.each(artifactStoreKinds)(
  `artifact garbage collection (${databaseKind}, %s store)`,
  (kind) => {
    const cp = useControlPlane(artifactStoreOptions(kind));
    const { admin } = cp;
    const job = () =>
      leasedJob(cp, admin, `gc-${randomUUID().slice(0, 8)}`, `gc-${randomUUID().slice(0, 8)}`);

    /** Uploads `bytes` under `j` and finalizes it; the digest. */
    async function upload(j: LeasedJob, bytes: Buffer): Promise<string> {
      const up = restUploads(j);
      const digest = sha256(bytes);
      const opened = await up.open(`f-${randomUUID().slice(0, 8)}`, bytes.length, digest);
      expect(opened.status, opened.text).toBe(200);
      const id: string = opened.json.uploadId;
      expect((await up.put(id, 0, bytes)).status).toBe(200);
      const done = await up.finalize(id);
      expect(done.status, done.text).toBe(200);
      return digest;
    }

    /** Settles `j` and prunes it (and its uploads) by the job retention. */
    async function settleAndPrune(j: LeasedJob) {
      expect((await j.runner.complete(j.jobId, j.token)).status).toBe(200);
      await sql`update jobs set settled_at = now() - interval '2 hours' where id = ${j.jobId}`.execute(
        cp.plane.store.db,
      );
      const r = createRetention({ store: cp.plane.store, retentions: { jobs: hour } });
      await r.pruneAll();
      await r.close();
      expect((await admin.job(j.jobId)).status).toBe(404);
    }

    it(
      "deletes a blob no upload names once past the grace period, and keeps one a kept job " +
        "uploaded, one an upload in progress names, and the staged bytes of that upload",
      async () => {
        const stored = storedArtifacts(cp.plane);
        const kept = await job();
        const keptBlob = await upload(kept, randomBytes(3000));

        const gone = await job();
        const orphanBytes = randomBytes(5000);
        const orphan = await upload(gone, orphanBytes);
        await settleAndPrune(gone);

        const earlier = await job();
        const namedBytes = randomBytes(4000);
        const named = await upload(earlier, namedBytes);
        await settleAndPrune(earlier);
        const inProgress = await job();
        const up = restUploads(inProgress);
        const opened = await up.open("again", namedBytes.length, named);
        expect(opened.status, opened.text).toBe(200);
        const uploadId: string = opened.json.uploadId;
        expect((await up.put(uploadId, 0, namedBytes.subarray(0, 1000))).status).toBe(200);
        expect(await stored.stagedBytes(uploadId)).toBe(1000);

        const blobs = cp.plane.artifacts.store.blobs;
        expect(
          await collectBlobs(cp.plane.store.db, blobs, hour),
          "within the grace period",
        ).toEqual({
          blobs: 0,
          bytes: 0,
        });
        expect(await stored.blobs()).toEqual([keptBlob, orphan, named].sort());

        await sleep(20);
        const r = createRetention({
          store: cp.plane.store,
          blobs,
          retentions: { blobs: 1 },
          pruneIntervalMs: hour,
        });
        try {
          expect((await r.pruneAll()).blobs).toBe(1);
          expect(r.report().find((x) => x.kind === "blobs")?.reclaimedBytes).toBe(
            orphanBytes.length,
          );
        } finally {
          await r.close();
        }
        expect(await stored.blobs()).toEqual([keptBlob, named].sort());
        expect(await stored.stagedBytes(uploadId)).toBe(1000);
        const reader = await blobs.open(keptBlob as `sha256:${string}`);
        expect(reader.size).toBe(3000);

        // The upload in progress completes against the blob it kept alive.
        expect((await up.put(uploadId, 1000, namedBytes.subarray(1000))).status).toBe(200);
        expect((await up.finalize(uploadId)).json.digest).toBe(named);
        await kept.runner.close();
        await inProgress.runner.close();
      },
    );

    it("an upload of a stored blob's bytes again starts its grace period over", async () => {
      const stored = storedArtifacts(cp.plane);
      const bytes = randomBytes(2000);
      const first = await job();
      const digest = await upload(first, bytes);
      await settleAndPrune(first);
      await stored.age(digest, 2 * hour);
      const again = await job();
      expect(await upload(again, bytes), "deduplicated").toBe(digest);
      await settleAndPrune(again);
      const blobs = cp.plane.artifacts.store.blobs;
      expect(await collectBlobs(cp.plane.store.db, blobs, hour)).toEqual({ blobs: 0, bytes: 0 });
      expect(await stored.blobs()).toContain(digest);
      await stored.age(digest, 2 * hour);
      expect(await collectBlobs(cp.plane.store.db, blobs, hour)).toMatchObject({ blobs: 1 });
      expect(await stored.blobs()).not.toContain(digest);
    });
  },
);

import "reflect-metadata";
import { randomBytes } from "node:crypto";
import { constants as http2Constants } from "node:http2";
import { stat } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { eventually, leasedJob, type LeasedJob } from "../support/actors.js";
import {
  artifactStoreKinds,
  artifactStoreOptions,
  blobPath,
  restUploads,
  sha256,
  storedArtifacts,
} from "../support/artifacts.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

const MiB = 1024 * 1024;

describe.each(artifactStoreKinds)(`artifact uploads (${databaseKind}, %s store)`, (kind) => {
  const cp = useControlPlane(artifactStoreOptions(kind));
  const { admin } = cp;
  let counter = 0;
  const fresh = () => `up${++counter}`;
  const stored = () => storedArtifacts(cp.plane);

  async function job(): Promise<LeasedJob> {
    const ws = fresh();
    return leasedJob(cp, admin, "r1", ws);
  }

  /**
   * Starts a raw PUT of `bytes` at `offset` and resets the stream (RST_STREAM
   * CANCEL) once the control plane has staged `cutAfter` bytes of the upload:
   * a connection lost in the middle of a body.
   */
  async function interruptedPut(
    j: LeasedJob,
    uploadId: string,
    offset: number,
    bytes: Buffer,
    cutAfter: number,
  ): Promise<void> {
    const stream = j.runner.rest.session.request({
      ":method": "PUT",
      ":path": `/v1/runner/uploads/${uploadId}`,
      ...restUploads(j).headers(offset),
    });
    stream.on("error", () => {});
    const closed = new Promise<void>((resolve) => stream.once("close", () => resolve()));
    const writing = (async () => {
      for (let at = 0; at < bytes.length && !stream.destroyed; at += MiB) {
        if (!stream.write(bytes.subarray(at, at + MiB)))
          await Promise.race([new Promise((r) => stream.once("drain", r)), closed]);
      }
    })();
    await eventually(
      `${cutAfter} bytes staged`,
      async () => (await stored().stagedBytes(uploadId)) >= cutAfter || undefined,
      30_000,
      20,
    );
    stream.close(http2Constants.NGHTTP2_CANCEL);
    await closed;
    await writing;
  }

  it(
    "a 50 MiB upload in chunks, interrupted and resumed, is verified and " +
      "stored once; a second upload of the same bytes is deduplicated",
    { timeout: 120_000 },
    async () => {
      const data = randomBytes(50 * MiB);
      const digest = sha256(data);
      const j = await job();
      const up = restUploads(j);
      const t0 = Date.now();
      const opened = await up.open("dist/app.bin", data.length, digest);
      expect(opened.status, opened.text).toBe(200);
      expect(opened.json).toMatchObject({ apiVersion: "v1", durableSize: "0" });
      const id = opened.json.uploadId;

      const first = await up.put(id, 0, data.subarray(0, 8 * MiB));
      expect(first.status, first.text).toBe(200);
      expect(first.json).toMatchObject({
        uploadId: id,
        durableSize: String(8 * MiB),
        size: String(data.length),
      });

      // The connection breaks 12+ MiB into the next body: what arrived is kept, and reported.
      await interruptedPut(j, id, 8 * MiB, data.subarray(8 * MiB, 40 * MiB), 20 * MiB);
      const status = await eventually("the durable size after the break", async () => {
        const r = await up.put(id, 0);
        return r.status === 200 ? r : undefined;
      });
      const held = Number(status.json.durableSize);
      expect(held).toBeGreaterThanOrEqual(20 * MiB);
      expect(held).toBeLessThanOrEqual(40 * MiB);

      // Resume one MiB early: the replayed MiB is acknowledged, not refused, and the rest follows
      // in chunks.
      let offset = held - MiB;
      while (offset < data.length) {
        const end = Math.min(offset + 8 * MiB, data.length);
        const r = await up.put(id, offset, data.subarray(offset, end));
        expect(r.status, r.text).toBe(200);
        expect(r.json.durableSize).toBe(String(end));
        offset = end;
      }
      const done = await up.finalize(id);
      expect(done.status, done.text).toBe(200);
      expect(done.json).toEqual({
        apiVersion: "v1",
        name: "dist/app.bin",
        digest,
        size: String(data.length),
        mediaType: "application/octet-stream",
      });
      console.log(
        `50 MiB: open, 8 MiB, interrupted at ${(held / MiB).toFixed(1)} MiB, ` +
          `resumed, finalized in ${Date.now() - t0} ms (${databaseKind}, ${kind} ` +
          `store)`,
      );
      expect(await stored().blobs()).toEqual([digest]);
      expect(await stored().staged()).toEqual([]);
      const identity = await stored().blobIdentity(digest);
      if (cp.plane.artifacts.store.kind === "files") {
        const blob = await stat(join(cp.plane.artifacts.store.dir, "blobs", blobPath(digest)));
        expect(blob.size).toBe(data.length);
        expect(blob.mode & 0o222).toBe(0); // read-only: blobs are immutable
      }

      // The same bytes again, from another job, in one streamed body: one blob, the very same one.
      const k = await job();
      const again = restUploads(k);
      const id2 = (await again.open("copy.bin", data.length, digest)).json.uploadId;
      expect((await again.put(id2, 0, data)).json.durableSize).toBe(String(data.length));
      expect((await again.finalize(id2)).json).toMatchObject({ digest, size: String(data.length) });
      expect(await stored().blobs()).toEqual([digest]);
      expect(await stored().blobIdentity(digest)).toBe(identity);
      expect(await stored().staged()).toEqual([]);
      await Promise.all([j.runner.close(), k.runner.close()]);
    },
  );

  it("a wrong digest is refused at finalize, the upload discarded, and nothing is left in the store", async () => {
    const data = randomBytes(3 * MiB);
    const declared = sha256("something else");
    const j = await job();
    const up = restUploads(j);
    const before = await stored().blobs();
    const id = (await up.open("report.xml", data.length, declared)).json.uploadId;
    expect((await up.put(id, 0, data)).status).toBe(200);
    const refused = await up.finalize(id);
    expect(refused.status).toBe(400);
    expect(refused.json.code).toBe("invalid_argument");
    expect(refused.json.message).toContain(
      `hash to ${sha256(data)}, not the declared ${declared}; it was discarded`,
    );
    expect(await stored().blobs()).toEqual(before);
    expect(await stored().staged()).toEqual([]);
    const late = await up.put(id, 0);
    expect(late.status).toBe(409);
    expect(late.json.message).toContain("was discarded");
    await j.runner.close();
  });

  it("a short upload is refused at finalize, the partial discarded, and nothing is left in the store", async () => {
    const data = randomBytes(MiB);
    const j = await job();
    const up = restUploads(j);
    const before = await stored().blobs();
    const id = (await up.open("short.bin", data.length, sha256(data))).json.uploadId;
    expect((await up.put(id, 0, data.subarray(0, 512 * 1024))).json.durableSize).toBe(
      String(512 * 1024),
    );
    expect(await stored().staged()).toEqual([id]);
    const refused = await up.finalize(id);
    expect(refused.status).toBe(400);
    expect(refused.json).toMatchObject({ code: "failed_precondition" });
    expect(refused.json.message).toContain(
      `holds ${512 * 1024} of its declared ${MiB} bytes; it was discarded`,
    );
    expect(await stored().blobs()).toEqual(before);
    expect(await stored().staged()).toEqual([]);
    await j.runner.close();
  });

  it("a size over the cap (2 GiB by default) is refused at open by name, before any byte moves", async () => {
    const j = await job();
    const up = restUploads(j);
    const before = await stored().blobs();
    const over = await up.open("huge.iso", 2 * 1024 * MiB + 1, sha256("x"));
    expect(over.status).toBe(413);
    expect(over.json.code).toBe("resource_exhausted");
    expect(over.json.message).toContain(
      `artifact "huge.iso" declares ${2 * 1024 * MiB + 1} bytes, over this ` +
        `control plane's cap of ${2 * 1024 * MiB} bytes`,
    );
    expect(await stored().staged()).toEqual([]);
    expect(await stored().blobs()).toEqual(before);
    expect((await up.open("exactly-the-cap.iso", 2 * 1024 * MiB, sha256("x"))).status).toBe(200);
    await j.runner.close();
  });

  it(
    "an exact replay is acknowledged; a gap or different bytes over held " +
      "ones are refused with the durable size",
    async () => {
      const data = randomBytes(2 * MiB);
      const j = await job();
      const up = restUploads(j);
      const id = (await up.open("x.bin", data.length, sha256(data))).json.uploadId;
      expect((await up.put(id, 0, data.subarray(0, MiB))).json.durableSize).toBe(String(MiB));
      const replay = await up.put(id, 0, data.subarray(0, MiB));
      expect(replay.status).toBe(200);
      expect(replay.json.durableSize).toBe(String(MiB));

      const gap = await up.put(id, MiB + 1, data.subarray(MiB + 1, MiB + 100));
      expect(gap.status).toBe(409);
      expect(gap.headers["forelead-upload-offset"]).toBe(String(MiB));
      expect(gap.json.message).toContain(`offset ${MiB + 1} leaves a gap`);

      const changed = Buffer.from(data.subarray(MiB - 10, MiB + 10));
      changed[0] = changed[0]! ^ 0xff;
      const overlap = await up.put(id, MiB - 10, changed);
      expect(overlap.status).toBe(409);
      expect(overlap.headers["forelead-upload-offset"]).toBe(String(MiB));
      expect(overlap.json.message).toContain("differ from those upload");

      // A body longer than declared: nothing past the declared size is written; what came before is
      // kept.
      const past = await up.put(id, MiB, Buffer.concat([data.subarray(MiB), Buffer.from("extra")]));
      expect(past.status).toBe(413);
      expect(past.json.message).toContain("runs past the declared size");
      const kept = Number(past.headers["forelead-upload-offset"]);
      expect(kept).toBeGreaterThanOrEqual(MiB);
      // 2 MiB when the extra bytes arrive in a frame of their own
      expect(kept).toBeLessThanOrEqual(2 * MiB);
      expect((await up.put(id, 0)).json.durableSize).toBe(String(kept));
      expect((await up.put(id, kept, data.subarray(kept))).json.durableSize).toBe(String(2 * MiB));
      expect((await up.finalize(id)).json.digest).toBe(sha256(data));
      // finalize again: the same answer
      expect((await up.finalize(id)).json.digest).toBe(sha256(data));
      await j.runner.close();
    },
  );

  it.each([
    ["an absolute path", "/etc/passwd", "is an absolute path"],
    ["a leading ..", "../escape", 'has a ".." segment'],
    ["an inner ..", "a/../../b", 'has a ".." segment'],
    ["an empty segment", "a//b", "has an empty segment"],
    ["a . segment", "a/./b", 'has a "." segment'],
    ["a trailing /", "trailing/", "has an empty segment"],
    ["a NUL", "nul\u0000byte", 'field "name" contains NUL (U+0000)'],
    ["an empty name", "", "is empty"],
    ["1025 bytes", "x".repeat(1025), "is longer than 1024 bytes"],
  ])("a name with %s is refused at open", async (_label, name, problem) => {
    const j = await job();
    const reply = await restUploads(j).open(name, 1, sha256("x"));
    expect(reply.status).toBe(400);
    expect(reply.json.code).toBe("invalid_argument");
    expect(reply.json.message).toContain(problem);
    await j.runner.close();
  });

  it(
    "uploads are lease-scoped: a released lease cannot put or finalize, and " +
      "the sweep discards what it left",
    async () => {
      const data = randomBytes(1000);
      const j = await job();
      const up = restUploads(j);
      const id = (await up.open("a.txt", data.length, sha256(data), "text/plain")).json.uploadId;
      expect((await up.put(id, 0, data.subarray(0, 500))).status).toBe(200);
      const stranger = await leasedJob(cp, admin, "r2", j.workspaceId + "x");
      const foreign = await restUploads({ ...stranger, jobId: j.jobId }).put(id, 0);
      expect(foreign.status).toBe(404); // another workspace's job does not exist for this runner
      expect((await j.runner.release(j.jobId, j.token)).status).toBe(204);
      const dead = await up.put(id, 500, data.subarray(500));
      expect(dead.status).toBe(409);
      expect(dead.json.message).toContain("was released");
      expect((await up.finalize(id)).status).toBe(409);
      expect(await stored().staged()).toContain(id);
      await cp.plane.artifacts.sweep();
      expect(await stored().staged()).not.toContain(id);
      await Promise.all([j.runner.close(), stranger.runner.close()]);
    },
  );

  it("a put without the lease headers or with a malformed offset is refused before any byte is written", async () => {
    const j = await job();
    const up = restUploads(j);
    const id = (await up.open("a.txt", 3, sha256("abc"))).json.uploadId;
    const noVersion = await j.runner.rest.request(
      "PUT",
      `/v1/runner/uploads/${id}`,
      Buffer.from("abc"),
      { ...up.headers(0), "forelead-api-version": "" },
    );
    expect(noVersion.status).toBe(400);
    expect(noVersion.json.message).toContain("apiVersion is required");
    const badOffset = await j.runner.rest.request(
      "PUT",
      `/v1/runner/uploads/${id}`,
      Buffer.from("abc"),
      { ...up.headers(0), "forelead-upload-offset": "ten" },
    );
    expect(badOffset.status).toBe(400);
    expect(badOffset.json.message).toContain("header forelead-upload-offset");
    expect((await up.put(id, 0)).json.durableSize).toBe("0");
    await j.runner.close();
  });
});

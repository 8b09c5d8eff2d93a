import "reflect-metadata";
import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { leasedJob, type LeasedJob } from "../support/actors.js";
import {
  artifactStoreKinds,
  artifactStoreOptions,
  restUploads,
  sha256,
  storedArtifacts,
} from "../support/artifacts.js";
import { createTestClient, rpcProtocols } from "../support/clients.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

const KiB = 1024;

/** Uploads `data` as `name` under the job's lease over REST and returns the manifest entry. */
async function uploaded(j: LeasedJob, name: string, data: Buffer, mediaType = "") {
  const up = restUploads(j);
  const opened = await up.open(name, data.length, sha256(data), mediaType);
  expect(opened.status, opened.text).toBe(200);
  expect((await up.put(opened.json.uploadId, 0, data)).status).toBe(200);
  const done = await up.finalize(opened.json.uploadId);
  expect(done.status, done.text).toBe(200);
  return {
    name: done.json.name,
    digest: done.json.digest,
    size: done.json.size,
    mediaType: done.json.mediaType,
  };
}

describe.each(artifactStoreKinds)(`results on completion (${databaseKind}, %s store)`, (kind) => {
  const cp = useControlPlane(artifactStoreOptions(kind));
  const { admin } = cp;
  let counter = 0;
  const fresh = () => `res${++counter}`;

  it(
    "a completion lists its artifacts; the job lists them; a download " +
      "returns the same bytes with Content-Length and the digest",
    async () => {
      const report = Buffer.from('<testsuite tests="3"/>\n');
      const binary = randomBytes(700 * KiB + 3);
      const j = await leasedJob(cp, admin, "r1", fresh());
      const manifest = [
        await uploaded(j, "reports/junit.xml", report, "application/xml"),
        await uploaded(j, "bin/app", binary),
      ];
      const done = await j.runner.complete(j.jobId, j.token, { artifacts: manifest });
      expect(done.status, done.text).toBe(200);
      expect(done.json.job).toMatchObject({ state: "succeeded", artifacts: manifest });
      expect((await admin.job(j.jobId)).json.job.artifacts).toEqual(manifest);
      const listed = await admin.rest.request("GET", `/v1/admin/jobs/${j.jobId}/artifacts`);
      expect(listed.json).toEqual({ apiVersion: "v1", artifacts: manifest });

      for (const [name, bytes] of [
        ["reports/junit.xml", report],
        ["bin/app", binary],
      ] as const) {
        const got = await downloadRaw(j.jobId, name);
        expect(got.status).toBe(200);
        // never the runner's declared type
        expect(got.headers["content-type"]).toBe("application/octet-stream");
        expect(got.headers["content-length"]).toBe(String(bytes.length));
        expect(got.headers["forelead-artifact-digest"]).toBe(sha256(bytes));
        expect(sha256(got.body)).toBe(sha256(bytes));
      }
      expect(
        (await downloadRaw(j.jobId, "reports/junit.xml")).headers["forelead-artifact-media-type"],
      ).toBe("application/xml");
      const missing = await admin.rest.request(
        "GET",
        `/v1/admin/jobs/${j.jobId}/artifacts/content?name=nope`,
      );
      expect(missing.status).toBe(404);

      // The same completion again gets the stored reply; one with another manifest is refused.
      const again = await j.runner.complete(j.jobId, j.token, { artifacts: manifest });
      expect(again.status).toBe(200);
      expect(again.json.job.artifacts).toEqual(manifest);
      expect(
        (await j.runner.complete(j.jobId, j.token, { artifacts: manifest.slice(1) })).status,
      ).toBe(409);
      await j.runner.close();
    },
  );

  it("a manifest naming a digest finalized under another job is refused and the job stays unsettled", async () => {
    const ws = fresh();
    const secret = Buffer.from("another job's output");
    const other = await leasedJob(cp, admin, "r1", ws);
    const foreign = await uploaded(other, "secret.txt", secret);
    const j = await leasedJob(cp, admin, "r2", ws); // same workspace, even
    const mine = await uploaded(j, "mine.txt", Buffer.from("mine"));

    const refused = await j.runner.complete(j.jobId, j.token, {
      artifacts: [mine, { ...foreign, name: "stolen.txt" }],
    });
    expect(refused.status).toBe(400);
    expect(refused.json.code).toBe("failed_precondition");
    expect(refused.json.message).toContain(
      `names ${foreign.digest}, which was not uploaded and finalized under a lease of job ${j.jobId}`,
    );
    const never = await j.runner.complete(j.jobId, j.token, {
      artifacts: [{ name: "x", digest: sha256("never uploaded"), size: "14", mediaType: "" }],
    });
    expect(never.status).toBe(400);
    const wrongSize = await j.runner.complete(j.jobId, j.token, {
      artifacts: [{ ...mine, size: "5" }],
    });
    expect(wrongSize.status).toBe(400);
    expect(wrongSize.json.message).toContain("holds 4");
    const badName = await j.runner.complete(j.jobId, j.token, {
      artifacts: [{ ...mine, name: "../../etc/cron.d/x" }],
    });
    expect(badName.status).toBe(400);
    const twice = await j.runner.complete(j.jobId, j.token, { artifacts: [mine, mine] });
    expect(twice.json.message).toContain("appears twice");

    const job = (await admin.job(j.jobId)).json.job;
    expect(job.state).toBe("running");
    expect(job.artifacts).toBeUndefined();
    const ok = await j.runner.complete(j.jobId, j.token, { artifacts: [mine] });
    expect(ok.status, ok.text).toBe(200);
    expect(ok.json.job.artifacts).toEqual([mine]);
    await Promise.all([j.runner.close(), other.runner.close()]);
  });

  it("an artifact uploaded under an earlier attempt of the same job may be listed by a later one", async () => {
    const ws = fresh();
    const j = await leasedJob(cp, admin, "r1", ws);
    const early = await uploaded(j, "early.log", Buffer.from("attempt 1"));
    expect((await j.runner.release(j.jobId, j.token)).status).toBe(204);
    const retry = await j.runner.claim();
    expect(retry.json.job.id).toBe(j.jobId);
    const done = await j.runner.complete(j.jobId, retry.json.token, { artifacts: [early] });
    expect(done.status, done.text).toBe(200);
    expect(done.json.job.artifacts).toEqual([early]);
    await j.runner.close();
  });

  it.each(rpcProtocols)(
    "the whole round trip through generated clients (%s): chunks in, chunks out",
    async (protocol) => {
      const ws = fresh();
      const runnerCert = await cp.pki.runner("g1", ws);
      const runner = createTestClient(
        RunnerService,
        cp.url,
        cp.pki.ca.certPem,
        runnerCert,
        protocol,
      );
      const adminClient = createTestClient(
        AdminService,
        cp.url,
        cp.pki.ca.certPem,
        await cp.pki.service("test-admin"),
        protocol,
      );
      await runner.register({
        apiVersion: "v1",
        runnerId: "g1",
        workspaceId: ws,
        slots: 1,
        labels: ["linux"],
      });
      const { job } = await adminClient.enqueueJob({
        apiVersion: "v1",
        workspaceId: ws,
        labels: ["linux"],
        spec: { image: "busybox", argv: ["true"] },
      });
      const { lease } = await runner.claim({ apiVersion: "v1", runnerId: "g1" });
      const lc = { apiVersion: "v1", jobId: job!.id, leaseToken: lease!.token };
      const data = randomBytes(900 * KiB);
      const opened = await runner.openUpload({
        ...lc,
        name: "out/data.bin",
        size: BigInt(data.length),
        digest: sha256(data),
      });
      expect(opened.durableSize).toBe(0n);
      async function* chunks(from: number) {
        for (let at = from; at < data.length; at += 128 * KiB) {
          yield at === from
            ? {
                ...lc,
                uploadId: opened.uploadId,
                offset: BigInt(from),
                data: data.subarray(at, at + 128 * KiB),
              }
            : { data: data.subarray(at, at + 128 * KiB) };
        }
      }
      const half = await runner.putUpload(
        (async function* () {
          let n = 0;
          // the client stops after three chunks
          for await (const m of chunks(0)) if (n++ < 3) yield m;
        })(),
      );
      expect(half.durableSize).toBe(BigInt(384 * KiB));
      const gap = await runner
        .putUpload(
          (async function* () {
            yield {
              ...lc,
              uploadId: opened.uploadId,
              offset: BigInt(500 * KiB),
              data: data.subarray(500 * KiB),
            };
          })(),
        )
        .catch((e) => e);
      expect(ConnectError.from(gap).code).toBe(Code.Aborted);
      const rest = await runner.putUpload(chunks(384 * KiB));
      expect(rest).toMatchObject({ durableSize: BigInt(data.length), size: BigInt(data.length) });
      const stored = await runner.finalizeUpload({ ...lc, uploadId: opened.uploadId });
      expect(stored.digest).toBe(sha256(data));
      const done = await runner.complete({
        ...lc,
        completionId: "c1",
        outcome: "succeeded",
        exitCode: 0,
        artifacts: [
          {
            name: stored.name,
            digest: stored.digest,
            size: stored.size,
            mediaType: stored.mediaType,
          },
        ],
      });
      expect(done.job?.artifacts.map((a) => a.name)).toEqual(["out/data.bin"]);

      const parts: Uint8Array[] = [];
      let head: { digest: string; size: bigint } | undefined;
      for await (const msg of adminClient.downloadArtifact({
        jobId: job!.id,
        name: "out/data.bin",
      })) {
        head ??= { digest: msg.digest, size: msg.size };
        parts.push(msg.data);
      }
      expect(head).toEqual({ digest: sha256(data), size: BigInt(data.length) });
      expect(sha256(Buffer.concat(parts))).toBe(sha256(data));
      expect((await adminClient.listJobArtifacts({ jobId: job!.id })).artifacts).toHaveLength(1);
    },
  );

  it(
    "a blob damaged in the store is never served as the artifact: the " +
      "download breaks instead of completing",
    async () => {
      const data = randomBytes(300 * KiB);
      const j = await leasedJob(cp, admin, "r1", fresh());
      const entry = await uploaded(j, "fragile.bin", data);
      expect((await j.runner.complete(j.jobId, j.token, { artifacts: [entry] })).status).toBe(200);
      expect((await downloadRaw(j.jobId, "fragile.bin")).status).toBe(200); // intact, it downloads
      await storedArtifacts(cp.plane).damage(entry.digest, 1000);
      const got = await downloadRaw(j.jobId, "fragile.bin").catch((err: Error) => err);
      // the stream is reset: never a clean 200 with the wrong bytes
      expect(got).toBeInstanceOf(Error);
      await j.runner.close();
    },
  );

  /** GET an artifact's bytes over REST, keeping the body binary. */
  function downloadRaw(
    jobId: string,
    name: string,
  ): Promise<{ status: number; headers: Record<string, unknown>; body: Buffer }> {
    return new Promise((resolve, reject) => {
      const stream = admin.rest.session.request({
        ":method": "GET",
        ":path": `/v1/admin/jobs/${jobId}/artifacts/content?name=${encodeURIComponent(name)}`,
      });
      const chunks: Buffer[] = [];
      let headers: Record<string, unknown> = {};
      stream.on("response", (h) => (headers = h));
      stream.on("data", (c: Buffer) => chunks.push(c));
      stream.on("error", reject);
      stream.on("end", () =>
        stream.rstCode && stream.rstCode !== 0
          ? reject(new Error(`reset ${stream.rstCode}`))
          : resolve({ status: Number(headers[":status"]), headers, body: Buffer.concat(chunks) }),
      );
      stream.end();
    });
  }
});

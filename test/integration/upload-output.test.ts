import "reflect-metadata";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type Client } from "@connectrpc/connect";
import { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { uploadOutput, type UploadClient } from "../../src/runner/output/upload-output.js";
import { sha256, storedArtifacts } from "../support/artifacts.js";
import { createTestClient } from "../support/clients.js";
import { startTestControlPlane } from "../support/control-plane.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

const cp = useControlPlane();
let dir: string;
let adminClient: Client<typeof AdminService>;
let counter = 0;

beforeAll(async () => {
  adminClient = createTestClient(
    AdminService,
    cp.url,
    cp.pki.ca.certPem,
    await cp.pki.service("test-admin"),
    "grpc",
  );
});
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "forelead-output-"));
  return () => rm(dir, { recursive: true, force: true });
});

/** A runner (generated gRPC client) holding a lease on a fresh job. */
async function leased() {
  const ws = `out${++counter}`;
  const runner = createTestClient(
    RunnerService,
    cp.url,
    cp.pki.ca.certPem,
    await cp.pki.runner("r1", ws),
    "grpc",
  );
  await runner.register({
    apiVersion: "v1",
    runnerId: "r1",
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
  const { lease } = await runner.claim({ apiVersion: "v1", runnerId: "r1" });
  return { runner, jobId: job!.id, leaseToken: lease!.token };
}

async function download(jobId: string, name: string): Promise<Buffer> {
  const parts: Uint8Array[] = [];
  for await (const m of adminClient.downloadArtifact({ jobId, name })) parts.push(m.data);
  return Buffer.concat(parts);
}

describe(`the runner uploads /output (${databaseKind})`, () => {
  it("uploads each regular file, completes with the manifest, and downloads return the same bytes", async () => {
    const big = randomBytes(3 * 1024 * 1024 + 17);
    await mkdir(join(dir, "reports/unit"), { recursive: true });
    await writeFile(join(dir, "summary.txt"), "3 passed\n");
    await writeFile(join(dir, "reports/unit/junit.xml"), "<testsuite/>");
    await writeFile(join(dir, "app.tar.gz"), big);
    await writeFile(join(dir, "empty"), "");
    const { runner, jobId, leaseToken } = await leased();
    const result = await uploadOutput({ client: runner, jobId, leaseToken, dir });
    expect(result.skipped).toEqual([]);
    expect(result.artifacts.map((a) => [a.name, a.mediaType])).toEqual([
      ["app.tar.gz", "application/gzip"],
      ["empty", "application/octet-stream"],
      ["reports/unit/junit.xml", "application/xml"],
      ["summary.txt", "text/plain"],
    ]);
    const done = await runner.complete({
      apiVersion: "v1",
      jobId,
      leaseToken,
      completionId: "c1",
      outcome: "succeeded",
      exitCode: 0,
      artifacts: result.artifacts,
    });
    expect(done.job?.artifacts.map((a) => a.name)).toEqual(result.artifacts.map((a) => a.name));
    for (const a of result.artifacts)
      expect(sha256(await download(jobId, a.name))).toBe(sha256(await readFile(join(dir, a.name))));
    expect(sha256(await download(jobId, "app.tar.gz"))).toBe(sha256(big));
  });

  it("an output holding a symlink to /etc/passwd (and one to /etc) uploads nothing from outside it", async () => {
    const passwd = await readFile("/etc/passwd");
    await mkdir(join(dir, "sub"));
    await writeFile(join(dir, "sub/ok.txt"), "inside");
    await symlink("/etc/passwd", join(dir, "passwd"));
    await symlink("/etc", join(dir, "etc"));
    await symlink("../../../../../../etc/passwd", join(dir, "sub/relative"));
    execFileSync("mkfifo", [join(dir, "pipe")]);
    const { runner, jobId, leaseToken } = await leased();
    const before = await storedArtifacts(cp.plane).blobs();
    const result = await uploadOutput({ client: runner, jobId, leaseToken, dir });
    expect(result.artifacts.map((a) => a.name)).toEqual(["sub/ok.txt"]);
    expect(result.skipped).toEqual([
      { name: "etc", reason: "a symbolic link (never followed)" },
      { name: "passwd", reason: "a symbolic link (never followed)" },
      { name: "pipe", reason: "not a regular file (a device, FIFO or socket)" },
      { name: "sub/relative", reason: "a symbolic link (never followed)" },
    ]);
    const blobs = await storedArtifacts(cp.plane).blobs();
    expect(blobs.filter((b) => !before.includes(b))).toEqual([sha256("inside")]);
    expect(blobs).not.toContain(sha256(passwd));
    expect(await storedArtifacts(cp.plane).staged()).toEqual([]);
  });

  it("an output directory that is itself a symlink is not followed", async () => {
    await mkdir(join(dir, "real"));
    await writeFile(join(dir, "real/file"), "x");
    await symlink(join(dir, "real"), join(dir, "output"));
    const { runner, jobId, leaseToken } = await leased();
    const result = await uploadOutput({
      client: runner,
      jobId,
      leaseToken,
      dir: join(dir, "output"),
    });
    expect(result.artifacts).toEqual([]);
    expect(result.skipped[0]?.reason).toContain("not a directory");
  });

  it("a put that breaks part way is resumed from the durable size the control plane reports", async () => {
    const data = randomBytes(2 * 1024 * 1024);
    await writeFile(join(dir, "data.bin"), data);
    const { runner, jobId, leaseToken } = await leased();
    const offsets: bigint[] = [];
    let puts = 0;
    // The first put's body fails after 5 chunks of 64 KiB: the connection to the control plane
    // broke.
    const flaky: UploadClient = {
      openUpload: (req, opts) => runner.openUpload(req, opts),
      finalizeUpload: (req, opts) => runner.finalizeUpload(req, opts),
      putUpload: (reqs, opts) => {
        const n = ++puts;
        return runner.putUpload(
          (async function* () {
            let sent = 0;
            for await (const m of reqs) {
              if (m.offset !== undefined && (m.data?.length ?? 0) > 0) offsets.push(m.offset);
              if (n === 1 && sent++ === 5) throw new Error("connection reset by peer");
              yield m;
            }
          })(),
          opts,
        );
      },
    };
    const result = await uploadOutput({
      client: flaky,
      jobId,
      leaseToken,
      dir,
      chunkBytes: 64 * 1024,
      retryDelayMs: 10,
    });
    expect(result.artifacts).toEqual([
      {
        name: "data.bin",
        digest: sha256(data),
        size: BigInt(data.length),
        mediaType: "application/octet-stream",
      },
    ]);
    expect(offsets[0]).toBe(0n);
    expect(offsets.length).toBe(2); // one resumed put, after one status query
    expect(offsets[1]!).toBeGreaterThan(0n); // it did not start over
    expect(offsets[1]!).toBeLessThanOrEqual(5n * 64n * 1024n);
    const done = await runner.complete({
      apiVersion: "v1",
      jobId,
      leaseToken,
      completionId: "c1",
      outcome: "succeeded",
      exitCode: 0,
      artifacts: result.artifacts,
    });
    expect(done.job?.state).toBe("succeeded");
    expect(sha256(await download(jobId, "data.bin"))).toBe(sha256(data));
  });

  it("a file over the control plane's cap is skipped with its reason, and the rest uploads", async () => {
    const small = await startTestControlPlane({ maxArtifactBytes: 1000 });
    try {
      await writeFile(join(dir, "too-big.bin"), randomBytes(1001));
      await mkdir(join(dir, "sub"));
      await writeFile(join(dir, "sub", "ok.txt"), "fits\n");
      const runner = createTestClient(
        RunnerService,
        small.url,
        small.pki.ca.certPem,
        await small.pki.runner("r1", "w1"),
        "connect-binary",
      );
      const admin = createTestClient(
        AdminService,
        small.url,
        small.pki.ca.certPem,
        await small.pki.service("test-admin"),
        "connect-binary",
      );
      await runner.register({
        apiVersion: "v1",
        runnerId: "r1",
        workspaceId: "w1",
        slots: 1,
        labels: ["linux"],
      });
      const { job } = await admin.enqueueJob({
        apiVersion: "v1",
        workspaceId: "w1",
        labels: ["linux"],
        spec: { image: "busybox", argv: ["true"] },
      });
      const { lease } = await runner.claim({ apiVersion: "v1", runnerId: "r1" });
      const manifest = await uploadOutput({
        client: runner,
        jobId: job!.id,
        leaseToken: lease!.token,
        dir,
      });
      expect(manifest.artifacts.map((a) => a.name)).toEqual(["sub/ok.txt"]);
      expect(manifest.skipped).toEqual([
        {
          name: "too-big.bin",
          reason: expect.stringContaining(
            "declares 1001 bytes, over this control plane's cap of 1000 bytes",
          ),
        },
      ]);
      expect(await storedArtifacts(small.plane).staged()).toEqual([]);
    } finally {
      await small.close();
    }
  });
});

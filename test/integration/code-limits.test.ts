import { randomBytes } from "node:crypto";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { createTestClient } from "../support/clients.js";
import {
  leaseCodeJob,
  publishBundle,
  registerRepository,
  requestBundle,
} from "../support/code-actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { createTestOrigin, git, type TestOrigin } from "../support/git-repos.js";

// The 256 MiB cap lowered to 256 KiB by configuration, and a 300 KiB repository of random
// (incompressible) bytes: the same rule as a 300 MiB repository against the real cap, in test time.
const cap = 256 * 1024;
let codeDir: string;
const cp = useControlPlane(async () => {
  codeDir = await mkdtemp(join(tmpdir(), "forelead-codedir-"));
  return { maxBundleBytes: cap, codeDir };
});
const { admin } = cp;
let origin: TestOrigin;
let n = 0;
const freshWorkspace = () => `lim${++n}`;

beforeAll(async () => {
  origin = await createTestOrigin();
  await origin.commit("huge", { "random.bin": randomBytes(300 * 1024) });
  expect((await registerRepository(admin, "app", origin.path)).status).toBe(200);
});
afterAll(async () => {
  await origin?.remove();
  await rm(codeDir, { recursive: true, force: true });
});

/** A bundle of `commits` made in the origin's work clone. */
async function originBundle(name: string, ...revs: string[]): Promise<Buffer> {
  await git(origin.work, ["bundle", "create", "--quiet", name, ...revs]);
  return readFile(join(origin.work, name));
}

describe(`bundle cap (${databaseKind})`, () => {
  it(
    "a base bundle of a 300 KiB repository over a 256 KiB cap is refused " +
      "with 413 before any byte, and leaves no file behind",
    async () => {
      const ws = freshWorkspace();
      const { runner, jobId, token, lease } = await leaseCodeJob(cp, admin, ws, "r1", {
        repository: "app",
        targetBranch: "huge",
      });
      const reply = await requestBundle(runner, jobId, token, "base", lease.job.baseCommit!);
      expect(reply.status, reply.text.slice(0, 200)).toBe(413);
      expect(reply.headers["content-type"]).toBe("application/json");
      expect(reply.json).toEqual({
        code: "resource_exhausted",
        message: `the bundle of ${lease.job.baseCommit} is larger than the 256 KiB cap on bundles; it was not sent`,
      });
      expect(await readdir(join(codeDir, "scratch"))).toEqual([]);

      const client = createTestClient(
        RunnerService,
        cp.url,
        cp.pki.ca.certPem,
        await cp.pki.runner("r1", ws),
        "connect-binary",
      );
      let received = 0;
      const err = await (async () => {
        for await (const c of client.codeBundle({
          apiVersion: "v1",
          jobId,
          leaseToken: token,
          kind: "base",
          commit: lease.job.baseCommit!,
        }))
          received += c.data.length;
      })().then(
        () => undefined,
        (e) => ConnectError.from(e),
      );
      expect(err?.code).toBe(Code.ResourceExhausted);
      expect(received).toBe(0);
      await runner.close();
    },
  );

  it("a publish bundle over the cap is refused with 413 and nothing is pushed", async () => {
    const ws = freshWorkspace();
    const { runner, jobId, token } = await leaseCodeJob(cp, admin, ws, "a1", {
      kind: "agent",
      repository: "app",
      targetBranch: "main",
    });
    const before = await origin.refs();
    const big = await originBundle("big.bundle", "huge", "^main");
    expect(big.length).toBeGreaterThan(cap);
    const reply = await publishBundle(runner, jobId, token, big);
    expect(reply.status, reply.text).toBe(413);
    expect(reply.json.message).toContain(
      `over the ${cap}-byte cap on bundles; it was refused whole`,
    );
    expect(await origin.refs()).toBe(before);
    expect(await readdir(join(codeDir, "scratch"))).toEqual([]);
    await runner.close();
  });
});

describe(`corrupt publish bundles (${databaseKind})`, () => {
  it(
    "a corrupt, truncated, foreign or empty bundle, or one without its lease " +
      "headers, is refused with 400 and the repository is unchanged",
    async () => {
      const ws = freshWorkspace();
      const { runner, jobId, token } = await leaseCodeJob(cp, admin, ws, "a2", {
        kind: "agent",
        repository: "app",
        targetBranch: "main",
      });
      await git(origin.work, ["checkout", "--quiet", "-B", "candidate", "main"]);
      await git(origin.work, ["commit", "--quiet", "--allow-empty", "-m", "candidate"]);
      const good = await originBundle("good.bundle", "candidate", "^main");
      const headerEnd = good.indexOf("\n\n") + 2;
      const flipped = Buffer.from(good);
      // the pack's bytes, header intact
      for (let i = headerEnd + 12; i < flipped.length - 20; i += 7) flipped[i] = flipped[i]! ^ 0xff;
      const before = await origin.refs();
      const cases: Array<[string, Buffer, string]> = [
        ["flipped pack bytes", flipped, "the bundle"],
        ["truncated", good.subarray(0, good.length - 30), "the bundle"],
        ["not a bundle", Buffer.from("hello, this is not a git bundle\n"), "does not verify"],
        ["empty body", Buffer.alloc(0), "the request body is empty"],
      ];
      for (const [what, bytes, message] of cases) {
        const reply = await publishBundle(runner, jobId, token, bytes);
        expect(reply.status, `${what}: ${reply.text}`).toBe(400);
        expect(reply.json.message, what).toContain(message);
        expect(await origin.refs(), what).toBe(before);
      }
      const noVersion = await runner.rest.request("POST", "/v1/runner/agent/publish", good, {
        "content-type": "application/x-git-bundle",
        "forelead-job-id": jobId,
        "forelead-lease-token": token,
      });
      expect(noVersion.status).toBe(400);
      expect(noVersion.json.message).toContain("apiVersion is required");
      const noToken = await runner.rest.request("POST", "/v1/runner/agent/publish", good, {
        "content-type": "application/x-git-bundle",
        "forelead-api-version": "v1",
        "forelead-job-id": jobId,
      });
      expect(noToken.status).toBe(400);
      expect(noToken.json.message).toContain("leaseToken is required");
      const wrongType = await runner.rest.request("POST", "/v1/runner/agent/publish", good, {
        "content-type": "application/json",
        "forelead-api-version": "v1",
        "forelead-job-id": jobId,
        "forelead-lease-token": token,
      });
      expect(wrongType.status).toBe(400);
      expect(wrongType.json.message).toContain("send the request body as application/x-git-bundle");
      expect((await admin.job(jobId)).json.job.publishedCommit).toBeUndefined();
      // The same lease then publishes the good bundle: refusals left nothing behind that gets in the
      // way.
      const ok = await publishBundle(runner, jobId, token, good);
      expect(ok.status, ok.text).toBe(200);
      expect(await origin.branchHead(`forelead/jobs/${jobId}`)).toBe(ok.json.commit);
      await runner.close();
    },
  );
});

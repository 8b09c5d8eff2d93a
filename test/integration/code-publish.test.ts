import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { checkoutBase, importBundle } from "../../src/runner/checkout/checkout.js";
import { adminActor, runnerActor } from "../support/actors.js";
import { createTestClient } from "../support/clients.js";
import {
  emptyRepo,
  importBundleBytes,
  leaseCodeJob,
  publishBundle,
  registerRepository,
  requestBundle,
  type CodeLease,
} from "../support/code-actors.js";
import { startTestControlPlane, type TestControlPlane } from "../support/control-plane.js";
import { createTestDatabase, databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { createTestOrigin, git, type TestOrigin } from "../support/git-repos.js";

const cp = useControlPlane();
const { admin } = cp;
let origin: TestOrigin;
let n = 0;
const freshWorkspace = () => `pub${++n}`;

beforeAll(async () => {
  origin = await createTestOrigin();
  expect((await registerRepository(admin, "app", origin.path)).status).toBe(200);
});
afterAll(async () => {
  await origin?.remove();
});

/**
 * The runner's side of an agent job: check out the base, commit `files` on top, bundle the new
 * commit thin on the base.
 */
async function agentWork(
  plane: TestControlPlane,
  lease: CodeLease,
  workspaceId: string,
  files: Record<string, string>,
): Promise<{ dir: string; commit: string; bundle: Buffer }> {
  const client = createTestClient(
    RunnerService,
    plane.url,
    plane.pki.ca.certPem,
    await plane.pki.runner(lease.runner.runnerId, workspaceId),
    "connect-binary",
  );
  const dir = join(await mkdtemp(join(tmpdir(), "forelead-agent-")), "work");
  const base = lease.lease.job.baseCommit!;
  await checkoutBase(
    {
      jobId: lease.jobId,
      leaseToken: lease.token,
      baseCommit: base,
      baseTree: lease.lease.job.baseTree!,
    },
    { client, dir },
  );
  await git(dir, ["checkout", "--quiet", "-b", "work"]);
  for (const [name, content] of Object.entries(files))
    await git(dir, ["hash-object", "-w", "--stdin"], Buffer.from(content)).then((blob) =>
      git(dir, ["update-index", "--add", "--cacheinfo", `100644,${blob},${name}`]),
    );
  await git(dir, ["commit", "--quiet", "-m", "agent change"]);
  const bundleFile = join(dir, ".git", "out.bundle");
  await git(dir, ["bundle", "create", "--quiet", bundleFile, "refs/heads/work", `^${base}`]);
  return { dir, commit: await git(dir, ["rev-parse", "HEAD"]), bundle: await readFile(bundleFile) };
}

describe(`publish (${databaseKind})`, () => {
  it(
    "an agent job publishes a commit on its base: verified, pushed to " +
      "forelead/jobs/<jobId>, recorded, then served as a published bundle",
    async () => {
      const ws = freshWorkspace();
      await origin.commit("feature", { "f.txt": "base\n" });
      const lease = await leaseCodeJob(cp, admin, ws, "a1", {
        kind: "agent",
        repository: "app",
        targetBranch: "feature",
      });
      const work = await agentWork(cp, lease, ws, { "agent.txt": "written by the agent\n" });

      const reply = await publishBundle(lease.runner, lease.jobId, lease.token, work.bundle);
      expect(reply.status, reply.text).toBe(200);
      expect(reply.json).toEqual({
        apiVersion: "v1",
        commit: work.commit,
        branch: `forelead/jobs/${lease.jobId}`,
      });
      expect(await origin.branchHead(`forelead/jobs/${lease.jobId}`)).toBe(work.commit);
      // the target branch is not touched
      expect(await origin.branchHead("feature")).toBe(lease.lease.job.baseCommit);
      expect((await admin.job(lease.jobId)).json.job).toMatchObject({
        publishedCommit: work.commit,
        publishedBranch: `forelead/jobs/${lease.jobId}`,
      });

      const published = await requestBundle(
        lease.runner,
        lease.jobId,
        lease.token,
        "published",
        work.commit,
      );
      expect(published.status, published.text).toBe(200);
      const repo = await emptyRepo();
      await importBundleBytes(
        repo,
        (
          await requestBundle(
            lease.runner,
            lease.jobId,
            lease.token,
            "base",
            lease.lease.job.baseCommit!,
          )
        ).body,
        "base.bundle",
      );
      await importBundleBytes(repo, published.body, "published.bundle");
      expect(await git(repo, ["rev-parse", `${work.commit}^{tree}`])).toBe(
        await git(work.dir, ["rev-parse", "HEAD^{tree}"]),
      );
      const wrong = await requestBundle(
        lease.runner,
        lease.jobId,
        lease.token,
        "published",
        lease.lease.job.baseCommit!,
      );
      expect(wrong.status).toBe(400);
      expect(wrong.json.message).toContain(
        `is not job ${lease.jobId}'s published commit ${work.commit}`,
      );
      await lease.runner.close();
    },
  );

  it("a publish through a generated client, in chunks, gives the same result", async () => {
    const ws = freshWorkspace();
    const lease = await leaseCodeJob(cp, admin, ws, "g1", {
      kind: "agent",
      repository: "app",
      targetBranch: "main",
    });
    const work = await agentWork(cp, lease, ws, { "g.txt": "x".repeat(200_000) });
    const client = createTestClient(
      RunnerService,
      cp.url,
      cp.pki.ca.certPem,
      await cp.pki.runner("g1", ws),
      "grpc",
    );
    const pieces = async function* () {
      for (let i = 0; i < work.bundle.length; i += 1000)
        yield {
          apiVersion: i === 0 ? "v1" : "",
          jobId: lease.jobId,
          leaseToken: i === 0 ? lease.token : "",
          data: work.bundle.subarray(i, i + 1000),
        };
    };
    const out = await client.agentPublish(pieces());
    expect(out).toMatchObject({
      apiVersion: "v1",
      commit: work.commit,
      branch: `forelead/jobs/${lease.jobId}`,
    });
    expect(await origin.branchHead(`forelead/jobs/${lease.jobId}`)).toBe(work.commit);
    await lease.runner.close();
  });

  it(
    "a publish is refused, and nothing pushed, for a commit not descending " +
      "from the base, the base itself, two commits, or a checkout job",
    async () => {
      const ws = freshWorkspace();
      const lease = await leaseCodeJob(cp, admin, ws, "a2", {
        kind: "agent",
        repository: "app",
        targetBranch: "main",
      });
      const base = lease.lease.job.baseCommit!;
      const before = await origin.refs();

      const stranger = await emptyRepo("forelead-stranger-");
      await git(stranger, ["commit", "--quiet", "--allow-empty", "-m", "unrelated root"]);
      await git(stranger, ["bundle", "create", "--quiet", "u.bundle", "HEAD"]);
      const unrelated = await publishBundle(
        lease.runner,
        lease.jobId,
        lease.token,
        await readFile(join(stranger, "u.bundle")),
      );
      expect(unrelated.status, unrelated.text).toBe(400);
      expect(unrelated.json.message).toContain(
        `does not descend from the lease's base commit ${base}`,
      );

      await git(origin.work, ["bundle", "create", "--quiet", "base.bundle", "main"]);
      const itself = await publishBundle(
        lease.runner,
        lease.jobId,
        lease.token,
        await readFile(join(origin.work, "base.bundle")),
      );
      expect(itself.status).toBe(400);
      expect(itself.json.message).toContain("is the base commit");

      await git(stranger, ["branch", "-f", "second", "HEAD"]);
      await git(stranger, ["commit", "--quiet", "--allow-empty", "-m", "another"]);
      await git(stranger, [
        "bundle",
        "create",
        "--quiet",
        "two.bundle",
        "HEAD",
        "refs/heads/second",
      ]);
      const two = await publishBundle(
        lease.runner,
        lease.jobId,
        lease.token,
        await readFile(join(stranger, "two.bundle")),
      );
      expect(two.status).toBe(400);
      expect(two.json.message).toContain("exactly one commit; it carries 2");

      const checkout = await leaseCodeJob(cp, admin, freshWorkspace(), "c1", {
        repository: "app",
        targetBranch: "main",
      });
      const notAgent = await publishBundle(
        checkout.runner,
        checkout.jobId,
        checkout.token,
        await readFile(join(origin.work, "base.bundle")),
      );
      expect(notAgent.status).toBe(400);
      expect(notAgent.json.message).toContain("publish is only for agent jobs");

      expect(await origin.refs()).toBe(before);
      expect((await admin.job(lease.jobId)).json.job.publishedCommit).toBeUndefined();
      await Promise.all([lease.runner.close(), checkout.runner.close()]);
    },
  );
});

describe(`published commits are durable (${databaseKind})`, () => {
  it(
    "after a restart with new mirrors, the job still has its published " +
      "commit and the published bundle is served",
    async () => {
      const dir =
        databaseKind === "embedded"
          ? await mkdtemp(join(tmpdir(), "forelead-restart-"))
          : undefined;
      const database = dir
        ? {
            location: join(dir, "db"),
            kind: "embedded" as const,
            drop: () => rm(dir, { recursive: true, force: true }),
          }
        : await createTestDatabase();
      const first = await startTestControlPlane({ database });
      const a1 = await adminActor(first);
      expect((await registerRepository(a1, "app", origin.path)).status).toBe(200);
      const lease = await leaseCodeJob(first, a1, "w1", "r1", {
        kind: "agent",
        repository: "app",
        targetBranch: "main",
      });
      const work = await agentWork(first, lease, "w1", { "durable.txt": "kept\n" });
      expect(
        (await publishBundle(lease.runner, lease.jobId, lease.token, work.bundle)).status,
      ).toBe(200);
      await Promise.all([a1.close(), lease.runner.close()]);
      await first.plane.close();

      const second = await startTestControlPlane({ database, pki: first.pki });
      try {
        const a2 = await adminActor(second);
        expect((await a2.job(lease.jobId)).json.job.publishedCommit).toBe(work.commit);
        const runner = await runnerActor(second, "r1", "w1");
        expect((await runner.renew(lease.jobId, lease.token)).json.job.publishedCommit).toBe(
          work.commit,
        ); // the lease tells a runner what was published
        const client = createTestClient(
          RunnerService,
          second.url,
          second.pki.ca.certPem,
          await second.pki.runner("r1", "w1"),
          "grpc",
        );
        const fresh = join(await mkdtemp(join(tmpdir(), "forelead-after-")), "work");
        await checkoutBase(
          {
            jobId: lease.jobId,
            leaseToken: lease.token,
            baseCommit: lease.lease.job.baseCommit!,
            baseTree: lease.lease.job.baseTree!,
          },
          { client, dir: fresh },
        );
        const tree = await importBundle(
          { jobId: lease.jobId, leaseToken: lease.token },
          "published",
          work.commit,
          { client, dir: fresh },
        );
        expect(tree).toBe(await git(work.dir, ["rev-parse", "HEAD^{tree}"]));
        await Promise.all([a2.close(), runner.close()]);
      } finally {
        await second.plane.close();
        await database.drop();
      }
    },
  );
});

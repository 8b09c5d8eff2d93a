import { readdir } from "node:fs/promises";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { checkoutBase, CheckoutRefused } from "../../src/runner/checkout/checkout.js";
import { runnerActor } from "../support/actors.js";
import { createTestClient } from "../support/clients.js";
import {
  emptyRepo,
  importBundleBytes,
  leaseCodeJob,
  loseLease,
  registerRepository,
  requestBundle,
  requestHead,
} from "../support/code-actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { createTestOrigin, git, type TestOrigin } from "../support/git-repos.js";

const cp = useControlPlane();
const { admin } = cp;
let origin: TestOrigin;
let n = 0;
const freshWorkspace = () => `code${++n}`;

beforeAll(async () => {
  origin = await createTestOrigin();
  const reg = await registerRepository(admin, "app", origin.path);
  expect(reg.status, reg.text).toBe(200);
});
afterAll(async () => {
  await origin?.remove();
});

describe(`repositories and enqueue (${databaseKind})`, () => {
  it(
    "a repository registers by name with a path or file:// URL; bad URLs and " +
      "unreachable repositories are refused by name",
    async () => {
      const ok = await registerRepository(admin, "app-file", `file://${origin.path}`);
      expect(ok.status, ok.text).toBe(200);
      expect(ok.json.repository).toMatchObject({ name: "app-file", url: `file://${origin.path}` });
      expect(ok.json.repository.hasCredential ?? false).toBe(false);
      const cases: Array<[string, string, string | undefined, number, string]> = [
        ["bad name!", origin.path, undefined, 400, 'name "bad name!"'],
        ["plain", "http://example.invalid/app.git", undefined, 400, "scheme http: is not allowed"],
        ["pw", "https://user:hunter2@example.invalid/app.git", undefined, 400, "holds a password"],
        ["relative", "repos/app.git", undefined, 400, "is not an absolute path"],
        ["local-cred", origin.path, "token", 400, "needs no credential"],
        ["missing", "/nonexistent/forelead/repo.git", undefined, 400, "could not be read"],
      ];
      for (const [name, url, credential, status, message] of cases) {
        const reply = await registerRepository(admin, name, url, credential);
        expect(reply.status, `${name}: ${reply.text}`).toBe(status);
        expect(reply.json.message).toContain(message);
      }
      const list = await admin.rest.request("GET", "/v1/admin/repositories");
      expect(list.json.repositories.map((r: { name: string }) => r.name)).toEqual([
        "app",
        "app-file",
      ]);
    },
  );

  it(
    "enqueue refuses an unregistered repository, an unknown branch and a " +
      "kind without code, and stores nothing",
    async () => {
      const ws = freshWorkspace();
      const cases: Array<[Record<string, unknown>, string]> = [
        [{ repository: "nope", targetBranch: "main" }, 'repository "nope" is not registered'],
        [
          { repository: "app", targetBranch: "no-such-branch" },
          'targetBranch "no-such-branch" does not exist in repository "app"',
        ],
        [{ repository: "app" }, "a checkout job needs a targetBranch"],
        [{ kind: "agent" }, "an agent job needs a repository"],
        [
          { kind: "command", repository: "app", targetBranch: "main" },
          "a command job has no repository",
        ],
        [
          { kind: "deploy", repository: "app", targetBranch: "main" },
          'kind "deploy" is not one of command, checkout, agent',
        ],
        [{ repository: "app", targetBranch: "-x" }, 'targetBranch "-x" is not a branch name'],
      ];
      for (const [overrides, message] of cases) {
        const reply = await admin.enqueue({ workspaceId: ws, ...overrides });
        expect(reply.status, JSON.stringify(overrides)).toBe(400);
        expect(reply.json.message).toContain(message);
      }
      const listed = await admin.rest.request("GET", `/v1/admin/jobs?workspaceId=${ws}`);
      expect(listed.json.jobs ?? []).toEqual([]);
      const ok = await admin.enqueue({ workspaceId: ws, repository: "app", targetBranch: "main" });
      expect(ok.json.job).toMatchObject({
        kind: "checkout",
        repository: "app",
        targetBranch: "main",
        state: "queued",
      });
      expect(ok.json.job.baseCommit).toBeUndefined(); // pinned at claim, not at enqueue
    },
  );
});

describe(`pinning at claim (${databaseKind})`, () => {
  it(
    "a claim pins targetBranch to baseCommit and baseTree; a retry after a " +
      "lost lease gets the same pair though the branch moved",
    async () => {
      const ws = freshWorkspace();
      const c1 = await origin.commit("pin-a", { "a.txt": "one\n" });
      const first = await leaseCodeJob(cp, admin, ws, "r1", {
        repository: "app",
        targetBranch: "pin-a",
      });
      expect(first.lease.job).toMatchObject({
        kind: "checkout",
        repository: "app",
        targetBranch: "pin-a",
        baseCommit: c1,
        baseTree: await origin.treeOf(c1),
      });
      await origin.commit("pin-a", { "a.txt": "two\n" });
      await loseLease(cp, first.jobId);
      const retry = await runnerActor(cp, "r2", ws);
      await retry.register();
      const second = (await retry.claim()).json;
      expect(second.job.id).toBe(first.jobId);
      expect(second.token).not.toBe(first.token);
      expect(second.job).toMatchObject({ baseCommit: c1, baseTree: await origin.treeOf(c1) });
      const renewed = await retry.renew(first.jobId, second.token);
      expect(renewed.json.job).toMatchObject({ baseCommit: c1 });
      await Promise.all([first.runner.close(), retry.close()]);
    },
  );

  it(
    "twenty jobs of one branch claimed at once all pin the branch's one " +
      "commit (fetches are coalesced, never run side by side)",
    async () => {
      const ws = freshWorkspace();
      const head = await origin.commit("burst", { "b.txt": "burst\n" });
      await Promise.all(
        Array.from({ length: 20 }, () =>
          admin.enqueue({
            workspaceId: ws,
            labels: [],
            kind: "agent",
            repository: "app",
            targetBranch: "burst",
          }),
        ),
      );
      const runners = await Promise.all(
        Array.from({ length: 20 }, (_, i) => runnerActor(cp, `b${i}`, ws)),
      );
      await Promise.all(runners.map((r) => r.register()));
      const started = performance.now();
      const claims = await Promise.all(runners.map((r) => r.claim()));
      console.log(
        `20 concurrent claims of agent jobs with pinning: ${Math.round(performance.now() - started)} ms`,
      );
      expect(claims.map((c) => c.status)).toEqual(Array(20).fill(200));
      expect(new Set(claims.map((c) => c.json.job.id)).size).toBe(20);
      for (const c of claims)
        expect(c.json.job).toMatchObject({ baseCommit: head, baseTree: await origin.treeOf(head) });
      await Promise.all(runners.map((r) => r.close()));
    },
  );

  it(
    "a job whose branch was deleted before its claim is failed with reason " +
      "code_unavailable, and the claim moves on",
    async () => {
      const ws = freshWorkspace();
      await origin.commit("doomed", { "d.txt": "x\n" });
      const doomed = (
        await admin.enqueue({
          workspaceId: ws,
          labels: [],
          repository: "app",
          targetBranch: "doomed",
        })
      ).json.job.id;
      const plain = (await admin.enqueue({ workspaceId: ws, labels: [] })).json.job.id;
      await git(origin.path, ["update-ref", "-d", "refs/heads/doomed"]);
      const runner = await runnerActor(cp, "r1", ws);
      await runner.register();
      const claim = await runner.claim();
      expect(claim.json.job.id).toBe(plain);
      expect((await admin.job(doomed)).json.job).toMatchObject({
        state: "failed",
        failure: { reason: "code_unavailable" },
      });
      // The global event stream says so too: leased, then settled as failed with that code.
      const events = (
        await admin.rest.request(
          "GET",
          `/v1/admin/events?workspaceId=${ws}&types=job.leased&types=job.settled`,
        )
      ).text
        .split("\n")
        .filter(Boolean)
        .map((l) => JSON.parse(l) as { type: string; jobId: string; data: unknown });
      expect(events.filter((e) => e.jobId === doomed).map((e) => [e.type, e.data])).toEqual([
        ["job.leased", { attempt: 1 }],
        ["job.settled", { outcome: "failed", errorCode: "code_unavailable", attempt: 1 }],
      ]);
      expect((await admin.job(doomed)).json.job.failure.message).toContain(
        'branch "doomed" no longer exists',
      );
      await runner.close();
    },
  );
});

describe(`base bundles (${databaseKind})`, () => {
  it(
    "a base bundle over REST is application/x-git-bundle that git bundle " +
      "verify accepts and that imports to the exact tree",
    async () => {
      const ws = freshWorkspace();
      const commit = await origin.commit("rest", {
        "src/app.txt": "hello\n",
        "bin.dat": Buffer.from([0, 1, 2, 255]),
      });
      const { runner, jobId, token, lease } = await leaseCodeJob(cp, admin, ws, "r1", {
        repository: "app",
        targetBranch: "rest",
      });
      const reply = await requestBundle(runner, jobId, token, "base", commit);
      expect(reply.status, reply.text).toBe(200);
      expect(reply.headers["content-type"]).toBe("application/x-git-bundle");
      expect(reply.body.subarray(0, 16).toString()).toMatch(/^# v[23] git bundle/);
      const repo = await emptyRepo();
      await importBundleBytes(repo, reply.body);
      expect(await git(repo, ["rev-parse", `${commit}^{tree}`])).toBe(lease.job.baseTree);
      expect(await git(repo, ["rev-parse", `${commit}^{tree}`])).toBe(await origin.treeOf(commit));
      await runner.close();
    },
  );

  it(
    "the runner helper fetches the base bundle through a generated client " +
      "(chunks) and checks out the exact tree",
    async () => {
      const ws = freshWorkspace();
      const commit = await origin.commit("helper", {
        "big.txt": "x".repeat(3 * 1024 * 1024) + Math.random(),
      }); // several chunks
      const { runner, jobId, token, lease } = await leaseCodeJob(cp, admin, ws, "h1", {
        repository: "app",
        targetBranch: "helper",
      });
      const client = createTestClient(
        RunnerService,
        cp.url,
        cp.pki.ca.certPem,
        await cp.pki.runner("h1", ws),
        "grpc",
      );
      const dir = join(await mkdtemp(join(tmpdir(), "forelead-co-")), "work");
      const out = await checkoutBase(
        {
          jobId,
          leaseToken: token,
          baseCommit: lease.job.baseCommit!,
          baseTree: lease.job.baseTree!,
        },
        { client, dir },
      );
      expect(out).toEqual({ commit, tree: await origin.treeOf(commit) });
      expect(await git(dir, ["rev-parse", "HEAD"])).toBe(commit);
      expect(await git(dir, ["status", "--porcelain"])).toBe("");
      await runner.close();
    },
  );

  it(
    "the runner helper refuses a lease whose baseTree differs from the " +
      "imported commit's tree, before checking anything out",
    async () => {
      const ws = freshWorkspace();
      await origin.commit("tree-check", { "t.txt": "real\n" });
      const { runner, jobId, token, lease } = await leaseCodeJob(cp, admin, ws, "t1", {
        repository: "app",
        targetBranch: "tree-check",
      });
      const client = createTestClient(
        RunnerService,
        cp.url,
        cp.pki.ca.certPem,
        await cp.pki.runner("t1", ws),
        "connect-binary",
      );
      const wrongTree = await origin.treeOf(
        await origin.commit("elsewhere", { "t.txt": "other\n" }),
      );
      const dir = join(await mkdtemp(join(tmpdir(), "forelead-co-")), "work");
      const attempt = checkoutBase(
        { jobId, leaseToken: token, baseCommit: lease.job.baseCommit!, baseTree: wrongTree },
        { client, dir },
      );
      await expect(attempt).rejects.toThrow(CheckoutRefused);
      await expect(attempt).rejects.toThrow(`not the lease's baseTree ${wrongTree}`);
      expect((await readdir(dir)).filter((f) => f !== ".git")).toEqual([]); // nothing checked out
      const noTree = checkoutBase(
        { jobId, leaseToken: token, baseCommit: lease.job.baseCommit!, baseTree: "" },
        { client, dir: join(dir, "..", "other") },
      );
      await expect(noTree).rejects.toThrow("no valid baseTree; refusing to request a base bundle");
      await runner.close();
    },
  );
});

describe(`head moves while an agent job runs (${databaseKind})`, () => {
  it(
    "code/head follows the branch; a head bundle is of the current head " +
      "only, thin on the base, and imports to its tree",
    async () => {
      const ws = freshWorkspace();
      const base = await origin.commit("moving", { "m.txt": "base\n" });
      const { runner, jobId, token, lease } = await leaseCodeJob(cp, admin, ws, "a1", {
        kind: "agent",
        repository: "app",
        targetBranch: "moving",
      });
      expect(lease.job).toMatchObject({ kind: "agent", baseCommit: base });
      expect((await requestHead(runner, jobId, token)).json).toEqual({
        apiVersion: "v1",
        commit: base,
      });
      const moved = await origin.commit("moving", { "m.txt": "moved\n", "new.txt": "n\n" });
      expect((await requestHead(runner, jobId, token)).json).toEqual({
        apiVersion: "v1",
        commit: moved,
      });

      const stale = await requestBundle(runner, jobId, token, "head", base);
      expect(stale.status).toBe(409);
      expect(stale.json.message).toContain(`is not the current head ${moved}`);
      const head = await requestBundle(runner, jobId, token, "head", moved);
      expect(head.status, head.text).toBe(200);
      // Thin: its header names the base as a prerequisite ("-<commit> <subject>"), so it does not
      // verify in an empty repository...
      const header = head.body.subarray(0, head.body.indexOf("\n\n")).toString("utf8").split("\n");
      expect(header.filter((l) => l.startsWith(`-${base}`))).toHaveLength(1);
      await expect(importBundleBytes(await emptyRepo(), head.body)).rejects.toThrow(
        /bundle verify/,
      );
      // ...and does on top of the base bundle.
      const repo = await emptyRepo();
      await importBundleBytes(
        repo,
        (await requestBundle(runner, jobId, token, "base", base)).body,
        "base.bundle",
      );
      await importBundleBytes(repo, head.body, "head.bundle");
      expect(await git(repo, ["rev-parse", `${moved}^{tree}`])).toBe(await origin.treeOf(moved));
      expect((await admin.job(jobId)).json.job.baseCommit).toBe(base); // the pin does not move
      await runner.close();
    },
  );
});

import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expireLeaseNow } from "../../src/broker/leases/expire.js";
import { expect } from "vitest";
import { registeredRunner, type AdminActor, type RunnerActor } from "./actors.js";
import type { RestReply } from "./clients.js";
import type { TestControlPlane } from "./control-plane.js";
import { git } from "./git-repos.js";

/** POST /v1/admin/repositories. */
export function registerRepository(
  admin: AdminActor,
  name: string,
  url: string,
  credential?: string,
): Promise<RestReply> {
  return admin.rest.request("POST", "/v1/admin/repositories", {
    apiVersion: "v1",
    name,
    url,
    credential,
  });
}

/** A runner holding a fresh lease on a job enqueued with `overrides`. */
export interface CodeLease {
  readonly runner: RunnerActor;
  readonly jobId: string;
  readonly token: string;
  /** The claim reply (the lease as JSON). */
  readonly lease: { token: string; job: Record<string, string> };
}

/** Enqueues a job in `workspaceId`, registers `runnerId` there and claims it. */
export async function leaseCodeJob(
  cp: TestControlPlane,
  admin: AdminActor,
  workspaceId: string,
  runnerId: string,
  overrides: Record<string, unknown>,
): Promise<CodeLease> {
  const enq = await admin.enqueue({ workspaceId, labels: [], ...overrides });
  expect(enq.status, enq.text).toBe(200);
  const runner = await registeredRunner(cp, runnerId, workspaceId);
  const claim = await runner.claim();
  expect(claim.status, claim.text).toBe(200);
  expect(claim.json.job.id).toBe(enq.json.job.id);
  return { runner, jobId: claim.json.job.id, token: claim.json.token, lease: claim.json };
}

/** A code/bundle reply with its raw bytes. */
export type BundleReply = RestReply & { readonly body: Buffer };

/** POST /v1/runner/code/bundle. */
export async function requestBundle(
  runner: RunnerActor,
  jobId: string,
  leaseToken: string,
  kind: string,
  commit: string,
): Promise<BundleReply> {
  const reply = await runner.rest.request("POST", "/v1/runner/code/bundle", {
    apiVersion: "v1",
    jobId,
    leaseToken,
    kind,
    commit,
  });
  return { ...reply, body: reply.body ?? Buffer.from(reply.text) };
}

/** POST /v1/runner/code/head. */
export function requestHead(
  runner: RunnerActor,
  jobId: string,
  leaseToken: string,
): Promise<RestReply> {
  return runner.rest.request("POST", "/v1/runner/code/head", {
    apiVersion: "v1",
    jobId,
    leaseToken,
  });
}

/** POST /v1/runner/agent/publish with the raw bundle and the lease in headers. */
export function publishBundle(
  runner: RunnerActor,
  jobId: string,
  leaseToken: string,
  bundle: Buffer,
): Promise<RestReply> {
  return runner.rest.request("POST", "/v1/runner/agent/publish", bundle, {
    "content-type": "application/x-git-bundle",
    "forelead-api-version": "v1",
    "forelead-job-id": jobId,
    "forelead-lease-token": leaseToken,
  });
}

/** A new empty (non-bare) repository in a temporary directory. */
export async function emptyRepo(prefix = "forelead-import-"): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  await git(dir, ["init", "--quiet"]);
  return dir;
}

/**
 * Writes bundle bytes to a file in `repo`, checks it with `git bundle verify`, fetches its refs;
 * resolves to the file.
 */
export async function importBundleBytes(
  repo: string,
  bytes: Buffer,
  name = "in.bundle",
): Promise<string> {
  const file = join(repo, ".git", name);
  await writeFile(file, bytes);
  await git(repo, ["bundle", "verify", "--quiet", file]);
  await git(repo, ["fetch", "--quiet", "--no-tags", file, "+refs/*:refs/imported/*"]);
  return file;
}

/** Ends a job's lease as if the runner had vanished: expiry moved to the past, then one sweep. */
export async function loseLease(cp: TestControlPlane, jobId: string): Promise<void> {
  if (!(await expireLeaseNow(cp.plane.store.db, jobId)))
    throw new Error(`job ${jobId} holds no live lease to lose`);
  await cp.plane.broker.sweep();
}

import { expect } from "vitest";
import { createRestClient, type RestClient, type RestReply } from "./clients.js";
import type { TestControlPlane } from "./control-plane.js";

/** The body of a no-op job as the protocol writes it; override any field. */
export function jobBody(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    apiVersion: "v1",
    workspaceId: "w1",
    labels: ["linux"],
    spec: { image: "busybox", argv: ["true"], timeoutSeconds: 60 },
    ...overrides,
  };
}

/** An internal service with the admin grant, speaking REST. */
export interface AdminActor {
  readonly rest: RestClient;
  enqueue(overrides?: Record<string, unknown>): Promise<RestReply>;
  job(jobId: string): Promise<RestReply>;
  cancel(jobId: string): Promise<RestReply>;
  close(): Promise<void>;
}

/** A runner speaking REST on one connection, with its certificate's identity. */
export interface RunnerActor {
  readonly rest: RestClient;
  readonly runnerId: string;
  register(overrides?: Record<string, unknown>): Promise<RestReply>;
  claim(overrides?: Record<string, unknown>): Promise<RestReply>;
  renew(jobId: string, leaseToken: string): Promise<RestReply>;
  release(jobId: string, leaseToken: string): Promise<RestReply>;
  complete(
    jobId: string,
    leaseToken: string,
    overrides?: Record<string, unknown>,
  ): Promise<RestReply>;
  close(): Promise<void>;
}

/** The admin actor of a test control plane. */
export async function adminActor(cp: TestControlPlane, url = cp.url): Promise<AdminActor> {
  const rest = createRestClient(url, cp.pki.ca.certPem, await cp.pki.service("test-admin"));
  return {
    rest,
    enqueue: (overrides) => rest.request("POST", "/v1/admin/jobs", jobBody(overrides)),
    job: (jobId) => rest.request("GET", `/v1/admin/jobs/${jobId}`),
    cancel: (jobId) => rest.request("POST", `/v1/admin/jobs/${jobId}/cancel`, { apiVersion: "v1" }),
    close: () => rest.close(),
  };
}

/** A runner actor for `runnerId` in `workspaceId`. */
export async function runnerActor(
  cp: TestControlPlane,
  runnerId: string,
  workspaceId = "w1",
  url = cp.url,
): Promise<RunnerActor> {
  const rest = createRestClient(url, cp.pki.ca.certPem, await cp.pki.runner(runnerId, workspaceId));
  const lease = (jobId: string, leaseToken: string) => ({ apiVersion: "v1", jobId, leaseToken });
  return {
    rest,
    runnerId,
    register: (overrides = {}) =>
      rest.request("POST", "/v1/runner/register", {
        apiVersion: "v1",
        runnerId,
        workspaceId,
        slots: 1,
        cpu: 2,
        memoryBytes: "1073741824",
        architecture: "amd64",
        labels: ["linux"],
        ...overrides,
      }),
    claim: (overrides = {}) =>
      rest.request("POST", "/v1/runner/claim", { apiVersion: "v1", runnerId, ...overrides }),
    renew: (jobId, token) => rest.request("POST", "/v1/runner/renew", lease(jobId, token)),
    release: (jobId, token) => rest.request("POST", "/v1/runner/release", lease(jobId, token)),
    complete: (jobId, token, overrides = {}) =>
      rest.request("POST", "/v1/runner/complete", {
        ...lease(jobId, token),
        completionId: `c-${jobId}`,
        outcome: "succeeded",
        exitCode: 0,
        ...overrides,
      }),
    close: () => rest.close(),
  };
}

/**
 * A runner actor for `runnerId` in `workspaceId`, registered with `overrides`; the registration
 * must succeed.
 */
export async function registeredRunner(
  cp: TestControlPlane,
  runnerId: string,
  workspaceId = "w1",
  overrides: Record<string, unknown> = {},
): Promise<RunnerActor> {
  const runner = await runnerActor(cp, runnerId, workspaceId);
  const reg = await runner.register(overrides);
  expect(reg.status, reg.text).toBe(200);
  return runner;
}

/** A registered runner holding the lease on a fresh job of its workspace. */
export interface LeasedJob {
  readonly runner: RunnerActor;
  readonly workspaceId: string;
  readonly jobId: string;
  readonly token: string;
  /** One stream message of this lease, as the protocol writes it. */
  msg(sequence: number, data: unknown): Record<string, unknown>;
}

/** Registers `runnerId` in `workspaceId`, enqueues a job there and claims it. */
export async function leasedJob(
  cp: TestControlPlane,
  admin: AdminActor,
  runnerId: string,
  workspaceId: string,
): Promise<LeasedJob> {
  const runner = await registeredRunner(cp, runnerId, workspaceId);
  const enq = await admin.enqueue({ workspaceId });
  expect(enq.status, enq.text).toBe(200);
  const claim = await runner.claim();
  expect(claim.status, claim.text).toBe(200);
  expect(claim.json.job.id, claim.text).toBe(enq.json.job.id);
  const { token } = claim.json;
  const jobId: string = claim.json.job.id;
  return {
    runner,
    workspaceId,
    jobId,
    token,
    msg: (sequence, data) => ({
      apiVersion: "v1",
      runnerId,
      jobId,
      leaseToken: token,
      sequence,
      data,
    }),
  };
}

/**
 * Polls `probe` until it returns a value (not undefined), at most `timeoutMs`; throws with `what`
 * on timeout.
 */
export async function eventually<T>(
  what: string,
  probe: () => Promise<T | undefined>,
  timeoutMs = 15_000,
  everyMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

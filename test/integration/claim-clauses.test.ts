import "reflect-metadata";
import { describe, expect, it } from "vitest";
import { registeredRunner, type RunnerActor } from "../support/actors.js";
import { type RestReply } from "../support/clients.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

// The claim (forelead_claim) and "why is this job waiting" (a job's `waiting`) ask the same claim
// clauses (src/store/sql/functions): for every job state built here, a runner's claim takes the
// job exactly when the job reports no reason to wait.
const cp = useControlPlane();
const { admin } = cp;

/** A workspace of its own, one runner and, last, the job the runner's next claim is asked about. */
interface Built {
  readonly runner: RunnerActor;
  readonly jobId: string;
}

async function enqueue(workspaceId: string, overrides: Record<string, unknown> = {}) {
  const reply = await admin.enqueue({ workspaceId, ...overrides });
  expect(reply.status, reply.text).toBe(200);
  return reply.json.job as RestReply["json"];
}

const post = (path: string, body: Record<string, unknown> = {}) =>
  admin.rest.request("POST", path, { apiVersion: "v1", ...body });

/**
 * Registers `runner-1` in `ws` (with `registration` over the defaults: 1 slot, labels linux,
 * amd64).
 */
const runnerIn = (ws: string, registration: Record<string, unknown> = {}) =>
  registeredRunner(cp, `${ws}-runner`, ws, registration);

/** The runner claims a job first (it must get it), and the job asked about is enqueued after. */
async function afterOneLease(
  ws: string,
  registration: Record<string, unknown>,
  first: Record<string, unknown>,
  then: Record<string, unknown>,
): Promise<Built> {
  const runner = await runnerIn(ws, registration);
  const held = await enqueue(ws, first);
  const claim = await runner.claim({ waitSeconds: 0 });
  expect(claim.status, claim.text).toBe(200);
  expect(claim.json.job.id).toBe(held.id);
  return { runner, jobId: (await enqueue(ws, then)).id };
}

/** Sets the rate limit named after `ws` to `perMinute` and returns its name. */
async function rateLimit(ws: string, perMinute: number): Promise<string> {
  const reply = await admin.rest.request("PUT", `/v1/admin/rate-limits/${ws}`, {
    apiVersion: "v1",
    perMinute,
  });
  expect(reply.status, reply.text).toBe(200);
  return ws;
}

/**
 * Each state, the waiting code the job must report in it ("none": claimable), and how to build it.
 */
const states: ReadonlyArray<[string, string, (ws: string) => Promise<Built>]> = [
  [
    "eligible",
    "none",
    async (ws) => ({ runner: await runnerIn(ws), jobId: (await enqueue(ws)).id }),
  ],
  [
    "workspace paused",
    "workspace_paused",
    async (ws) => {
      const runner = await runnerIn(ws);
      const job = await enqueue(ws);
      expect((await post(`/v1/admin/workspaces/${ws}/pause`)).status).toBe(200);
      return { runner, jobId: job.id };
    },
  ],
  [
    "runner paused",
    "runners_paused",
    async (ws) => {
      const runner = await runnerIn(ws);
      const job = await enqueue(ws);
      const paused = await post(`/v1/admin/runners/${runner.runnerId}/pause`, { workspaceId: ws });
      expect(paused.status, paused.text).toBe(200);
      return { runner, jobId: job.id };
    },
  ],
  [
    "runAt in the future",
    "scheduled",
    async (ws) => ({
      runner: await runnerIn(ws),
      jobId: (await enqueue(ws, { runAt: new Date(Date.now() + 600_000).toISOString() })).id,
    }),
  ],
  [
    "a label the runner lacks",
    "missing_labels",
    async (ws) => ({
      runner: await runnerIn(ws),
      jobId: (await enqueue(ws, { labels: ["linux", "gpu"] })).id,
    }),
  ],
  [
    "labels a subset of the runner's",
    "none",
    async (ws) => ({
      runner: await runnerIn(ws, { labels: ["linux", "gpu", "big"] }),
      jobId: (await enqueue(ws, { labels: ["gpu", "linux"] })).id,
    }),
  ],
  [
    "an architecture the runner lacks",
    "unmet_requirements",
    async (ws) => ({
      runner: await runnerIn(ws),
      jobId: (await enqueue(ws, { requirements: { architecture: "arm64" } })).id,
    }),
  ],
  [
    "a feature the runner lacks",
    "unmet_requirements",
    async (ws) => ({
      runner: await runnerIn(ws, { os: "linux", executionKinds: ["docker"] }),
      jobId: (await enqueue(ws, { requirements: { os: "linux", features: ["cancel-v1"] } })).id,
    }),
  ],
  [
    "requirements the runner meets",
    "none",
    async (ws) => ({
      runner: await runnerIn(ws, {
        os: "linux",
        executionKinds: ["process", "docker"],
        features: ["cancel-v1", "checkpoint-v1"],
      }),
      jobId: (
        await enqueue(ws, {
          requirements: {
            architecture: "amd64",
            os: "linux",
            executionKind: "docker",
            features: ["checkpoint-v1"],
          },
        })
      ).id,
    }),
  ],
  [
    "its concurrency group full",
    "concurrency_group",
    (ws) => {
      const group = { concurrencyKey: "deploy", concurrencyLimit: 1 };
      return afterOneLease(ws, { slots: 2 }, group, group);
    },
  ],
  [
    "its concurrency group with room",
    "none",
    (ws) => {
      const group = { concurrencyKey: "deploy", concurrencyLimit: 2 };
      return afterOneLease(ws, { slots: 2 }, group, group);
    },
  ],
  [
    "another group full, its own not",
    "none",
    (ws) =>
      afterOneLease(
        ws,
        { slots: 2 },
        { concurrencyKey: "a", concurrencyLimit: 1 },
        { concurrencyKey: "b", concurrencyLimit: 1 },
      ),
  ],
  [
    "its rate limit used up",
    "rate_limited",
    async (ws) => {
      const limited = { rateLimit: await rateLimit(ws, 1) };
      return afterOneLease(ws, { slots: 2 }, limited, limited);
    },
  ],
  [
    "its rate limit with room",
    "none",
    async (ws) => {
      const limited = { rateLimit: await rateLimit(ws, 2) };
      return afterOneLease(ws, { slots: 2 }, limited, limited);
    },
  ],
  ["the runner's slots full", "all_busy", (ws) => afterOneLease(ws, { slots: 1 }, {}, {})],
  ["a slot of the runner free", "none", (ws) => afterOneLease(ws, { slots: 2 }, {}, {})],
];

describe(`the claim and the waiting reason agree (${databaseKind})`, () => {
  it.each(states)(
    "%s: the claim takes the job exactly when it reports no reason to wait (%s)",
    async (name, expected, build) => {
      const ws = `cc-${name.replace(/[^a-z]+/g, "-")}`;
      const { runner, jobId } = await build(ws);
      const got = await admin.job(jobId);
      expect(got.status, got.text).toBe(200);
      const waiting = got.json.job.waiting as { code: string } | undefined;
      const claim = await runner.claim({ waitSeconds: 0 });
      expect([200, 204], claim.text).toContain(claim.status);
      const claimed = claim.status === 200 && claim.json.job.id === jobId;
      expect({ claimed, waiting: waiting?.code ?? "none" }).toEqual({
        claimed: waiting === undefined,
        waiting: expected,
      });
    },
  );
});

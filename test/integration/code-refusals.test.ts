import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { runnerActor } from "../support/actors.js";
import { createTestClient } from "../support/clients.js";
import {
  leaseCodeJob,
  loseLease,
  registerRepository,
  requestBundle,
  requestHead,
  type CodeLease,
} from "../support/code-actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { createTestOrigin, type TestOrigin } from "../support/git-repos.js";

const cp = useControlPlane();
const { admin } = cp;
let origin: TestOrigin;
let base: string;
let checkout: CodeLease;
let agent: CodeLease;

beforeAll(async () => {
  origin = await createTestOrigin();
  expect((await registerRepository(admin, "app", origin.path)).status).toBe(200);
  base = (await origin.branchHead("main"))!;
  checkout = await leaseCodeJob(cp, admin, "wc", "r1", { repository: "app", targetBranch: "main" });
  agent = await leaseCodeJob(cp, admin, "wa", "r1", {
    kind: "agent",
    repository: "app",
    targetBranch: "main",
  });
});
afterAll(async () => {
  await Promise.all([checkout?.runner.close(), agent?.runner.close()]);
  await origin?.remove();
});

/**
 * The reply is a JSON error with `status` whose message contains `message`, and no bundle bytes.
 */
function refused(
  reply: {
    status: number;
    headers: Record<string, unknown>;
    json: { message: string };
    text: string;
  },
  status: number,
  message: string,
) {
  expect(reply.status, reply.text).toBe(status);
  expect(reply.headers["content-type"]).toBe("application/json");
  expect(reply.json.message).toContain(message);
}

describe(`code/bundle refusals (${databaseKind})`, () => {
  it(
    "refuses a missing or foreign lease token, a malformed commit and an " +
      "unknown kind, each saying which",
    async () => {
      const { runner, jobId, token } = checkout;
      const noToken = await runner.rest.request("POST", "/v1/runner/code/bundle", {
        apiVersion: "v1",
        jobId,
        kind: "base",
        commit: base,
      });
      refused(noToken, 400, "leaseToken is required");
      refused(
        await requestBundle(runner, jobId, "not-a-lease", "base", base),
        409,
        `the lease token is not a lease of this runner on job ${jobId}`,
      );
      refused(
        await requestBundle(runner, jobId, agent.token, "base", base),
        409,
        `the lease token is not a lease of this runner on job ${jobId}`,
      );
      refused(
        await requestBundle(runner, jobId, token, "tip", base),
        400,
        'kind "tip" is not a bundle kind; use "base", "head" or "published"',
      );
      refused(await requestBundle(runner, jobId, token, "base", ""), 400, "commit is required");
      refused(
        await requestBundle(runner, jobId, token, "base", "main"),
        400,
        'commit "main" is not a full commit id',
      );
      refused(
        await runner.rest.request("POST", "/v1/runner/code/bundle", {
          apiVersion: "v2",
          jobId,
          leaseToken: token,
          kind: "base",
          commit: base,
        }),
        400,
        'apiVersion "v2" is not supported',
      );
    },
  );

  it("refuses another runner's lease: 409 in the same workspace, 404 from another workspace", async () => {
    const other = await runnerActor(cp, "r2", "wc");
    await other.register();
    refused(
      await requestBundle(other, checkout.jobId, checkout.token, "base", base),
      409,
      `the lease token is not a lease of this runner on job ${checkout.jobId}`,
    );
    const stranger = await runnerActor(cp, "r1", "elsewhere");
    refused(
      await requestBundle(stranger, checkout.jobId, checkout.token, "base", base),
      404,
      `job ${checkout.jobId} not found in workspace "elsewhere"`,
    );
    await Promise.all([other.close(), stranger.close()]);
  });

  it("refuses a commit other than the permitted one, and head or published bundles of a checkout job", async () => {
    const other = await origin.commit("other", { "o.txt": "o\n" });
    const { runner, jobId, token } = checkout;
    refused(
      await requestBundle(runner, jobId, token, "base", other),
      400,
      `commit ${other} is not the lease's base commit ${base}`,
    );
    refused(
      await requestBundle(runner, jobId, token, "head", base),
      400,
      `a head bundle is only for agent jobs; job ${jobId} is a checkout job`,
    );
    refused(
      await requestBundle(runner, jobId, token, "published", base),
      400,
      `a published bundle is only for agent jobs; job ${jobId} is a checkout job`,
    );
    refused(
      await requestBundle(agent.runner, agent.jobId, agent.token, "base", other),
      400,
      "is not the lease's base commit",
    );
    refused(
      await requestBundle(agent.runner, agent.jobId, agent.token, "head", other),
      409,
      `is not the current head ${base} of branch "main"`,
    );
    // the permitted one is served
    expect((await requestBundle(runner, jobId, token, "base", base)).status).toBe(200);
  });

  it("refuses a published bundle before the agent job published anything", async () => {
    refused(
      await requestBundle(agent.runner, agent.jobId, agent.token, "published", base),
      400,
      `job ${agent.jobId} has no published commit yet`,
    );
  });

  it("code/head is for agent jobs only: a checkout job or a command job gets 400", async () => {
    refused(
      await requestHead(checkout.runner, checkout.jobId, checkout.token),
      400,
      `code/head is only for agent jobs; job ${checkout.jobId} is a checkout job`,
    );
    const command = await leaseCodeJob(cp, admin, "wcmd", "r1", {});
    refused(
      await requestHead(command.runner, command.jobId, command.token),
      400,
      "is a command job with no repository",
    );
    refused(
      await requestBundle(command.runner, command.jobId, command.token, "base", base),
      400,
      "is a command job with no repository",
    );
    await command.runner.close();
  });

  it("a generated client gets the refusal as a Connect error before any chunk", async () => {
    const client = createTestClient(
      RunnerService,
      cp.url,
      cp.pki.ca.certPem,
      await cp.pki.runner("r1", "wc"),
      "grpc",
    );
    const chunks: Uint8Array[] = [];
    const read = async () => {
      for await (const c of client.codeBundle({
        apiVersion: "v1",
        jobId: checkout.jobId,
        leaseToken: checkout.token,
        kind: "head",
        commit: base,
      }))
        chunks.push(c.data);
    };
    const err = await read().then(
      () => undefined,
      (e) => ConnectError.from(e),
    );
    expect(err?.code).toBe(Code.FailedPrecondition);
    expect(err?.rawMessage).toContain("only for agent jobs");
    expect(chunks).toEqual([]);
  });

  it("an expired lease is refused on code/head and code/bundle with the time it expired", async () => {
    const lease = await leaseCodeJob(cp, admin, "wexp", "r9", {
      kind: "agent",
      repository: "app",
      targetBranch: "main",
    });
    await loseLease(cp, lease.jobId);
    refused(
      await requestBundle(lease.runner, lease.jobId, lease.token, "base", base),
      409,
      "expired at",
    );
    refused(await requestHead(lease.runner, lease.jobId, lease.token), 409, "expired at");
    await lease.runner.close();
  });
});

import "reflect-metadata";
import { describe, expect, it } from "vitest";
import { createDockerClient } from "../../src/runner/executors/docker-api.js";
import { containerName, networkName } from "../../src/runner/executors/names.js";
import { eventually } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import {
  executorsUnderTest,
  specFor,
  startTestRunner,
  testImage,
  type TestRunner,
} from "../support/runner-agent.js";

// What only the docker executor does: names, labels, limits, networks, images.
const withDocker = (await executorsUnderTest()).includes("docker");
const cp = useControlPlane({ leaseSeconds: 6 });
const { admin } = cp;
let n = 0;
/**
 * Runner ids unique to this run: Docker resources are found by the forelead.runner label, and other
 * suites may share the engine.
 */
const tag = Math.random().toString(36).slice(2, 8);

async function settled(jobId: string) {
  return eventually(`job ${jobId} to settle`, async () => {
    const job = (await admin.job(jobId)).json.job;
    return ["succeeded", "failed", "cancelled"].includes(job.state) ? job : undefined;
  });
}

async function withRunner(test: (runner: TestRunner, ws: string) => Promise<void>): Promise<void> {
  const ws = `dk${++n}`;
  const runner = await startTestRunner(cp, {
    runnerId: `d${n}-${tag}`,
    workspaceId: ws,
    executor: "docker",
  });
  try {
    await test(runner, ws);
  } finally {
    await runner.close();
  }
}

describe.skipIf(!withDocker)(`the docker executor (${databaseKind})`, () => {
  it(
    "runs a job in a container named forelead-<jobId>-main with the four " +
      "labels, its limits and env, on an internal network forelead-<jobId>, " +
      "and removes both afterwards",
    async () => {
      await withRunner(async (runner, ws) => {
        const docker = createDockerClient();
        const spec = specFor("docker", {
          argv: ["sh", "-c", "echo env=$GREETING; ls -A /output | wc -l; echo up; sleep 60"],
          env: { GREETING: "hello world" },
          cpu: 0.5,
          memoryBytes: String(64 * 1024 * 1024),
        });
        const jobId = (await admin.enqueue({ workspaceId: ws, spec })).json.job.id;
        await runner.waitForLine(jobId, /^up$/);
        const info = await docker.getContainer(containerName(jobId)).inspect();
        expect(info.Name).toBe(`/forelead-${jobId}-main`);
        expect(info.Config.Labels).toMatchObject({
          "forelead.runner": runner.client.runnerId,
          "forelead.workspace": ws,
          "forelead.task": "main",
          "forelead.job": jobId,
        });
        expect(info.HostConfig).toMatchObject({ NanoCpus: 500_000_000, Memory: 64 * 1024 * 1024 });
        const network = await docker.getNetwork(networkName(jobId)).inspect();
        expect(network).toMatchObject({ Name: `forelead-${jobId}`, Internal: true });
        expect(network.Labels).toMatchObject({
          "forelead.runner": runner.client.runnerId,
          "forelead.job": jobId,
        });
        expect(runner.recorded.job(jobId).logs.map((l) => l.text)).toEqual([
          "env=hello world",
          "0",
          "up",
        ]);
        expect(
          (await runner.executor.resources()).map((r) => `${r.kind} ${r.name}`).sort(),
        ).toEqual([`container forelead-${jobId}-main`, `network forelead-${jobId}`]);

        await admin.cancel(jobId);
        expect((await settled(jobId)).state).toBe("cancelled");
        const exited = runner.recorded.job(jobId).events.find((e) => e.type === "job.exited");
        // sampled from the engine's stats while it ran
        expect(exited?.peakMemoryBytes).toBeGreaterThan(0);
        expect(
          await docker
            .getContainer(containerName(jobId))
            .inspect()
            .catch(() => "gone"),
        ).toBe("gone");
        expect(
          await docker
            .getNetwork(networkName(jobId))
            .inspect()
            .catch(() => "gone"),
        ).toBe("gone");
      });
    },
  );

  it(
    "argv is passed as an array: an argument with spaces and quotes reaches " +
      "the program intact, no shell involved",
    async () => {
      await withRunner(async (runner, ws) => {
        const jobId = (
          await admin.enqueue({
            workspaceId: ws,
            spec: specFor("docker", { argv: ["echo", "a  b", "'$HOME'", "; ls"] }),
          })
        ).json.job.id;
        expect((await settled(jobId)).state).toBe("succeeded");
        expect(runner.recorded.job(jobId).logs.map((l) => l.text)).toEqual(["a  b '$HOME' ; ls"]);
      });
    },
  );

  it(
    "an image that is missing and cannot be pulled fails the job with " +
      "image_unavailable naming the image",
    async () => {
      await withRunner(async (runner, ws) => {
        const image = "forelead-test/does-not-exist:never";
        const jobId = (
          await admin.enqueue({
            workspaceId: ws,
            spec: { image, argv: ["true"], timeoutSeconds: 60 },
          })
        ).json.job.id;
        const job = await settled(jobId);
        expect(job).toMatchObject({
          state: "failed",
          attempts: 1,
          error: { code: "image_unavailable" },
        });
        expect(job.error.message).toContain(image);
        expect(job.error.retryable ?? false).toBe(false);
        expect(await runner.executor.resources()).toEqual([]);
      });
    },
  );

  it("a job over its memory limit is killed by the engine and fails with out_of_memory", async () => {
    await withRunner(async (_runner, ws) => {
      // sh keeps the growing string in memory; 8 MiB cannot hold it for long.
      const grow = "x=0123456789; while true; do x=$x$x; done";
      const jobId = (
        await admin.enqueue({
          workspaceId: ws,
          spec: specFor("docker", {
            argv: ["sh", "-c", grow],
            memoryBytes: String(8 * 1024 * 1024),
            timeoutSeconds: 60,
          }),
        })
      ).json.job.id;
      const job = await settled(jobId);
      expect(job, JSON.stringify(job)).toMatchObject({
        state: "failed",
        error: { code: "out_of_memory" },
      });
    });
  });
});

describe.skipIf(!withDocker)(`orphans are reaped only on an order (${databaseKind})`, () => {
  it(
    "a container left by no live job is reported as an orphan, ordered " +
      "removed by an administrator, and removed by the runner",
    async () => {
      await withRunner(async (runner, ws) => {
        const docker = createDockerClient();
        // What a crashed earlier run leaves behind: a launcher-named container of a job no longer
        // running here.
        const deadJob = "01a226bc-0000-7000-8000-00000000d1ed";
        const name = containerName(deadJob);
        await docker.createContainer({
          name,
          Image: testImage,
          Cmd: ["true"],
          Env: [],
          Labels: {
            "forelead.runner": runner.client.runnerId,
            "forelead.workspace": ws,
            "forelead.task": "main",
            "forelead.job": deadJob,
          },
          WorkingDir: "/",
          AttachStdout: false,
          AttachStderr: false,
          Tty: false,
          HostConfig: { NetworkMode: "none", Binds: [] },
        });
        try {
          expect(await runner.agent.reportInventory()).toEqual([]);
          const orphans = (await admin.rest.request("GET", `/v1/admin/orphans?workspaceId=${ws}`))
            .json.orphans;
          expect(orphans).toEqual([
            expect.objectContaining({
              runnerId: runner.client.runnerId,
              item: expect.objectContaining({
                kind: "container",
                name,
                jobId: deadJob,
                orphan: true,
              }),
            }),
          ]);
          const order = await admin.rest.request("POST", "/v1/admin/reap-orders", {
            apiVersion: "v1",
            runnerId: runner.client.runnerId,
            workspaceId: ws,
            kind: "container",
            name,
          });
          expect(order.status, order.text).toBe(200);
          // The next report carries the order; the runner removes the container it still calls an
          // orphan.
          expect(await runner.agent.reportInventory()).toEqual([{ kind: "container", name }]);
          expect(
            await docker
              .getContainer(name)
              .inspect()
              .catch(() => "gone"),
          ).toBe("gone");
          await runner.agent.reportInventory();
          const orders = (
            await admin.rest.request("GET", `/v1/admin/reap-orders?workspaceId=${ws}`)
          ).json.orders;
          expect(orders).toEqual([expect.objectContaining({ name, state: "done" })]);
        } finally {
          await docker
            .getContainer(name)
            .remove({ force: true })
            .catch(() => {});
        }
      });
    },
  );
});

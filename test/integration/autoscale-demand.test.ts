import "reflect-metadata";
import { describe, expect, it } from "vitest";
import { registeredRunner } from "../support/actors.js";
import { useControlPlane } from "../support/fixture.js";
import { scrape } from "../support/metrics.js";
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { GetStatusResponseSchema } from "../../gen/forelead/admin/v1/status_pb.js";
import { formatStatus } from "../../src/cli/status.js";

// Issue 48 item 1: demand per scaling group and per kind of queued job, from the claim's own
// clauses, with wantedRunners and its reason; the group's figures as the KEDA metrics-api body
// and as Prometheus gauges.
const cp = useControlPlane({ metricsListen: { host: "127.0.0.1", port: 0 } });
const { admin } = cp;

interface GroupSpec {
  readonly workspaceId: string;
  readonly labels?: readonly string[];
  readonly minRunners?: number;
  readonly maxRunners?: number;
  readonly slotsPerRunner?: number;
  readonly provider?: string;
  readonly architecture?: string;
}

const putGroup = (name: string, spec: GroupSpec, controller = "ctl-1", leaseSeconds = 60) =>
  admin.rest.request("PUT", `/v1/admin/scaling-groups/${name}`, {
    apiVersion: "v1",
    controller,
    leaseSeconds,
    spec: {
      labels: ["linux"],
      minRunners: 0,
      maxRunners: 3,
      provider: "process",
      architecture: "amd64",
      ...spec,
    },
  });

async function group(name: string, spec: GroupSpec) {
  const reply = await putGroup(name, spec);
  expect(reply.status, reply.text).toBe(200);
}

async function enqueue(workspaceId: string, n: number, overrides: Record<string, unknown> = {}) {
  for (let i = 0; i < n; i++) {
    const reply = await admin.enqueue({ workspaceId, ...overrides });
    expect(reply.status, reply.text).toBe(200);
  }
}

async function demand(workspaceId: string) {
  const reply = await admin.rest.request("GET", `/v1/admin/demand?workspaceId=${workspaceId}`);
  expect(reply.status, reply.text).toBe(200);
  return reply.json as {
    groups?: Array<Record<string, unknown> & { name: string }>;
    kinds?: Array<Record<string, unknown> & { labels: string[] }>;
  };
}

const groupOf = async (ws: string, name: string) =>
  (await demand(ws)).groups?.find((g) => g.name === name);

describe("demand per scaling group", () => {
  it("wants a runner per job beyond the free slots, up to max, with the jobs' wait", async () => {
    await group("dg1", { workspaceId: "dm1", maxRunners: 3 });
    await enqueue("dm1", 2);
    const g = await groupOf("dm1", "dg1");
    expect(g).toMatchObject({
      jobsQueued: 2,
      slotsFree: 0,
      wantedRunners: 2,
      reason: "scale_up",
      controller: "ctl-1",
    });
    // The KEDA metrics-api scaler reads one group's figures as the whole body (JSON numbers).
    const keda = await admin.rest.request("GET", "/v1/admin/scaling-groups/dg1/demand");
    expect(keda.status, keda.text).toBe(200);
    expect(keda.json.wantedRunners).toBe(2);
    expect(keda.json.jobsQueued).toBe(2);
    // Free slots of a runner offering the group's labels cover the jobs: nothing more is wanted.
    await registeredRunner(cp, "dm1-static", "dm1", { slots: 2 });
    expect(await groupOf("dm1", "dg1")).toMatchObject({
      slotsFree: 2,
      wantedRunners: 0,
      reason: "free_slots",
    });
  });

  it("wants none at max: the group's busy runners count against it", async () => {
    await group("dg2", { workspaceId: "dm2", maxRunners: 2 });
    for (const id of ["dg2-a", "dg2-b"]) {
      const runner = await registeredRunner(cp, id, "dm2");
      await enqueue("dm2", 1);
      const claim = await runner.claim({ waitSeconds: 0 });
      expect(claim.status, claim.text).toBe(200);
    }
    await enqueue("dm2", 5);
    expect(await groupOf("dm2", "dg2")).toMatchObject({
      jobsQueued: 5,
      jobsRunning: 2,
      runners: 2,
      slotsFree: 0,
      wantedRunners: 0,
      reason: "at_max",
    });
  });

  it("counts runners of slotsPerRunner, and min runners with no job", async () => {
    await group("dg3", { workspaceId: "dm3", slotsPerRunner: 4, minRunners: 1, maxRunners: 5 });
    expect(await groupOf("dm3", "dg3")).toMatchObject({ wantedRunners: 1, reason: "below_min" });
    await enqueue("dm3", 9);
    expect(await groupOf("dm3", "dg3")).toMatchObject({ jobsQueued: 9, wantedRunners: 3 });
  });

  it("wants none in a paused workspace", async () => {
    await group("dg4", { workspaceId: "dm4" });
    await enqueue("dm4", 3);
    const paused = await admin.rest.request("POST", "/v1/admin/workspaces/dm4/pause", {
      apiVersion: "v1",
    });
    expect(paused.status, paused.text).toBe(200);
    expect(await groupOf("dm4", "dg4")).toMatchObject({
      jobsQueued: 3,
      wantedRunners: 0,
      reason: "workspace_paused",
    });
  });

  it("counts a concurrency group's jobs up to its room, and only jobs due", async () => {
    await group("dg5", { workspaceId: "dm5" });
    await enqueue("dm5", 4, { concurrencyKey: "deploy", concurrencyLimit: 1 });
    await enqueue("dm5", 2, { delaySeconds: 3600 });
    expect(await groupOf("dm5", "dg5")).toMatchObject({ jobsQueued: 1, wantedRunners: 1 });
  });
});

describe("demand per kind of queued job", () => {
  it("wants 0, saying why, for jobs whose labels or requirements no group offers", async () => {
    await group("dg6", { workspaceId: "dm6" });
    await enqueue("dm6", 2, { labels: ["linux", "gpu"] });
    await enqueue("dm6", 1, { requirements: { architecture: "arm64" } });
    await enqueue("dm6", 1);
    const d = await demand("dm6");
    expect(d.groups?.find((g) => g.name === "dg6")).toMatchObject({
      jobsQueued: 1,
      wantedRunners: 1,
    });
    const gpu = d.kinds?.find((k) => k.labels.includes("gpu"));
    expect(gpu).toMatchObject({ jobsQueued: 2, wantedRunners: 0, reason: "no_group_offers" });
    expect(gpu?.groups ?? []).toEqual([]);
    const arm = d.kinds?.find((k) => k.architecture === "arm64");
    expect(arm).toMatchObject({ jobsQueued: 1, wantedRunners: 0, reason: "no_group_offers" });
    const plain = d.kinds?.find((k) => k.labels.join() === "linux" && !k.architecture);
    expect(plain).toMatchObject({ groups: ["dg6"], wantedRunners: 0, reason: "by_group" });
  });

  it("without groups, wants one-slot runners for the jobs the runners able to take them cannot", async () => {
    await registeredRunner(cp, "dm7-r", "dm7", { slots: 2 });
    await registeredRunner(cp, "dm7-arm", "dm7", { slots: 5, architecture: "arm64" });
    await enqueue("dm7", 5, { requirements: { architecture: "amd64" } });
    const [kind] = (await demand("dm7")).kinds ?? [];
    expect(kind).toMatchObject({
      workspaceId: "dm7",
      jobsQueued: 5,
      runnersIdle: 1,
      slotsFree: 2,
      wantedRunners: 3,
      reason: "scale_up",
    });
  });
});

describe("scaling group registration", () => {
  it("refuses a second controller while the first holds the lease, and hands over after it", async () => {
    await group("dg8", { workspaceId: "dm8" });
    const second = await putGroup("dg8", { workspaceId: "dm8" }, "ctl-2");
    expect(second.status, second.text).toBe(400);
    expect(second.json.code).toBe("failed_precondition");
    expect(second.json.message).toContain('held by controller "ctl-1"');
    const renewed = await putGroup("dg8", { workspaceId: "dm8", maxRunners: 4 });
    expect(renewed.status, renewed.text).toBe(200);
    expect(renewed.json.tookOver ?? false).toBe(false);
    // The first controller died: its lease lapses.
    await cp.plane.store.db
      .updateTable("scaling_groups")
      .set({ lease_expires_at: new Date(Date.now() - 1000) })
      .where("name", "=", "dg8")
      .execute();
    const takeover = await putGroup("dg8", { workspaceId: "dm8" }, "ctl-2");
    expect(takeover.status, takeover.text).toBe(200);
    expect(takeover.json).toMatchObject({ controller: "ctl-2", tookOver: true });
  });

  it.each([
    ["an unknown provider", { provider: "kubernetes" }, "spec.provider"],
    ["min above max", { minRunners: 4, maxRunners: 2 }, "spec.maxRunners"],
    ["a workspace id that is not an id", { workspaceId: "w 1/../x" }, "spec.workspaceId"],
    ["a bad label", { labels: ["has space"] }, "spec.labels[0]"],
  ])("refuses %s naming the field", async (_what, spec, field) => {
    const reply = await putGroup("dg9", { workspaceId: "dm9", ...spec });
    expect(reply.status, reply.text).toBe(400);
    expect(reply.json.message).toContain(field);
  });

  it("answers 404 for the demand of a group nobody registered", async () => {
    const reply = await admin.rest.request("GET", "/v1/admin/scaling-groups/nobody/demand");
    expect(reply.status, reply.text).toBe(404);
  });
});

describe("demand gauges", () => {
  it("exports each group's figures on the metrics listener", async () => {
    await group("dg10", { workspaceId: "dm10" });
    await enqueue("dm10", 2);
    const s = await scrape(cp.plane.metrics!.url);
    const labels = { group: "dg10", workspace: "dm10" };
    expect(s.value("forelead_autoscale_group_jobs_queued", labels)).toBe(2);
    expect(s.value("forelead_autoscale_group_wanted_runners", labels)).toBe(2);
  });
});

describe("status", () => {
  it("shows each group: desired, runners, queued and what it wants", async () => {
    await group("dg11", { workspaceId: "dm11", maxRunners: 2 });
    await enqueue("dm11", 5);
    const reply = await admin.rest.request("GET", "/v1/admin/status");
    expect(reply.status, reply.text).toBe(200);
    const groups = reply.json.scalingGroups as Array<Record<string, unknown>>;
    expect(groups.find((g) => g.name === "dg11")).toMatchObject({
      jobsQueued: 5,
      wantedRunners: 2,
      reason: "scale_up",
    });
    const text = formatStatus(
      fromJson(GetStatusResponseSchema, reply.json as JsonValue, { ignoreUnknownFields: true }),
    );
    expect(text).toMatch(
      /^ {2}dg11 {2}dm11 {2}desired 2 {2}runners 0 .*wants 2 more \(scale_up\)/m,
    );
  });
});

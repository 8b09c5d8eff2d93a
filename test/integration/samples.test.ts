import "reflect-metadata";
import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import { SamplesService } from "../../gen/forelead/admin/v1/samples_pb.js";
import { eventually, registeredRunner } from "../support/actors.js";
import { parseRoleGrant } from "../../src/identity/roles.js";
import { createRestClient, createTestClient } from "../support/clients.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import {
  executorsUnderTest,
  specFor,
  startTestRunner,
  type ExecutorKind,
} from "../support/runner-agent.js";
import { readEntries } from "../support/streams.js";

const withDocker = (await executorsUnderTest()).includes("docker");
const cp = useControlPlane({
  grants: [
    parseRoleGrant("spiffe://forelead/services/dash=read"),
    parseRoleGrant("spiffe://forelead/services/ci=enqueue:sm-roles"),
  ],
});
const { admin } = cp;
const MiB = 1024 * 1024;
/**
 * Runner ids unique to this run: Docker resources are found by the forelead.runner label, and other
 * suites may share the engine.
 */
const tag = Math.random().toString(36).slice(2, 8);

async function settled(jobId: string) {
  return eventually(
    `job ${jobId} to settle`,
    async () => {
      const job = (await admin.job(jobId)).json.job;
      return ["succeeded", "failed", "cancelled"].includes(job.state) ? job : undefined;
    },
    60_000,
  );
}

interface SamplesJson {
  jobId: string;
  samples?: Array<{ at: string; cpuCores?: number; memoryBytes?: string; attempt: number }>;
  peakCpuCores?: number;
  peakMemoryBytes?: string;
}

async function samplesOf(jobId: string): Promise<SamplesJson> {
  const reply = await admin.rest.request("GET", `/v1/admin/jobs/${jobId}/samples`);
  expect(reply.status, reply.text).toBe(200);
  return reply.json as SamplesJson;
}

/** Runs `spec` on a real runner of `executor` sampling every 0.5 s; the settled job's id. */
async function runSampled(
  executor: ExecutorKind,
  ws: string,
  spec: Record<string, unknown>,
): Promise<string> {
  const runner = await startTestRunner(cp, {
    runnerId: `sm-${executor}-${tag}`,
    workspaceId: ws,
    executor,
    sampleIntervalMs: 500,
  });
  try {
    const enq = await admin.enqueue({ workspaceId: ws, spec: specFor(executor, spec) });
    expect(enq.status, enq.text).toBe(200);
    const jobId: string = enq.json.job.id;
    const job = await settled(jobId);
    expect(job.state, JSON.stringify(job)).toBe("succeeded");
    return jobId;
  } finally {
    await runner.close();
  }
}

describe(`resource samples of real jobs (${databaseKind})`, () => {
  it(
    "a process job that holds 64 MiB, burns 1.5 CPU-seconds and lives 4 s " +
      "reports samples every 0.5 s: the series, the memory it touched, the CPU " +
      "it used",
    async () => {
      // A buffer filled with ones (its pages are touched, so resident), then a busy loop reading it
      // until the job has used 1.5 s of CPU by its own account: a fixed amount of work however busy
      // the machine is. Then it idles, still holding the buffer, until 4 s after it started: on a
      // loaded machine the agent's readings come late (one reading of a 1.5 s job was seen in CI),
      // and the idle time adds readings, not CPU.
      const program =
        "const start = Date.now(); const b = Buffer.alloc(64 * 1024 * 1024, 1); " +
        "let x = 0; const used = () => { const u = process.cpuUsage(); return " +
        "u.user + u.system; }; while (used() < 1.5e6) for (let i = 0; i < 1e5; " +
        "i++) x += b[(x + i) % b.length]; setTimeout(() => console.log('done', x " +
        "> 0, b.length), Math.max(0, start + 4000 - Date.now()));";
      // "node" from the job's PATH: process.execPath may lie under /root (CI's Node 24), which the
      // job's own user cannot enter.
      const jobId = await runSampled("process", "sm-proc", { argv: ["node", "-e", program] });

      const found = await samplesOf(jobId);
      expect(found.samples?.length ?? 0, JSON.stringify(found)).toBeGreaterThanOrEqual(2);
      // the buffer alone; node itself adds to it
      expect(Number(found.peakMemoryBytes)).toBeGreaterThanOrEqual(64 * MiB);
      // CPU over time: each sample's cores times its interval adds up to the CPU the job used (1.5 s
      // and node's start), less at most the last interval after the final sample (≤ 0.5 s of one
      // core). The first sample covers the time from the start, one interval.
      let previous = Date.parse(found.samples![0]!.at) - 500;
      let cpuSeconds = 0;
      for (const s of found.samples!) {
        const at = Date.parse(s.at);
        cpuSeconds += ((s.cpuCores ?? 0) * (at - previous)) / 1000; // proto3 JSON leaves a 0 out
        previous = at;
      }
      expect(cpuSeconds, JSON.stringify(found.samples)).toBeGreaterThan(0.8);
      expect(cpuSeconds, JSON.stringify(found.samples)).toBeLessThan(2.5);
      expect(found.peakCpuCores).toBeGreaterThan(0);
      expect(found.peakCpuCores).toBe(Math.max(...found.samples!.map((s) => s.cpuCores ?? 0)));
      // Every sample saw the job's memory: a reading that finds only the exited (zombie) process is
      // not sent.
      expect(
        found.samples!.every((s) => Number(s.memoryBytes) > 0),
        JSON.stringify(found.samples),
      ).toBe(true);
      expect(found.peakMemoryBytes).toBe(
        String(Math.max(...found.samples!.map((s) => Number(s.memoryBytes)))),
      );
      const times = found.samples!.map((s) => Date.parse(s.at));
      expect(times).toEqual([...times].sort((a, b) => a - b));
      expect(found.samples!.every((s) => s.attempt === 1)).toBe(true);

      // They are events of the job's own stream, between job.started and job.exited.
      const types = (await readEntries(admin, jobId, "events")).map(
        (e) => (e.data as { type: string }).type,
      );
      const first = types.indexOf("resource.sample");
      expect(first).toBeGreaterThan(types.indexOf("job.started"));
      expect(types.lastIndexOf("resource.sample")).toBeLessThan(types.indexOf("job.exited"));
      expect(types.filter((t) => t === "resource.sample")).toHaveLength(found.samples!.length);

      // The same on the Connect surface.
      const client = createTestClient(
        SamplesService,
        cp.url,
        cp.pki.ca.certPem,
        await cp.pki.service("test-admin"),
        "connect-json",
      );
      const viaConnect = await client.getJobSamples({ jobId });
      expect(viaConnect.samples).toHaveLength(found.samples!.length);
      expect(viaConnect.peakMemoryBytes).toBe(BigInt(found.peakMemoryBytes!));
    },
  );

  it.skipIf(!withDocker)("a docker job reports samples from the engine's stats", async () => {
    // 6 s: one reading of the engine's stats can take a second or two on a loaded machine (CI saw
    // one sample of a 3 s job), and two readings are asked for.
    const busy = "end=$(($(date +%s) + 6)); while [ $(date +%s) -lt $end ]; do :; done; echo done";
    const jobId = await runSampled("docker", "sm-docker", {
      argv: ["sh", "-c", busy],
      memoryBytes: String(128 * MiB),
    });
    const found = await samplesOf(jobId);
    expect(found.samples?.length ?? 0, JSON.stringify(found)).toBeGreaterThanOrEqual(2);
    expect(Number(found.peakMemoryBytes)).toBeGreaterThan(0);
    // within the container's limit
    expect(Number(found.peakMemoryBytes)).toBeLessThanOrEqual(128 * MiB);
    expect(found.peakCpuCores).toBeGreaterThan(0);
  });
});

describe(`the samples route (${databaseKind})`, () => {
  it("needs the read role: a read identity is served, an enqueue-only one refused", async () => {
    const jobId = (await admin.enqueue({ workspaceId: "sm-roles" })).json.job.id;
    const dash = createRestClient(cp.url, cp.pki.ca.certPem, await cp.pki.service("dash"));
    const ci = createRestClient(cp.url, cp.pki.ca.certPem, await cp.pki.service("ci"));
    try {
      for (const path of [`/v1/admin/jobs/${jobId}/samples`, "/v1/admin/sizing"]) {
        const allowed = await dash.request("GET", path);
        expect(allowed.status, allowed.text).toBe(200);
        const refused = await ci.request("GET", path);
        expect(refused.status, refused.text).toBe(403);
        expect(refused.json.code).toBe("permission_denied");
      }
    } finally {
      await Promise.all([dash.close(), ci.close()]);
    }
  });

  it("an unknown job is a 404 naming it; a malformed id a 400", async () => {
    const unknown = randomUUID();
    const missing = await admin.rest.request("GET", `/v1/admin/jobs/${unknown}/samples`);
    expect(missing.status, missing.text).toBe(404);
    expect(missing.json.message).toContain(unknown);
    const bad = await admin.rest.request("GET", "/v1/admin/jobs/not-a-job/samples");
    expect(bad.status, bad.text).toBe(400);
    expect(bad.json.message).toContain("is not a job id");
  });

  it(
    "a job without samples has an empty series and zero peaks; events that " +
      "are not numbers are skipped, not a 500",
    async () => {
      const { jobId, runner, msg } = await seedLeased("sm-odd", {});
      const sent = await runner.rest.ndjson("/v1/runner/events", [
        msg(1, { type: "job.started" }),
        msg(2, { type: "resource.sample", cpuCores: "lots", memoryBytes: 1, at: "now" }),
        msg(3, { type: "resource.sample", cpuCores: 0.25, memoryBytes: 1000, at: "not a time" }),
      ]);
      expect(sent.status, sent.text).toBe(204);
      const found = await samplesOf(jobId);
      expect(found.samples).toHaveLength(1);
      expect(found.samples![0]).toMatchObject({ cpuCores: 0.25, memoryBytes: "1000", attempt: 1 });
      // the time it was stored, as the runner's is none
      expect(Number.isNaN(Date.parse(found.samples![0]!.at))).toBe(false);
      await runner.close();

      const quiet = (await admin.enqueue({ workspaceId: "sm-odd" })).json.job.id;
      const empty = await samplesOf(quiet);
      expect(empty.samples ?? []).toEqual([]);
      expect(empty.peakCpuCores ?? 0).toBe(0);
      expect(empty.peakMemoryBytes ?? "0").toBe("0");
    },
  );
});

/** A job of `ws` enqueued with `spec` fields and leased by a fresh registered runner. */
async function seedLeased(ws: string, spec: Record<string, unknown>) {
  const runner = await registeredRunner(cp, `seed-${randomUUID().slice(0, 8)}`, ws, {
    cpu: 16,
    memoryBytes: String(64 * 1024 * MiB),
  });
  const enq = await admin.enqueue({
    workspaceId: ws,
    spec: { image: "app:1", argv: ["make"], timeoutSeconds: 60, ...spec },
  });
  expect(enq.status, enq.text).toBe(200);
  const claim = await runner.claim();
  expect(claim.status, claim.text).toBe(200);
  const jobId: string = claim.json.job.id;
  const token: string = claim.json.token;
  const msg = (sequence: number, data: unknown) => ({
    apiVersion: "v1",
    runnerId: runner.runnerId,
    jobId,
    leaseToken: token,
    sequence,
    data,
  });
  return { runner, jobId, token, msg };
}

/**
 * A settled job of `ws` requesting `cpu` cores and `memoryMiB`, whose samples peak at `peak` (other
 * samples lower).
 */
async function seedSettled(
  ws: string,
  cpu: number,
  memoryMiB: number,
  peak: { cpu: number; memoryMiB: number },
): Promise<void> {
  const { runner, jobId, token, msg } = await seedLeased(ws, {
    cpu,
    memoryBytes: String(memoryMiB * MiB),
  });
  const sample = (sequence: number, cpuCores: number, memoryBytes: number) =>
    msg(sequence, { type: "resource.sample", cpuCores, memoryBytes, at: new Date().toISOString() });
  // Three requests, as a runner sends them over a job's life: the peak is kept across them.
  for (const batch of [
    [
      msg(1, { type: "job.started", executor: "process" }),
      sample(2, peak.cpu / 2, (peak.memoryMiB * MiB) / 2),
    ],
    [sample(3, peak.cpu, peak.memoryMiB * MiB)],
    [
      sample(4, peak.cpu / 4, (peak.memoryMiB * MiB) / 4),
      msg(5, { type: "job.exited", exitCode: 0 }),
    ],
  ]) {
    const sent = await runner.rest.ndjson("/v1/runner/events", batch);
    expect(sent.status, sent.text).toBe(204);
  }
  const done = await runner.complete(jobId, token);
  expect(done.status, done.text).toBe(200);
  await runner.close();
}

interface AdviceJson {
  requested?: number;
  p95Peak?: number;
  maxPeak?: number;
  advice: string;
  suggested?: number;
}
interface GroupJson {
  workspaceId: string;
  labels: string[];
  image: string;
  jobs: string;
  cpu: AdviceJson;
  memory: AdviceJson;
}

async function sizing(query: string): Promise<{ since: string; groups?: GroupJson[] }> {
  const reply = await admin.rest.request("GET", `/v1/admin/sizing${query}`);
  expect(reply.status, reply.text).toBe(200);
  return reply.json;
}

describe(`sizing (${databaseKind})`, () => {
  it(
    "lowers, raises or keeps each group's request by the p95 of its jobs' " +
      "peaks, to p95 plus 20% rounded up (0.1 core, 16 MiB)",
    async () => {
      // Two jobs per group: p95 of two peaks a < b is a + 0.95 (b - a).
      await seedSettled("sz-lower", 2, 1024, { cpu: 0.4, memoryMiB: 200 });
      await seedSettled("sz-lower", 2, 1024, { cpu: 0.5, memoryMiB: 300 });
      await seedSettled("sz-raise", 1, 256, { cpu: 0.95, memoryMiB: 250 });
      await seedSettled("sz-raise", 1, 256, { cpu: 1.0, memoryMiB: 260 });
      await seedSettled("sz-fits", 1, 512, { cpu: 0.6, memoryMiB: 300 });
      await seedSettled("sz-fits", 1, 512, { cpu: 0.7, memoryMiB: 400 });

      const lower = (await sizing("?workspaceId=sz-lower")).groups!;
      expect(lower).toHaveLength(1);
      expect(lower[0]).toMatchObject({
        workspaceId: "sz-lower",
        labels: ["linux"],
        image: "app:1",
        jobs: "2",
      });
      // cpu: p95 0.495, ×1.2 = 0.594 → 0.6; memory: p95 295 MiB, ×1.2 = 354 MiB → 368 MiB.
      expect(lower[0]!.cpu).toMatchObject({
        requested: 2,
        maxPeak: 0.5,
        advice: "lower",
        suggested: 0.6,
      });
      expect(lower[0]!.cpu.p95Peak).toBeCloseTo(0.495, 9);
      expect(lower[0]!.memory).toMatchObject({
        requested: 1024 * MiB,
        maxPeak: 300 * MiB,
        advice: "lower",
        suggested: 368 * MiB,
      });

      // cpu: p95 0.9975 > 90% of 1, ×1.2 = 1.197 → 1.2; memory: p95 259.5 MiB > 230.4, ×1.2 = 311.4
      // MiB → 320 MiB.
      const raise = (await sizing("?workspaceId=sz-raise&since=1h")).groups!;
      expect(raise).toHaveLength(1);
      expect(raise[0]!.cpu).toMatchObject({ requested: 1, advice: "raise", suggested: 1.2 });
      expect(raise[0]!.memory).toMatchObject({
        requested: 256 * MiB,
        advice: "raise",
        suggested: 320 * MiB,
      });

      // cpu: p95 0.695 of 1; memory: p95 395 MiB of 512 (77%): both between 50% and 90%.
      const fits = (await sizing("?workspaceId=sz-fits")).groups!;
      expect(fits[0]!.cpu).toMatchObject({ requested: 1, advice: "fits", suggested: 1 });
      expect(fits[0]!.memory).toMatchObject({
        requested: 512 * MiB,
        advice: "fits",
        suggested: 512 * MiB,
      });

      // Every workspace at once, in workspace order.
      const all = (await sizing(""))
        .groups!.map((g) => g.workspaceId)
        .filter((w) => w.startsWith("sz-"));
      expect(all).toEqual(["sz-fits", "sz-lower", "sz-raise"]);
    },
  );

  it("takes since as RFC 3339, Unix seconds, a duration or days, and counts only jobs settled since then", async () => {
    await seedSettled("sz-since", 1, 512, { cpu: 0.6, memoryMiB: 300 });
    const hourAgo = new Date(Date.now() - 3_600_000);
    for (const since of [
      hourAgo.toISOString(),
      String(Math.floor(hourAgo.getTime() / 1000)),
      "60m",
      "3600s",
      "1h",
      "1d",
    ]) {
      const reply = await sizing(`?workspaceId=sz-since&since=${encodeURIComponent(since)}`);
      expect(
        reply.groups?.map((g) => g.jobs),
        since,
      ).toEqual(["1"]);
    }
    const later = await sizing(
      `?workspaceId=sz-since&since=${Math.floor(Date.now() / 1000) + 3600}`,
    );
    expect(later.groups ?? []).toEqual([]);
    // Without since: 7 days back.
    const week = await sizing("?workspaceId=sz-since");
    expect(Date.now() - Date.parse(week.since)).toBeGreaterThanOrEqual(7 * 86_400_000);
    expect(Date.now() - Date.parse(week.since)).toBeLessThan(7 * 86_400_000 + 60_000);
  });

  it("a since that is none of the forms is a 400 naming them", async () => {
    for (const since of ["yesterday", "7w", "-1h", "2026-13-01"]) {
      const reply = await admin.rest.request(
        "GET",
        `/v1/admin/sizing?since=${encodeURIComponent(since)}`,
      );
      expect(reply.status, reply.text).toBe(400);
      expect(reply.json.code).toBe("invalid_argument");
      expect(reply.json.message).toContain(`since ${JSON.stringify(since)} is not a time`);
      for (const form of ["RFC 3339", "Unix seconds", "720h", "30d"])
        expect(reply.json.message).toContain(form);
    }
  });
});

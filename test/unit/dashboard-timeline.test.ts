import { describe, expect, it } from "vitest";
import {
  reduceTimeline,
  type FleetEvent,
  type RunnerEvent,
} from "../../src/dashboard/web/job/timeline.js";

const t = (s: number) => new Date(Date.UTC(2026, 11, 1, 9, 0, s));

describe("a job's timeline", () => {
  it("orders the job's own facts and its runners' events, with one attempt summary per attempt", () => {
    const runnerEvents: RunnerEvent[] = [
      { attempt: 1, receivedAt: t(2), data: { type: "job.started", executor: "process" } },
      { attempt: 1, receivedAt: t(3), data: { type: "resource.sample", cpuCores: 1 } },
      {
        attempt: 1,
        receivedAt: t(4),
        data: { type: "job.exited", signal: "SIGKILL", durationMs: 2000 },
      },
      { attempt: 2, receivedAt: t(6), data: { type: "job.started", executor: "process" } },
      { attempt: 2, receivedAt: t(9), data: { type: "job.exited", exitCode: 0, durationMs: 3000 } },
    ];
    const tl = reduceTimeline(
      { state: "succeeded", createdAt: t(0), settledAt: t(10), attempts: 2, runnerId: "r2" },
      runnerEvents,
      [],
    );
    expect(tl.steps.map((s) => [s.label, s.attempt, s.detail])).toEqual([
      ["queued", undefined, ""],
      ["started", 1, "process executor"],
      ["exited", 1, "signal SIGKILL"],
      ["started", 2, "process executor"],
      ["exited", 2, "exit 0"],
      ["succeeded", undefined, ""],
    ]);
    expect(tl.attempts.map((a) => [a.attempt, a.runnerId, a.ending, a.durationMs])).toEqual([
      [1, "", "signal SIGKILL", 2000],
      [2, "r2", "exit 0", 3000],
    ]);
  });

  it("takes the global stream's events where they came, once each, and the runner of each lease", () => {
    const fleet: FleetEvent[] = [
      { id: 11n, at: t(0), type: "job.queued", runnerId: "", data: { labels: [], priority: 0 } },
      { id: 12n, at: t(1), type: "job.leased", runnerId: "r1", data: { attempt: 1 } },
      {
        id: 13n,
        at: t(5),
        type: "job.requeued",
        runnerId: "r1",
        data: { why: "lease_lost", attempt: 1 },
      },
      { id: 14n, at: t(6), type: "job.leased", runnerId: "r2", data: { attempt: 2 } },
      {
        id: 15n,
        at: t(7),
        type: "job.cancel_requested",
        runnerId: "",
        data: { state: "running", by: "spiffe://forelead/services/ops" },
      },
      {
        id: 16n,
        at: t(9),
        type: "job.settled",
        runnerId: "r2",
        data: { outcome: "cancelled", errorCode: "cancelled", attempt: 2 },
      },
    ];
    const runnerEvents: RunnerEvent[] = [
      { attempt: 1, receivedAt: t(2), data: { type: "job.started", executor: "docker" } },
      { attempt: 2, receivedAt: t(6.5), data: { type: "job.started", executor: "docker" } },
      { attempt: 2, receivedAt: t(8), data: { type: "job.cancelled" } },
    ];
    const tl = reduceTimeline(
      { state: "cancelled", createdAt: t(0), settledAt: t(9), attempts: 2, runnerId: "r2" },
      runnerEvents,
      fleet,
    );
    expect(tl.steps.map((s) => s.label)).toEqual([
      "queued",
      "leased",
      "started",
      "requeued",
      "leased",
      "started",
      "cancel requested",
      "cancelled by spiffe://forelead/services/ops",
      "cancelled",
    ]);
    expect(tl.steps.find((s) => s.label === "cancel requested")!.detail).toBe(
      "by spiffe://forelead/services/ops while running",
    );
    expect(tl.steps.find((s) => s.label === "leased")!.detail).toBe("to r1");
    expect(tl.attempts.map((a) => [a.attempt, a.runnerId, a.ending])).toEqual([
      [1, "r1", "requeued (lease_lost)"],
      [2, "r2", "cancelled"],
    ]);
  });

  it("a queued job is one step; a job settled with an error code says it", () => {
    expect(
      reduceTimeline(
        { state: "queued", createdAt: t(0), attempts: 0, runnerId: "" },
        [],
        [],
      ).steps.map((s) => s.label),
    ).toEqual(["queued"]);
    const failed = reduceTimeline(
      {
        state: "failed",
        createdAt: t(0),
        settledAt: t(3),
        attempts: 1,
        runnerId: "r1",
        errorCode: "timeout",
      },
      [
        { attempt: 1, receivedAt: t(1), data: { type: "job.started" } },
        { attempt: 1, receivedAt: t(2), data: { type: "job.timeout", timeoutSeconds: 30 } },
      ],
      [],
    );
    expect(failed.steps.map((s) => [s.label, s.detail, s.tone])).toEqual([
      ["queued", "", "neutral"],
      ["started", "", "neutral"],
      ["timed out", "after 30 s", "bad"],
      ["failed", "timeout", "bad"],
    ]);
    expect(failed.attempts[0]!.ending).toBe("timed out after 30 s");
  });
});

import { PassThrough } from "node:stream";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { afterEach, describe, expect, it, vi } from "vitest";
import { LeaseSchema } from "../../gen/forelead/runner/v1/job_pb.js";
import { architecture } from "../../src/cli/runner.js";
import { RunnerApiError, type RunnerClient } from "../../src/runner/transport/client.js";
import { measureClockOffset, serverClock } from "../../src/runner/lifecycle/clock.js";
import { settlementOf } from "../../src/runner/lifecycle/job-run.js";
import { keepLease } from "../../src/runner/lifecycle/lease-keeper.js";
import { createLeaseRun } from "../../src/runner/lifecycle/run-state.js";
import { forEachLine, maxLineChars } from "../../src/runner/executors/lines.js";
import { TransportError } from "../../src/runner/transport/rest-transport.js";

describe("clock offset", () => {
  it("takes the sample with the least round trip and assumes the server read its clock halfway", async () => {
    // Runner clock readings (ns) around each call, and what the server said each time.
    const local = [1000n, 1400n, 2000n, 2100n, 3000n, 3900n];
    const server = [500n, 1600n, 2000n];
    let i = 0;
    let j = 0;
    const offset = await measureClockOffset(
      async () => server[j++]!,
      3,
      () => local[i++]!,
    );
    // Round trips 400, 100, 900: the second wins; midpoint 2050 - server 1600.
    expect(offset).toEqual({ offsetNs: 450n, roundTripNs: 100n, samples: 3 });
  });

  it("estimates control-plane time as the runner's clock minus the offset", () => {
    const clock = serverClock(5_000_000_000n, () => 10_000);
    expect(clock.nowMs()).toBe(5_000);
  });
});

describe("settling rules", () => {
  const run = (r: Partial<Parameters<typeof settlementOf>[0]>) => ({ durationMs: 1, ...r });
  it("exit 0 succeeds; non-zero fails with the exit code", () => {
    expect(settlementOf(run({ exitCode: 0 }), undefined, 60, "make")).toEqual({
      outcome: "succeeded",
      exitCode: 0,
    });
    expect(settlementOf(run({ exitCode: 2 }), undefined, 60, "make")).toEqual({
      outcome: "failed",
      exitCode: 2,
      error: { code: "exit_code", message: "make exited 2", retryable: false },
    });
  });
  it("a timeout fails with code timeout and a cancel is cancelled, whatever the exit code", () => {
    expect(settlementOf(run({ exitCode: 137 }), "timeout", 5, "sleep")).toMatchObject({
      outcome: "failed",
      error: { code: "timeout", retryable: false },
    });
    expect(settlementOf(run({ exitCode: 0 }), "cancel", 5, "sleep")).toEqual({
      outcome: "cancelled",
    });
  });
  it("an executor's own error is the job's error; a signal without an exit code is 'killed'", () => {
    const error = { code: "image_unavailable", message: "no", retryable: false };
    expect(settlementOf(run({ error }), undefined, 5, "x")).toEqual({ outcome: "failed", error });
    expect(settlementOf(run({ signal: "SIGKILL" }), undefined, 5, "x")).toMatchObject({
      outcome: "failed",
      error: { code: "killed" },
    });
  });
});

describe("run phases", () => {
  const fakeJob = () => {
    const stops: number[] = [];
    return {
      stops,
      job: {
        done: new Promise<never>(() => {}),
        stop: async (graceMs: number) => void stops.push(graceMs),
      },
    };
  };
  const fakeOutput = () => {
    const calls: string[] = [];
    return {
      calls,
      output: {
        log: () => {},
        event: () => {},
        flush: async () => {},
        abandon: () => void calls.push("abandon"),
      },
    };
  };

  it(
    "a lost lease kills the running job at once, drops its output, and no " +
      "phase follows: nothing is completed or released",
    () => {
      const run = createLeaseRun();
      const { output, calls } = fakeOutput();
      const { job, stops } = fakeJob();
      run.starting(() => output);
      run.running(job, 1000);
      expect(run.lose("refused")).toBe("running");
      expect(stops).toEqual([0]);
      expect(calls).toEqual(["abandon"]);
      expect(run.stop("cancel", 1000)).toBe(false);
      expect(run.ended()).toBeUndefined();
      expect(run.state).toEqual({ phase: "lost", why: "refused" });
      expect(run.lostSignal.aborted).toBe(true);
    },
  );

  it("a job that finishes starting after its lease was lost is killed as it starts", () => {
    const run = createLeaseRun();
    const { job, stops } = fakeJob();
    run.starting(() => fakeOutput().output);
    run.lose("expired");
    run.running(job, 1000);
    expect(stops).toEqual([0]);
    expect(run.state.phase).toBe("lost");
  });

  it("a run stopped during the checkout starts nothing; one stopped for a release ends releasing, not settling", () => {
    const run = createLeaseRun();
    expect(run.stop("release", 1000)).toBe(true);
    let opened = false;
    expect(run.starting(() => ((opened = true), fakeOutput().output))).toBeUndefined();
    expect(opened).toBe(false);
    expect(run.ended()?.phase).toBe("releasing");
  });
});

describe("log lines", () => {
  it(
    "splits on LF and CRLF, keeps a last line without newline, and does not " +
      "break a character split across chunks",
    async () => {
      const stream = new PassThrough();
      const lines: string[] = [];
      const done = forEachLine(stream, (l) => lines.push(l));
      const euro = Buffer.from("€");
      stream.write("one\r\ntw");
      stream.write(Buffer.concat([Buffer.from("o\n"), euro.subarray(0, 1)]));
      stream.write(Buffer.concat([euro.subarray(1), Buffer.from("\n\nlast")]));
      stream.end();
      await done;
      expect(lines).toEqual(["one", "two", "€", "", "last"]);
    },
  );

  it("cuts an endless line into bounded pieces", async () => {
    const stream = new PassThrough();
    const lines: string[] = [];
    const done = forEachLine(stream, (l) => lines.push(l));
    stream.end("x".repeat(maxLineChars * 2 + 5));
    await done;
    expect(lines.map((l) => l.length)).toEqual([maxLineChars, maxLineChars, 5]);
  });
});

describe("architecture names", () => {
  it("maps Node's names to the ones images use", () => {
    expect(["x64", "arm64", "ia32"].map(architecture)).toEqual(["amd64", "arm64", "386"]);
  });
});

describe("lease keeping", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  const lease = (expiresAtMs: number, cancelRequested = false) =>
    create(LeaseSchema, { expiresAt: timestampFromMs(expiresAtMs), cancelRequested });
  function keeper(renew: () => Promise<unknown>, offsetMs: number, leaseMs: number) {
    const client = { renew } as unknown as RunnerClient;
    const clock = serverClock(BigInt(offsetMs) * 1_000_000n);
    const events: string[] = [];
    const k = keepLease({
      client,
      clock,
      jobId: "j1",
      leaseToken: "t",
      expiresAtMs: clock.nowMs() + leaseMs,
      onCancelRequested: () => events.push("cancel"),
      onLost: (why) => events.push(`lost: ${why}`),
      log: () => {},
    });
    return { k, events };
  }

  it("with renewals failing, the lease is lost exactly when the corrected clock passes the expiry", async () => {
    vi.useFakeTimers({ now: 1_000_000 });
    // The runner's clock is 5 s ahead of the control plane's; a 3 s lease.
    const { k, events } = keeper(
      () => Promise.reject(new TransportError("connection refused")),
      5000,
      3000,
    );
    await vi.advanceTimersByTimeAsync(2950);
    expect(events).toEqual([]);
    await vi.advanceTimersByTimeAsync(100);
    expect(events).toHaveLength(1);
    expect(events[0]).toMatch(/^lost: the lease expired at .* without a successful renewal$/);
    k.stop();
  });

  it(
    "a refused renewal (409) loses the lease at once; a renewal with " +
      "cancelRequested asks for a cancel once",
    async () => {
      vi.useFakeTimers({ now: 1_000_000 });
      const refused = keeper(
        () =>
          Promise.reject(new RunnerApiError("POST /v1/runner/renew", 409, "aborted", "expired")),
        0,
        30_000,
      );
      await vi.advanceTimersByTimeAsync(10_100);
      expect(refused.events).toEqual([
        expect.stringMatching(/^lost: the control plane refused the renewal/),
      ]);

      const cancelled = keeper(async () => lease(Date.now() + 30_000, true), 0, 30_000);
      await vi.advanceTimersByTimeAsync(60_000);
      expect(cancelled.events).toEqual(["cancel"]);
      cancelled.k.stop();
    },
  );

  it("successful renewals keep the lease past its first expiry", async () => {
    vi.useFakeTimers({ now: 1_000_000 });
    const { k, events } = keeper(async () => lease(Date.now() + 3000), 0, 3000);
    await vi.advanceTimersByTimeAsync(20_000);
    expect(events).toEqual([]);
    expect(k.lostReason).toBeUndefined();
    k.stop();
  });
});

import { ConnectError, Code } from "@connectrpc/connect";
import { afterEach, describe, expect, it, vi } from "vitest";
import { toConnectError } from "../../src/api/errors.js";
import { createWakeups } from "../../src/broker/leases/wakeups.js";
import type { Store } from "../../src/store/database.js";
import { createDatabaseHealth } from "../../src/store/health.js";
import { isDatabaseUnreachable } from "../../src/store/unreachable.js";
import { createStreamWakeups } from "../../src/streams/wakeups.js";

afterEach(() => void vi.restoreAllMocks());

const withCode = (message: string, code: string) => Object.assign(new Error(message), { code });
const refused = withCode("connect ECONNREFUSED 127.0.0.1:5432", "ECONNREFUSED");

describe("what says the database is unreachable", () => {
  it(
    "socket errors, server shutdown and connection-class SQLSTATEs, and " +
      "node-postgres's lost-connection messages; not a statement's errors",
    () => {
      for (const err of [
        refused,
        withCode("read ECONNRESET", "ECONNRESET"),
        withCode("terminating connection due to administrator command", "57P01"),
        withCode("the database system is starting up", "57P03"),
        withCode("connection failure", "08006"),
        new Error("Connection terminated unexpectedly"),
        new Error("timeout exceeded when trying to connect"),
        new AggregateError([refused], ""),
        new Error("query failed", { cause: refused }),
      ]) {
        expect(isDatabaseUnreachable(err), err.message).toBe(true);
      }
      for (const err of [
        withCode('duplicate key value violates unique constraint "jobs_pkey"', "23505"),
        withCode("syntax error", "42601"),
        new Error("boom"),
        new ConnectError("no", Code.NotFound),
        "ECONNREFUSED",
      ]) {
        expect(isDatabaseUnreachable(err), String(err)).toBe(false);
      }
    },
  );

  it(
    "is answered 503 unavailable with Retry-After and an actionable message, " +
      "unlogged; other errors stay internal with an incident id",
    () => {
      const log = vi.spyOn(console, "error").mockImplementation(() => {});
      const err = toConnectError(refused, "test");
      expect(err.code).toBe(Code.Unavailable);
      expect(err.rawMessage).toBe("the database is unreachable; retry");
      expect(err.metadata.get("retry-after")).toBe("1");
      expect(log).not.toHaveBeenCalled();
      expect(toConnectError(new Error("boom"), "test").code).toBe(Code.Internal);
      expect(log).toHaveBeenCalledOnce();
    },
  );
});

describe("the database health tracker", () => {
  it(
    "logs the outage once with what failed, ignores successes begun before " +
      "it, and logs the return once with the outage's length",
    () => {
      const log = vi.spyOn(console, "error").mockImplementation(() => {});
      const health = createDatabaseHealth({
        description: "postgres://u:***@db/x",
        probe: () => new Promise(() => {}),
      });
      const back = vi.fn();
      health.onReachable(back);
      const before = performance.now();
      expect(health.failed("a query", withCode("syntax error", "42601"))).toBe(false);
      expect(health.unreachable).toBe(false);
      expect(health.failed("a query", refused)).toBe(true);
      expect(
        health.failed("the LISTEN connection", new Error("Connection terminated unexpectedly")),
      ).toBe(true);
      expect(log.mock.calls).toEqual([
        [
          "database: postgres://u:***@db/x is unreachable (a query failed: connect " +
            "ECONNREFUSED 127.0.0.1:5432); requests that need it are answered 503 " +
            "until it is back",
        ],
      ]);
      health.succeeded(before);
      expect(health.unreachable).toBe(true);
      health.succeeded(performance.now());
      health.succeeded(performance.now());
      expect(health.unreachable).toBe(false);
      expect(back).toHaveBeenCalledOnce();
      expect(log).toHaveBeenCalledTimes(2);
      expect(log.mock.calls[1]![0]).toMatch(
        /^database: postgres:\/\/u:\*\*\*@db\/x reachable again after \d+\.\d s$/,
      );
      health.close();
    },
  );

  it("probes while unreachable, so the return is noticed with no request coming in", async () => {
    vi.spyOn(console, "error").mockImplementation(() => {});
    let answers = false;
    const probe = vi.fn(async () => {
      if (!answers) throw refused;
    });
    const health = createDatabaseHealth({ description: "db", probe, probeIntervalMs: 5 });
    health.failed("a query", refused);
    await vi.waitFor(() => expect(probe.mock.calls.length).toBeGreaterThan(1));
    answers = true;
    await vi.waitFor(() => expect(health.unreachable).toBe(false));
    health.close();
  });
});

/** A store whose LISTEN connection the test "reconnects" by calling recheck(). */
function reconnectingStore(): { store: Store; recheck(): void } {
  const rechecks: (() => void)[] = [];
  const store = {
    listen: async (
      _channel: string,
      _onNotify: (payload: string) => void,
      onRecheck?: () => void,
    ) => {
      if (onRecheck) rechecks.push(onRecheck);
      return async () => {};
    },
  } as unknown as Store;
  return { store, recheck: () => rechecks.forEach((r) => r()) };
}

const stillWaiting = () =>
  new Promise<string>((resolve) => setTimeout(() => resolve("still waiting"), 2_000).unref());

describe("after the LISTEN connection is back", () => {
  it(
    "every waiting claim wakes with no wake to relay (so it claims again), " +
      "also one that armed but had not begun to wait",
    async () => {
      const { store, recheck } = reconnectingStore();
      const wakeups = await createWakeups(store);
      const waiting = wakeups.arm("w1");
      const other = wakeups.arm("w2");
      const notYet = wakeups.arm("w1");
      const waits = [waiting.wait(60_000), other.wait(60_000)];
      recheck();
      expect(await Promise.race([Promise.all(waits), stillWaiting()])).toEqual([
        undefined,
        undefined,
      ]);
      expect(await Promise.race([notYet.wait(60_000), stillWaiting()])).toBeUndefined();
      await wakeups.close();
    },
  );

  it("every stream follower is woken to read again", async () => {
    const { store, recheck } = reconnectingStore();
    const wakeups = await createStreamWakeups(store);
    const follower = wakeups.arm("job-1", "logs").wait(60_000);
    recheck();
    expect(await Promise.race([follower, stillWaiting()])).toBe(true);
    await wakeups.close();
  });
});

// Long-poll wakeups (src/broker/leases/wakeups.ts): one notification wakes one
// waiter, and a wake must never be lost. A waiter is armed before its claim
// runs; a notification that arrives during that claim wakes it, and if the
// claim then ends without waiting (it leased an older job), the wake must go
// on to the next waiter, or the announced job waits for the next enqueue.
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createWakeups, jobsChannel, type Wakeups } from "../../src/broker/leases/wakeups.js";
import type { LeaseView } from "../../src/broker/leases/views.js";
import { openStore, type Store } from "../../src/store/database.js";
import { createTestDatabase, databaseKind, type TestDatabase } from "../support/database.js";

let database: TestDatabase;
let store: Store;
let wakeups: Wakeups<{ workspaceId: string; runnerId: string }, LeaseView>;
beforeAll(async () => {
  database = await createTestDatabase();
  store = await openStore(database.location);
  wakeups = await createWakeups<{ workspaceId: string; runnerId: string }, LeaseView>(store);
});
afterAll(async () => {
  await wakeups?.close();
  await store?.close();
  await database?.drop();
});

const notify = (workspaceId: string) =>
  sql`select pg_notify(${jobsChannel}, ${workspaceId})`.execute(store.db);

describe(`long-poll wakeups (${databaseKind})`, () => {
  it("one notification wakes one waiter", async () => {
    const a = wakeups.arm("w1");
    const b = wakeups.arm("w1");
    const [woken] = await Promise.all([
      Promise.race([a.wait(5_000).then(() => "a"), b.wait(5_000).then(() => "b")]),
      notify("w1"),
    ]);
    expect(woken).toBe("a"); // first armed, first woken
    expect(await b.wait(300)).toBeUndefined();
    a.cancel();
    b.cancel();
  });

  it("a wake that reached a waiter whose claim then ended without waiting goes to the next waiter", async () => {
    const busy = wakeups.arm("w2"); // armed, its claim "running"
    const idle = wakeups.arm("w2");
    const idleWoken = idle.wait(5_000);
    await notify("w2");
    // The notification went to `busy` (armed first); its claim now returns a lease and it is
    // cancelled.
    await new Promise((resolve) => setTimeout(resolve, 200));
    busy.cancel();
    const wake = await idleWoken;
    expect(wake).toMatchObject({ workspaceId: "w2" });
    idle.cancel();
  });

  it(
    "a wake returned by wait() is not passed on again at cancel (the claim " +
      "loop relays it itself when unused)",
    async () => {
      const first = wakeups.arm("w3");
      const second = wakeups.arm("w3");
      const [wake] = await Promise.all([first.wait(5_000), notify("w3")]);
      expect(wake).toMatchObject({ workspaceId: "w3" });
      first.cancel();
      expect(await second.wait(300)).toBeUndefined();
      second.cancel();
    },
  );

  describe("reserved for a direct handoff (src/broker/leases/handoff.ts)", () => {
    const holder = (runnerId: string, workspaceId: string) => ({ workspaceId, runnerId });
    const lease = (jobId: string): LeaseView => ({
      token: "t",
      expiresAt: new Date("2026-12-04T12:00:00Z"),
      cancelRequested: false,
      job: { id: jobId },
    });

    it(
      "takes the first waiter that is waiting now; no notification wakes it " +
        "while reserved (the next waiter gets it), and its wait resolves with " +
        "the lease delivered",
      async () => {
        const first = wakeups.arm("h1", holder("r1", "h1"));
        const second = wakeups.arm("h1", holder("r2", "h1"));
        const firstWaits = first.wait(5_000);
        const secondWaits = second.wait(5_000);
        const reservation = wakeups.reserve("h1");
        expect(reservation?.holder.runnerId).toBe("r1");
        await notify("h1");
        expect(await secondWaits).toMatchObject({ workspaceId: "h1" });
        reservation!.deliver(lease("j1"));
        expect(await firstWaits).toEqual({ lease: lease("j1") });
        first.cancel();
        second.cancel();
      },
    );

    it(
      "a reserved waiter whose time runs out meanwhile ends only at the " +
        "delivery: with no lease, it then ends with no wake",
      async () => {
        const waiter = wakeups.arm("h2", holder("r1", "h2"));
        let ended = false;
        const waits = waiter.wait(100).then((w) => ((ended = true), w));
        const reservation = wakeups.reserve("h2")!;
        await new Promise((resolve) => setTimeout(resolve, 300));
        expect(ended).toBe(false);
        reservation.deliver(undefined);
        expect(await waits).toBeUndefined();
        waiter.cancel();
      },
    );

    it(
      "a reserved waiter whose time runs out meanwhile still takes the lease " +
        "delivered to it, so no lease is left unanswered",
      async () => {
        const waiter = wakeups.arm("h3", holder("r1", "h3"));
        const waits = waiter.wait(100);
        const reservation = wakeups.reserve("h3")!;
        await new Promise((resolve) => setTimeout(resolve, 300));
        reservation.deliver(lease("j3"));
        expect(await waits).toEqual({ lease: lease("j3") });
        waiter.cancel();
      },
    );

    it(
      "delivered with no lease, a waiter waits on and a later notification " +
        "wakes it; a second delivery does nothing",
      async () => {
        const waiter = wakeups.arm("h4", holder("r1", "h4"));
        const waits = waiter.wait(5_000);
        const reservation = wakeups.reserve("h4")!;
        reservation.deliver(undefined);
        reservation.deliver(lease("late"));
        await notify("h4");
        expect(await waits).toMatchObject({ workspaceId: "h4" });
        waiter.cancel();
      },
    );

    it(
      "a waiter whose claim is running (armed, not waiting), one without a " +
        "holder, and one already reserved are not reserved",
      async () => {
        const running = wakeups.arm("h5", holder("r1", "h5"));
        const anonymous = wakeups.arm("h5");
        const anonymousWaits = anonymous.wait(300);
        expect(wakeups.reserve("h5")).toBeUndefined();
        const waiting = wakeups.arm("h5", holder("r2", "h5"));
        const waits = waiting.wait(5_000);
        const reservation = wakeups.reserve("h5");
        expect(reservation?.holder.runnerId).toBe("r2");
        expect(wakeups.reserve("h5")).toBeUndefined();
        reservation!.deliver(lease("j5"));
        expect(await waits).toEqual({ lease: lease("j5") });
        expect(await anonymousWaits).toBeUndefined();
        for (const w of [running, anonymous, waiting]) w.cancel();
      },
    );
  });
});

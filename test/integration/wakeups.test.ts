// Long-poll wakeups (src/broker/wakeups.ts): one notification wakes one
// waiter, and a wake must never be lost. A waiter is armed before its claim
// runs; a notification that arrives during that claim wakes it, and if the
// claim then ends without waiting (it leased an older job), the wake must go
// on to the next waiter, or the announced job waits for the next enqueue.
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createWakeups, jobsChannel, namedJobChannel, type Wakeups } from "../../src/broker/wakeups.js";
import { openStore, type Store } from "../../src/store/database.js";
import { createTestDatabase, databaseKind, type TestDatabase } from "../support/database.js";

let database: TestDatabase;
let store: Store;
let wakeups: Wakeups;
beforeAll(async () => {
  database = await createTestDatabase();
  store = await openStore(database.location);
  wakeups = await createWakeups(store);
});
afterAll(async () => {
  await wakeups?.close();
  await store?.close();
  await database?.drop();
});

const notify = (workspaceId: string) => sql`select pg_notify(${jobsChannel}, ${workspaceId})`.execute(store.db);
/** A single enqueue's notifications, as its statement sends them: the named one, then the workspace's. */
const notifyEnqueued = (workspaceId: string, jobId: string) => sql`select pg_notify(${namedJobChannel}, ${jobId}), pg_notify(${jobsChannel}, ${workspaceId})`.execute(store.db);
const settle = () => new Promise((resolve) => setTimeout(resolve, 200));

describe(`long-poll wakeups (${databaseKind})`, () => {
  it("one notification wakes one waiter", async () => {
    const a = wakeups.arm("w1");
    const b = wakeups.arm("w1");
    const [woken] = await Promise.all([Promise.race([a.wait(5_000).then(() => "a"), b.wait(5_000).then(() => "b")]), notify("w1")]);
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
    // The notification went to `busy` (armed first); its claim now returns a lease and it is cancelled.
    await new Promise((resolve) => setTimeout(resolve, 200));
    busy.cancel();
    const wake = await idleWoken;
    expect(wake?.workspaceId).toBe("w2");
    idle.cancel();
  });

  it("a wake returned by wait() is not passed on again at cancel (the claim loop relays it itself when unused)", async () => {
    const first = wakeups.arm("w3");
    const second = wakeups.arm("w3");
    const [wake] = await Promise.all([first.wait(5_000), notify("w3")]);
    expect(wake?.workspaceId).toBe("w3");
    first.cancel();
    expect(await second.wait(300)).toBeUndefined();
    second.cancel();
  });

  it("an enqueue's reply before its notifications wakes one waiter at once; its own notification then wakes no other, the next job's does", async () => {
    const a = wakeups.arm("w4");
    const b = wakeups.arm("w4");
    const early = a.wait(5_000);
    wakeups.sending("job-4");
    wakeups.sent("w4", "job-4", true); // the reply came first
    expect(await early).toMatchObject({ workspaceId: "w4" });
    a.cancel();
    const bWoken = b.wait(1_000);
    await notifyEnqueued("w4", "job-4"); // the job's own notifications: already served
    expect(await bWoken).toBeUndefined();
    b.cancel();
    const c = wakeups.arm("w4");
    const [wake] = await Promise.all([c.wait(5_000), notifyEnqueued("w4", "job-5")]); // another job's, from another replica
    expect(wake).toMatchObject({ workspaceId: "w4" });
    c.cancel();
  });

  it("an enqueue whose notifications came before its reply wakes no one early, and takes no other job's wake", async () => {
    const a = wakeups.arm("w5");
    const b = wakeups.arm("w5");
    wakeups.sending("job-6");
    const [first] = await Promise.all([a.wait(5_000), notifyEnqueued("w5", "job-6")]); // the listening connection won
    expect(first).toMatchObject({ workspaceId: "w5" });
    a.cancel();
    const bWoken = b.wait(5_000);
    wakeups.sent("w5", "job-6", true); // the reply: its job's wake went out already
    await settle();
    await notify("w5"); // another job's notification must still wake b
    expect(await bWoken).toMatchObject({ workspaceId: "w5" });
    b.cancel();
  });

  it("an enqueue with no waiter armed, or whose job must wait, leaves the wake to its notification", async () => {
    wakeups.sending("job-7");
    wakeups.sent("w6", "job-7", true); // no waiter yet
    const a = wakeups.arm("w6");
    const [wake] = await Promise.all([a.wait(5_000), notifyEnqueued("w6", "job-7")]);
    expect(wake).toMatchObject({ workspaceId: "w6" });
    a.cancel();
    const b = wakeups.arm("w6");
    const bWoken = b.wait(5_000);
    wakeups.sending("job-8");
    wakeups.sent("w6", "job-8", false); // not claimable now (or the enqueue failed)
    await settle();
    await notifyEnqueued("w6", "job-8");
    expect(await bWoken).toMatchObject({ workspaceId: "w6" });
    b.cancel();
  });
});

// Long-poll wakeups (src/broker/wakeups.ts): one notification wakes one
// waiter, and a wake must never be lost. A waiter is armed before its claim
// runs; a notification that arrives during that claim wakes it, and if the
// claim then ends without waiting (it leased an older job), the wake must go
// on to the next waiter, or the announced job waits for the next enqueue.
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createWakeups, jobsChannel, type Wakeups } from "../../src/broker/wakeups.js";
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
});

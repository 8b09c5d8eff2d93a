// The one "wait for a NOTIFY or a timeout" primitive (src/store/notify-waiters.ts) that the
// broker's claims, stream followers and event followers wait on.
import { describe, expect, it } from "vitest";
import type { Store } from "../../src/store/database.js";
import { createNotifyWaiters } from "../../src/store/notify-waiters.js";

/** A store whose notifications and LISTEN reconnects the test sends itself. */
function fakeStore(): { store: Store; notify(payload: string): void; reconnect(): void } {
  const subscribers: Array<{ onNotify: (p: string) => void; onRecheck?: () => void }> = [];
  const store = {
    listen: async (_channel: string, onNotify: (p: string) => void, onRecheck?: () => void) => {
      subscribers.push({ onNotify, onRecheck });
      return async () => {};
    },
  } as unknown as Store;
  return {
    store,
    notify: (p) => subscribers.forEach((s) => s.onNotify(p)),
    reconnect: () => subscribers.forEach((s) => s.onRecheck?.()),
  };
}

describe("notify waiters", () => {
  it("a wake that comes after arming and before wait() is kept: wait returns it at once", async () => {
    const waiters = createNotifyWaiters<string, undefined, string>();
    const waiter = waiters.arm("k", undefined);
    waiters.find("k", () => true)!.wake("woken");
    expect(waiters.armed("k")).toEqual([]); // a woken waiter is disarmed
    expect(await waiter.wait(60_000)).toBe("woken");
    expect(waiter.delivered).toBe(true);
  });

  it("a wait ends with no value at end(), at its time, or when its signal aborts", async () => {
    const waiters = createNotifyWaiters<string, undefined, string>();
    const ended = waiters.arm("k", undefined);
    const endedWait = ended.wait(60_000);
    ended.end();
    expect(await endedWait).toBeUndefined();
    expect(await waiters.arm("k", undefined).wait(1)).toBeUndefined();
    const abort = new AbortController();
    const aborted = waiters.arm("k", undefined).wait(60_000, abort.signal);
    abort.abort();
    expect(await aborted).toBeUndefined();
    expect(waiters.armed("k")).toEqual([]); // an ended wait disarms its waiter
  });

  it("a held wait keeps what ended it until released, or ends with the value released", async () => {
    const waiters = createNotifyWaiters<string, undefined, string>();
    const timedOut = waiters.arm("k", undefined);
    const timedOutWait = timedOut.wait(1);
    timedOut.hold();
    expect(timedOut.waiting).toBe(false);
    await new Promise((resolve) => setTimeout(resolve, 20));
    timedOut.release();
    expect(await timedOutWait).toBeUndefined();

    const handed = waiters.arm("k", undefined);
    const handedWait = handed.wait(1);
    handed.hold();
    await new Promise((resolve) => setTimeout(resolve, 20));
    handed.release("lease");
    expect(await handedWait).toBe("lease");
    expect(handed.delivered).toBe(false); // a released value is not a wake
  });

  it("when the LISTEN connection is back, every waiter's wait ends, also one armed but not yet waiting", async () => {
    const { store, reconnect, notify } = fakeStore();
    const waiters = createNotifyWaiters<string, string, string>();
    const seen: string[] = [];
    await waiters.listen(store, "channel", (p) => seen.push(p));
    const waiting = waiters.arm("a", "x").wait(60_000);
    const notYet = waiters.arm("b", "y");
    notify("hello");
    reconnect();
    expect(await waiting).toBeUndefined();
    expect(await notYet.wait(60_000)).toBeUndefined();
    expect(seen).toEqual(["hello"]);
  });
});

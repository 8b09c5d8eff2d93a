import { describe, expect, it } from "vitest";
import { createResourceStack, UnwindError } from "../../src/server/resource-stack.js";

describe("the resource stack", () => {
  it("closes resources newest first, waiting for each close before the next", async () => {
    const stack = createResourceStack();
    const closed: string[] = [];
    const slow = (name: string) => () =>
      new Promise<void>((resolve) => setImmediate(() => resolve(void closed.push(name))));
    stack.defer("database", slow("database"));
    const broker = stack.use("broker", { close: slow("broker") });
    stack.defer("server", () => void closed.push("server"));
    expect(typeof broker.close).toBe("function");
    await stack.unwind();
    expect(closed).toEqual(["server", "broker", "database"]);
  });

  it(
    "a close that fails does not stop the others, and every failure is " +
      "reported under its resource's name",
    async () => {
      const stack = createResourceStack();
      const closed: string[] = [];
      stack.defer("database", () => void closed.push("database"));
      stack.defer("broker", () => Promise.reject(new Error("sweep still running")));
      stack.defer("streams", () => void closed.push("streams"));
      stack.defer("server", () => {
        throw new Error("sessions did not end");
      });
      const err = await stack.unwind().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(closed).toEqual(["streams", "database"]);
      expect(err).toBeInstanceOf(UnwindError);
      expect((err as UnwindError).failures.map((f) => f.name)).toEqual(["server", "broker"]);
      expect((err as UnwindError).message).toBe(
        "could not close server (sessions did not end); could not close broker (sweep still running)",
      );
    },
  );

  it(
    "unwinds once: a second unwind gets the first one's outcome without " +
      "closing anything again, and nothing can be opened after",
    async () => {
      const stack = createResourceStack();
      let closes = 0;
      stack.defer("database", () => void closes++);
      const first = stack.unwind();
      expect(stack.unwind()).toBe(first);
      await first;
      expect(closes).toBe(1);
      expect(() => stack.defer("late", () => {})).toThrow(
        "late was opened while the control plane was closing",
      );
    },
  );
});

// A full connection pool is not an outage (src/store/unreachable.ts DatabasePoolBusyError):
// node-postgres reports "timeout exceeded when trying to connect" both when every pooled
// connection stays checked out and when the server cannot be reached. With all 20 held by
// long transactions, a request is answered 503 saying the pool is busy — not "the database is
// unreachable" — the health tracker logs no outage, and the next request after they end works.
// Postgres only: the embedded database has no pool.
import { format } from "node:util";
import { afterEach, describe, expect, it, vi } from "vitest";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

describe.runIf(databaseKind === "postgres")(
  "a database pool with every connection checked out",
  () => {
    const cp = useControlPlane();
    afterEach(() => vi.restoreAllMocks());

    it("answers 503 naming the busy pool, logs no outage, and serves again once connections are free", async () => {
      const logged: string[] = [];
      vi.spyOn(console, "error").mockImplementation(
        (...args: unknown[]) => void logged.push(format(...args)),
      );
      const db = cp.plane.store.db;
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      const poolSize = cp.plane.store.poolUse()!.max;
      let held = 0;
      const holders = Array.from({ length: poolSize }, () =>
        db.transaction().execute(async (tx) => {
          await tx.selectNoFrom((eb) => eb.val(1).as("one")).execute();
          held++;
          await gate;
        }),
      );
      try {
        await expect.poll(() => held, { timeout: 10_000 }).toBe(poolSize);
        const refused = await cp.admin.enqueue({ workspaceId: "busy" });
        expect(refused.status, refused.text).toBe(503);
        expect(refused.json.code).toBe("unavailable");
        expect(refused.json.message).toContain(
          `all ${poolSize} database connections of this replica stayed busy`,
        );
        expect(refused.json.message).not.toContain("unreachable");
        expect(cp.plane.store.health.unreachable).toBe(false);
      } finally {
        release();
        await Promise.all(holders);
      }
      const served = await cp.admin.enqueue({ workspaceId: "busy" });
      expect(served.status, served.text).toBe(200);
      expect(logged.filter((l) => l.includes("unreachable"))).toEqual([]);
    }, 30_000);
  },
);

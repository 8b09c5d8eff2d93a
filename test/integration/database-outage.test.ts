// DESIGN.md "Failure handling": a lost database connection is one log line and
// a 503, and heals by itself. Two replicas run on a Postgres server of this
// test's own, which it stops (`pg_ctl stop -m fast`) and starts again on the
// same port under them, so it runs whatever DATABASE_URL says (skipped only
// where no Postgres server binaries are installed).
import { format } from "node:util";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import {
  adminActor,
  eventually,
  registeredRunner,
  type AdminActor,
  type RunnerActor,
} from "../support/actors.js";
import { startTestControlPlane, type TestControlPlane } from "../support/control-plane.js";
import type { TestDatabase } from "../support/database.js";
import { createTestPki } from "../support/pki.js";
import {
  postgresServerInstalled,
  startPostgresServer,
  type PostgresServer,
} from "../support/postgres-server.js";

describe.runIf(postgresServerInstalled())("a Postgres restart under two running replicas", () => {
  let server: PostgresServer;
  let a: TestControlPlane;
  let b: TestControlPlane;
  const actors: { close(): Promise<void> }[] = [];
  const logged: string[] = [];

  beforeAll(async () => {
    server = await startPostgresServer();
    const database: TestDatabase = { location: server.url, kind: "postgres", drop: async () => {} };
    const pki = await createTestPki();
    a = await startTestControlPlane({ pki, database });
    b = await startTestControlPlane({ pki, database });
    vi.spyOn(console, "error").mockImplementation(
      (...args: unknown[]) => void logged.push(...format(...args).split("\n")),
    );
  });
  afterAll(async () => {
    vi.restoreAllMocks();
    await Promise.all(actors.map((actor) => actor.close()));
    await a?.close();
    await b?.close();
    await server?.destroy();
  });

  const track = <T extends AdminActor | RunnerActor>(actor: T): T => {
    actors.push(actor);
    return actor;
  };

  it(
    "answers 503 unavailable with Retry-After on both surfaces while it is " +
      "down, logs it once each way, and picks up jobs and retirements within 1 " +
      "s once it is back",
    async () => {
      const adminA = track(await adminActor(a));
      const claimer = track(await registeredRunner(a, "claimer"));
      const retiree = track(await registeredRunner(b, "retiree"));
      expect((await retiree.rest.request("GET", "/v1/runner/clock")).status).toBe(200);

      const claim = claimer.claim({ waitSeconds: 20 });
      await new Promise((r) => setTimeout(r, 300)); // lets the claim find nothing and wait
      await server.stop();

      const rest = await adminA.rest.request("GET", "/v1/admin/jobs?workspaceId=w1");
      expect(rest.status, rest.text).toBe(503);
      expect(rest.json).toEqual({
        code: "unavailable",
        message: "the database is unreachable; retry",
      });
      expect(rest.headers["retry-after"]).toBe("1");
      const connect = await adminA.rest.request(
        "POST",
        "/forelead.admin.v1.AdminService/ListJobs",
        { workspaceId: "w1" },
        { "connect-protocol-version": "1" },
      );
      expect(connect.status, connect.text).toBe(503);
      expect(connect.json).toEqual({
        code: "unavailable",
        message: "the database is unreachable; retry",
      });
      expect(connect.headers["retry-after"]).toBe("1");
      const clock = await claimer.rest.request("GET", "/v1/runner/clock");
      expect(clock.status, clock.text).toBe(200);

      await server.start();
      const enqueued = await adminA.enqueue();
      const enqueuedAt = performance.now();
      expect(enqueued.status, enqueued.text).toBe(200);
      const claimed = await claim;
      const pickupMs = performance.now() - enqueuedAt;
      expect(claimed.status, claimed.text).toBe(200);
      expect(claimed.json.job.id).toBe(enqueued.json.job.id);
      expect(pickupMs, "pickup after the restart").toBeLessThan(1000);

      const retire = await adminA.rest.request("POST", "/v1/admin/runners/retiree/retire", {
        apiVersion: "v1",
        workspaceId: "w1",
      });
      const retiredAt = performance.now();
      expect(retire.status, retire.text).toBe(200);
      await eventually(
        "replica b to refuse the retired runner on its open connection",
        async () =>
          (await retiree.rest.request("GET", "/v1/runner/clock")).status === 403 ? true : undefined,
        5_000,
        10,
      );
      const propagationMs = performance.now() - retiredAt;
      expect(propagationMs, "retirement reaching replica b after the restart").toBeLessThan(1000);

      const redacted = server.url.replace("unused-secret", "***");
      await eventually(
        "both replicas to log that the database is back",
        async () =>
          logged.filter((l) => l.includes("reachable again")).length >= 2 ? true : undefined,
        5_000,
      );
      const database = logged.filter((l) => l.startsWith("database:"));
      expect(
        database.filter((l) => l.startsWith(`database: ${redacted} is unreachable (`)),
        database.join("\n"),
      ).toHaveLength(2);
      expect(
        database.filter((l) =>
          new RegExp(`^database: ${escape(redacted)} reachable again after \\d+\\.\\d s$`).test(l),
        ),
        database.join("\n"),
      ).toHaveLength(2);
      expect(database, "no other database lines").toHaveLength(4);
      // The audit trail spools while the database is away and says so once each way (and, past 30 s,
      // a backlog line); nothing else may be logged, and no audit record is lost.
      const spoolLine =
        /^audit: (the database refuses audit records|the database stores audit records again|.*; the database refuses them)/;
      expect(
        logged.filter((l) => l.trim() !== "" && !l.startsWith("database:") && !spoolLine.test(l)),
        logged.join("\n"),
      ).toEqual([]);
      expect(logged.join("\n")).not.toContain("unused-secret");
      console.info(
        `database outage: pickup ${pickupMs.toFixed(0)} ms, retirement ` +
          `${propagationMs.toFixed(0)} ms after the restart; ` +
          `logged:\n${database.join("\n")}`,
      );
    },
  );
});

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

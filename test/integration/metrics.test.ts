// Issue 17 item 8: /metrics, /healthz and /readyz on the plain-HTTP metrics
// listener. Counters are read by a Prometheus text-format parser while real
// jobs flow through the real server; readiness follows a real Postgres that
// this test stops and starts (skipped only where no Postgres server binaries
// are installed).
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminActor, eventually, registeredRunner, runnerActor } from "../support/actors.js";
import { startTestControlPlane, type TestControlPlane } from "../support/control-plane.js";
import { useControlPlane } from "../support/fixture.js";
import { health, scrape } from "../support/metrics.js";
import {
  postgresServerInstalled,
  startPostgresServer,
  type PostgresServer,
} from "../support/postgres-server.js";

const loopback = { host: "127.0.0.1", port: 0 };

describe("the metrics listener", () => {
  const cp = useControlPlane({ metricsListen: loopback });
  const url = () => cp.plane.metrics!.url;

  it("serves every documented metric family, with Node's process metrics, in the Prometheus text format", async () => {
    const { families } = await scrape(url());
    const expected: Record<string, string> = {
      forelead_jobs_queued: "GAUGE",
      forelead_jobs_running: "GAUGE",
      forelead_jobs_waiting_input: "GAUGE",
      forelead_jobs_oldest_queued_age_seconds: "GAUGE",
      forelead_leases_granted_total: "COUNTER",
      forelead_leases_renewed_total: "COUNTER",
      forelead_leases_expired_total: "COUNTER",
      forelead_leases_handed_off_total: "COUNTER",
      forelead_claims_waiting: "GAUGE",
      forelead_settlements_total: "COUNTER",
      forelead_claim_wait_seconds: "HISTOGRAM",
      forelead_request_duration_seconds: "HISTOGRAM",
      forelead_identity_refusals_total: "COUNTER",
      forelead_audit_spool_bytes: "GAUGE",
      forelead_audit_spool_records: "GAUGE",
      forelead_audit_buffered_records: "GAUGE",
      forelead_audit_oldest_unwritten_age_seconds: "GAUGE",
      forelead_audit_writable: "GAUGE",
      forelead_database_reachable: "GAUGE",
      forelead_database_round_trip_seconds: "GAUGE",
      forelead_database_pool_connections: "GAUGE",
      forelead_database_pool_max_connections: "GAUGE",
      forelead_database_pool_waiting_requests: "GAUGE",
      forelead_listen_connected: "GAUGE",
      process_cpu_seconds_total: "COUNTER",
      process_resident_memory_bytes: "GAUGE",
      nodejs_eventloop_lag_seconds: "GAUGE",
    };
    expect(
      Object.fromEntries(
        [...families.values()].filter((f) => f.name in expected).map((f) => [f.name, f.type]),
      ),
    ).toEqual(expected);
    const s = await scrape(url());
    expect(s.value("forelead_database_reachable")).toBe(1);
    expect(s.value("forelead_listen_connected")).toBe(1);
    expect(s.value("forelead_audit_writable")).toBe(1);
  });

  it("moves the lease, settlement, queue and request metrics as a job is enqueued, claimed and completed", async () => {
    const runner = await registeredRunner(cp, "metrics-r1", "wm");
    const before = await scrape(url());
    const claimRoute = { route: "POST /v1/runner/claim", surface: "rest", code: "200" };
    expect(before.value("forelead_jobs_queued", { workspace: "wm" })).toBe(0);

    const enq = await cp.admin.enqueue({ workspaceId: "wm" });
    expect(enq.status, enq.text).toBe(200);
    const queued = await eventually("the queued gauge to count the job", async () => {
      const s = await scrape(url());
      return s.value("forelead_jobs_queued", { workspace: "wm" }) === 1 ? s : undefined;
    });
    expect(queued.value("forelead_jobs_running", { workspace: "wm" })).toBe(0);
    expect(
      queued.value("forelead_jobs_oldest_queued_age_seconds", { workspace: "wm" }),
    ).toBeGreaterThanOrEqual(0);
    expect(
      queued.families
        .get("forelead_jobs_oldest_queued_age_seconds")!
        .metrics.some((m) => m.labels?.workspace === "wm"),
    ).toBe(true);

    const claim = await runner.claim();
    expect(claim.status, claim.text).toBe(200);
    const running = await eventually("the running gauge to count the leased job", async () => {
      const s = await scrape(url());
      return s.value("forelead_jobs_running", { workspace: "wm" }) === 1 ? s : undefined;
    });
    expect(running.value("forelead_jobs_queued", { workspace: "wm" })).toBe(0);
    const renew = await runner.renew(claim.json.job.id, claim.json.token);
    expect(renew.status, renew.text).toBe(200);
    const done = await runner.complete(claim.json.job.id, claim.json.token);
    expect(done.status, done.text).toBe(200);

    const after = await eventually("the claim's request to be timed", async () => {
      const s = await scrape(url());
      return s.value("forelead_request_duration_seconds", claimRoute) >
        before.value("forelead_request_duration_seconds", claimRoute) &&
        s.value("forelead_jobs_running", { workspace: "wm" }) === 0
        ? s
        : undefined;
    });
    const delta = (name: string, labels?: Record<string, string>) =>
      after.value(name, labels) - before.value(name, labels);
    expect(delta("forelead_leases_granted_total")).toBe(1);
    expect(delta("forelead_leases_renewed_total")).toBe(1);
    expect(delta("forelead_settlements_total", { outcome: "succeeded" })).toBe(1);
    expect(delta("forelead_settlements_total", { outcome: "failed" })).toBe(0);
    expect(delta("forelead_claim_wait_seconds", { result: "lease" })).toBe(1);
    expect(delta("forelead_request_duration_seconds", claimRoute)).toBe(1);
    expect(
      delta("forelead_request_duration_seconds", {
        route: "POST /v1/runner/complete",
        surface: "rest",
        code: "200",
      }),
    ).toBe(1);
    expect(after.value("forelead_jobs_queued", { workspace: "wm" })).toBe(0);
    // A repeated completion gets the stored reply: it settles nothing, so it counts nothing.
    expect((await runner.complete(claim.json.job.id, claim.json.token)).status).toBe(200);
    expect(
      (await scrape(url())).value("forelead_settlements_total", { outcome: "succeeded" }),
    ).toBe(after.value("forelead_settlements_total", { outcome: "succeeded" }));
    await runner.close();
  });

  it(
    "labels Connect calls by the same route template, and an unknown path as " +
      "unmatched, never by the raw path",
    async () => {
      const runner = await runnerActor(cp, "metrics-r2", "wm");
      const connect = await runner.rest.request(
        "POST",
        "/forelead.runner.v1.RunnerService/Clock",
        {},
        { "connect-protocol-version": "1" },
      );
      expect(connect.status, connect.text).toBe(200);
      const missing = await runner.rest.request("GET", "/v1/runner/no-such-route/12345");
      expect(missing.status).toBe(404);
      const s = await eventually("both requests to be timed", async () => {
        const now = await scrape(url());
        return now.value("forelead_request_duration_seconds", {
          route: "GET /v1/runner/clock",
          surface: "rpc",
          code: "200",
        }) >= 1 &&
          now.value("forelead_request_duration_seconds", {
            route: "unmatched",
            surface: "rest",
            code: "404",
          }) >= 1
          ? now
          : undefined;
      });
      const routes = new Set(
        s.families.get("forelead_request_duration_seconds")!.metrics.map((m) => m.labels?.route),
      );
      expect([...routes].some((r) => r?.includes("12345"))).toBe(false);
      await runner.close();
    },
  );

  it("counts an identity refusal by its reason", async () => {
    const before = await scrape(url());
    const runner = await runnerActor(cp, "metrics-r3", "wm");
    const refused = await runner.rest.request("GET", "/v1/admin/jobs?workspaceId=wm");
    expect(refused.status, refused.text).toBe(403);
    const after = await scrape(url());
    expect(
      after.value("forelead_identity_refusals_total", { reason: "runner_on_admin_route" }) -
        before.value("forelead_identity_refusals_total", { reason: "runner_on_admin_route" }),
    ).toBe(1);
    expect(
      after.value("forelead_identity_refusals_total", { reason: "no_role" }) -
        before.value("forelead_identity_refusals_total", { reason: "no_role" }),
    ).toBe(0);
    await runner.close();
  });

  it(
    "answers /healthz and /readyz with JSON, HEAD without a body, a wrong " +
      "method 405 with Allow, and any other path 404",
    async () => {
      expect(await health(url(), "/healthz")).toEqual({ status: 200, json: { status: "ok" } });
      const ready = await health(url(), "/readyz");
      expect(ready.status, JSON.stringify(ready.json)).toBe(200);
      expect(ready.json.status).toBe("ready");
      expect(
        (ready.json.checks as Array<{ name: string; ok: boolean }>).map((c) => [c.name, c.ok]),
      ).toEqual([
        ["database", true],
        ["migrations", true],
        ["listen", true],
        ["auditSpool", true],
      ]);

      const head = await fetch(`${url()}/metrics`, { method: "HEAD" });
      expect(head.status).toBe(200);
      expect(await head.text()).toBe("");
      for (const method of ["POST", "PUT", "DELETE"]) {
        const wrong = await fetch(`${url()}/metrics`, { method });
        expect(wrong.status, method).toBe(405);
        expect(wrong.headers.get("allow")).toBe("GET, HEAD");
        expect(await wrong.json()).toEqual({
          code: "unimplemented",
          message: `${method} /metrics is not served; use GET or HEAD`,
        });
      }
      const other = await fetch(`${url()}/v1/admin/jobs`);
      expect(other.status).toBe(404);
      expect(((await other.json()) as { message: string }).message).toBe(
        "no route GET /v1/admin/jobs; this listener serves GET /metrics, /healthz, /readyz",
      );
    },
  );
});

describe("two control planes in one process", () => {
  it(
    "keep their own registries: a lease on one is not counted by the other",
    { timeout: 120_000 },
    async () => {
      const [a, b] = await Promise.all([
        startTestControlPlane({ metricsListen: loopback }),
        startTestControlPlane({ metricsListen: loopback }),
      ]);
      try {
        const admin = await adminActor(a);
        const runner = await registeredRunner(a, "r-a");
        expect((await admin.enqueue()).status).toBe(200);
        expect((await runner.claim()).status).toBe(200);
        expect((await scrape(a.plane.metrics!.url)).value("forelead_leases_granted_total")).toBe(1);
        expect((await scrape(b.plane.metrics!.url)).value("forelead_leases_granted_total")).toBe(0);
        await Promise.all([admin.close(), runner.close()]);
      } finally {
        await a.close();
        await b.close();
      }
    },
  );
});

describe("a lease the sweep ends", () => {
  // Leases of one second, swept every 100 ms: expiry happens for real, in test time.
  const cp = useControlPlane({ leaseSeconds: 1, sweepIntervalMs: 100, metricsListen: loopback });

  it("is counted as expired, and the job it fails (no attempts left) as a failed settlement", async () => {
    const runner = await registeredRunner(cp, "metrics-lost", "wx");
    const enq = await cp.admin.enqueue({ workspaceId: "wx", maxAttempts: 1 });
    expect(enq.status, enq.text).toBe(200);
    const before = await scrape(cp.plane.metrics!.url);
    const claim = await runner.claim();
    expect(claim.status, claim.text).toBe(200);
    await eventually("the job to fail with its lease lost", async () =>
      (await cp.admin.job(enq.json.job.id)).json.job.state === "failed" ? true : undefined,
    );
    const after = await scrape(cp.plane.metrics!.url);
    const delta = (name: string, labels?: Record<string, string>) =>
      after.value(name, labels) - before.value(name, labels);
    expect(delta("forelead_leases_granted_total")).toBe(1);
    expect(delta("forelead_leases_expired_total")).toBe(1);
    expect(delta("forelead_settlements_total", { outcome: "failed" })).toBe(1);
    expect(delta("forelead_settlements_total", { outcome: "succeeded" })).toBe(0);
    await runner.close();
  });
});

describe.runIf(postgresServerInstalled())("/readyz while Postgres is stopped", () => {
  let server: PostgresServer;
  let cp: TestControlPlane;
  beforeAll(async () => {
    server = await startPostgresServer();
    cp = await startTestControlPlane({
      database: { location: server.url, kind: "postgres", drop: async () => {} },
      metricsListen: loopback,
    });
  });
  afterAll(async () => {
    await cp?.close();
    await server?.destroy();
  });

  it(
    "is ready, then 503 naming the database (and LISTEN) while it is down, " +
      "with /metrics still answering, then ready again once it is back",
    async () => {
      const url = cp.plane.metrics!.url;
      expect((await health(url, "/readyz")).status).toBe(200);
      const up = await scrape(url);
      expect(up.value("forelead_database_pool_max_connections")).toBe(20);
      expect(
        up.families
          .get("forelead_database_pool_connections")!
          .metrics.map((m) => m.labels?.state)
          .sort(),
      ).toEqual(["idle", "in_use"]);

      await server.stop();
      const down = await health(url, "/readyz");
      expect(down.status, JSON.stringify(down.json)).toBe(503);
      expect(down.json.status).toBe("not_ready");
      expect(down.json.notReady).toContain("database");
      expect(down.json.notReady).toContain("migrations");
      const database = (down.json.checks as Array<{ name: string; message: string }>).find(
        (c) => c.name === "database",
      )!;
      expect(database.message).toMatch(/^the postgres database is unreachable: /);
      expect(JSON.stringify(down.json)).not.toContain("unused-secret");
      await eventually(
        "readyz to name the LISTEN connection too",
        async () =>
          ((await health(url, "/readyz")).json.notReady as string[]).includes("listen")
            ? true
            : undefined,
        5_000,
      );
      const scraped = await eventually(
        "a scrape to see the database down",
        async () => {
          const s = await scrape(url);
          return s.value("forelead_database_reachable") === 0 ? s : undefined;
        },
        5_000,
      );
      expect(scraped.value("forelead_listen_connected")).toBe(0);

      await server.start();
      const back = await eventually(
        "readyz to be ready again",
        async () => {
          const r = await health(url, "/readyz");
          return r.status === 200 ? r : undefined;
        },
        10_000,
      );
      expect(back.json.status).toBe("ready");
    },
  );
});

describe("forelead serve --metrics-listen", () => {
  let dir: string;
  beforeAll(async () => void (dir = await mkdtemp(join(tmpdir(), "forelead-metrics-"))));
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it(
    "serves on an explicit non-loopback address and says in one line that it is reachable from the network",
    { timeout: 90_000 },
    async () => {
      const child = spawn(
        process.execPath,
        [
          join(process.cwd(), "bin/forelead.js"),
          "serve",
          "--listen",
          "127.0.0.1:0",
          "--metrics-listen",
          "0.0.0.0:0",
          "--certs-dir",
          "pki",
          "--database",
          "memory://",
        ],
        { cwd: dir },
      );
      let out = "";
      child.stdout.setEncoding("utf8").on("data", (d: string) => (out += d));
      const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
      try {
        await eventually(
          "the serving line",
          async () => (out.includes("forelead: serving") ? true : undefined),
          60_000,
          100,
        );
        const lines = out
          .split("\n")
          .filter((l) => l.startsWith("forelead: metrics and health on "));
        expect(lines, out).toHaveLength(1);
        expect(lines[0]).toMatch(
          /^forelead: metrics and health on http:\/\/0\.0\.0\.0:\d+ \(\/metrics, \/healthz, \/readyz; plain HTTP, no client certificate\); http:\/\/0\.0\.0\.0:\d+ is not a loopback address: anyone who can reach this host on the network can read them$/,
        );
        const port = /http:\/\/0\.0\.0\.0:(\d+)/.exec(lines[0]!)![1];
        expect(await health(`http://127.0.0.1:${port}`, "/healthz")).toEqual({
          status: 200,
          json: { status: "ok" },
        });
      } finally {
        child.kill("SIGTERM");
        expect(await exited).toBe(0);
      }
    },
  );

  it("refuses an address that is not host:port or off, naming the flag", async () => {
    const child = spawn(
      process.execPath,
      [
        join(process.cwd(), "bin/forelead.js"),
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "9464",
        "--certs-dir",
        "pki",
        "--database",
        "memory://",
      ],
      { cwd: dir },
    );
    let err = "";
    child.stderr.setEncoding("utf8").on("data", (d: string) => (err += d));
    const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
    expect(code).not.toBe(0);
    expect(err).toContain(
      '--metrics-listen "9464" is not host:port (e.g. 127.0.0.1:8443 or [::1]:8443), or off',
    );
  });
});

import { appendFile, mkdir, mkdtemp, rename, rm, writeFile } from "node:fs/promises";
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { auditUnavailableMessage } from "../../src/identity/audit.js";
import { adminActor, eventually, type AdminActor } from "../support/actors.js";
import { createRestClient, type RestReply } from "../support/clients.js";
import { startTestControlPlane, type TestControlPlane } from "../support/control-plane.js";
import { postgresServerInstalled, startPostgresServer } from "../support/postgres-server.js";

// Issue 23, "no decision is lost from the audit trail", under real faults: the
// control plane's own Postgres stopped under it, and a full disk under the
// embedded database. Records made meanwhile wait in the spool and are all in
// the trail afterwards, in order, none twice; while the spool cannot be
// written either, requests are refused with 503 rather than answered
// unrecorded.

/** A fault the scenario turns on and off. */
interface Faults {
  breakDatabase(): Promise<void>;
  healDatabase(): Promise<void>;
  breakSpool(): Promise<void>;
  healSpool(): Promise<void>;
}

const printed: string[] = [];
beforeAll(() => {
  vi.spyOn(console, "error").mockImplementation(
    (...args: unknown[]) => void printed.push(args.map(String).join(" ")),
  );
});
afterAll(() => vi.restoreAllMocks());

const refusedUnrecorded = (r: RestReply) =>
  r.status === 503 && r.json?.message === auditUnavailableMessage;
const isRoot = process.getuid?.() === 0;

/**
 * Plays one outage: requests while the database refuses records, then while
 * the spool cannot be written either (503), then with the spool back, then
 * with the database back; checks the trail and the log.
 */
async function playOutage(cp: TestControlPlane, faults: Faults, pad = ""): Promise<void> {
  const admin: AdminActor = await adminActor(cp);
  const anonymous = createRestClient(cp.url, cp.pki.ca.certPem);
  const answered: string[] = [];
  let refusedWithoutCertificate = 0;
  let refused503 = 0;
  let n = 0;
  // An allowed decision whose route names it; what the handler answers (404, or 500/503 without a
  // database) does not matter.
  const mark = async (phase: string) => {
    const tag = `${phase}-${String(n++).padStart(4, "0")}${pad}`;
    const reply = await admin.rest.request("GET", `/v1/admin/jobs/${tag}`);
    if (refusedUnrecorded(reply)) refused503++;
    else answered.push(tag);
    return reply;
  };
  const spooled = () => cp.plane.audit.backlog().spooled;
  try {
    for (let i = 0; i < 3; i++) await mark("before");
    await cp.plane.audit.flush();
    const printedBefore = printed.length;

    await faults.breakDatabase();
    for (let i = 0; i < 10; i++) {
      expect(refusedUnrecorded(await mark("down"))).toBe(false);
      expect(
        (await anonymous.request("POST", "/v1/runner/claim", { apiVersion: "v1", runnerId: "r1" }))
          .status,
      ).toBe(401);
      refusedWithoutCertificate++;
    }
    await eventually("records in the spool", async () =>
      (await mark("down"), spooled() > 0) ? true : undefined,
    );
    const backlog = cp.plane.audit.backlog();
    expect(backlog.oldestUnwritten!.getTime()).toBeLessThan(Date.now());
    expect(backlog.spoolBytes).toBeGreaterThan(0);

    await faults.breakSpool();
    const refusal = await eventually("a 503 refusal", async () => {
      const reply = await mark("nospool");
      return refusedUnrecorded(reply) ? reply : undefined;
    });
    expect(refusal.json.code).toBe("unavailable");
    for (let i = 0; i < 5; i++) expect(refusedUnrecorded(await mark("nospool"))).toBe(true);

    await faults.healSpool();
    await eventually("requests served again with the spool back", async () =>
      refusedUnrecorded(await mark("spool-back")) ? undefined : true,
    );
    for (let i = 0; i < 3; i++) expect(refusedUnrecorded(await mark("spool-back"))).toBe(false);

    await faults.healDatabase();
    await eventually(
      "the backlog written",
      async () => {
        await cp.plane.audit.flush();
        const b = cp.plane.audit.backlog();
        return b.spooled === 0 && b.inMemory === 0 ? true : undefined;
      },
      30_000,
      200,
    );
    for (let i = 0; i < 3; i++) await mark("after");

    const trail: { id: string; route: string; decision: string; reason: string; count: number }[] =
      [];
    let pageToken = "";
    do {
      const page = await admin.rest.request(
        "GET",
        `/v1/admin/audit?pageSize=1000${pageToken ? `&pageToken=${pageToken}` : ""}`,
      );
      expect(page.status, page.text).toBe(200);
      trail.push(...page.json.records);
      pageToken = page.json.nextPageToken ?? "";
    } while (pageToken);
    trail.reverse(); // oldest first
    const marks = trail
      .filter((r) => r.decision === "allow" && r.route.startsWith("GET /v1/admin/jobs/"))
      .map((r) => r.route.slice("GET /v1/admin/jobs/".length));
    // Every answered request, in the order it was made, each once.
    expect(marks).toEqual(answered);
    expect(new Set(trail.map((r) => r.id)).size).toBe(trail.length);
    const counted = (test: (reason: string) => boolean) =>
      trail
        .filter((r) => r.decision === "deny" && test(r.reason))
        .reduce((sum, r) => sum + r.count, 0);
    expect(counted((reason) => reason.startsWith("no client certificate"))).toBe(
      refusedWithoutCertificate,
    );
    // The refusals themselves waited in memory and are in the trail too.
    expect(counted((reason) => reason === auditUnavailableMessage)).toBe(refused503);

    const log = printed.slice(printedBefore).filter((l) => l.startsWith("audit:"));
    expect(log.filter((l) => l.includes("the database refuses audit records"))).toHaveLength(1);
    expect(log.filter((l) => l.includes("refusing requests with 503"))).toHaveLength(1);
    expect(log.filter((l) => l.includes("takes records again"))).toHaveLength(1);
    expect(log.filter((l) => l.includes("stores audit records again"))).toHaveLength(1);
    expect(log.some((l) => l.includes("could not store"))).toBe(false);
  } catch (err) {
    process.stderr.write(
      printed.join("\n").slice(-6000) + JSON.stringify(cp.plane.audit.backlog()) + "\n",
    );
    throw err;
  } finally {
    await anonymous.close();
    await admin.close();
  }
}

describe("audit records while the control plane's Postgres is stopped", () => {
  it(
    "are all in the trail afterwards, in order, none twice; with the spool " +
      "unwritable too, requests get 503",
    async (ctx) => {
      if (!postgresServerInstalled())
        return ctx.skip(
          "no Postgres server binaries (initdb, pg_ctl) are installed; .ci/run installs them",
        );
      const server = await startPostgresServer();
      const spoolDir = await mkdtemp(join(tmpdir(), "forelead-spool-"));
      const cp = await startTestControlPlane({
        database: { location: server.url, kind: "postgres", drop: async () => {} },
        auditSpoolDir: spoolDir,
      });
      try {
        await playOutage(cp, {
          breakDatabase: () => server.stop(),
          healDatabase: () => server.start(),
          // A file where the spool's directory was: it can be neither read nor written. Its records
          // wait aside.
          breakSpool: async () => {
            await rename(spoolDir, `${spoolDir}.aside`);
            await writeFile(spoolDir, "");
          },
          healSpool: async () => {
            await rm(spoolDir);
            await rename(`${spoolDir}.aside`, spoolDir);
          },
        });
      } finally {
        await cp.close();
        await server.destroy();
        await rm(spoolDir, { recursive: true, force: true });
      }
    },
    90_000,
  );
});

describe("audit records while the embedded database's disk is full", () => {
  it.skipIf(!isRoot)(
    "are all in the trail afterwards, in order, none twice; with the spool's " +
      "disk full too, requests get 503 (needs root to mount a tmpfs)",
    async () => {
      const root = await mkdtemp(join(tmpdir(), "forelead-full-"));
      const [dataFs, spoolFs] = [join(root, "data"), join(root, "spool")];
      const mounted: string[] = [];
      for (const [dir, size] of [
        [dataFs, "64m"],
        [spoolFs, "2m"],
      ] as const) {
        await mkdir(dir);
        execFileSync("mount", ["-t", "tmpfs", "-o", `size=${size}`, "tmpfs", dir]);
        mounted.push(dir);
      }
      const fill = (dir: string) => fillDisk(join(dir, "filler"));
      const free = (dir: string) => rm(join(dir, "filler"), { force: true });
      let cp: TestControlPlane | undefined;
      try {
        cp = await startTestControlPlane({
          database: { location: join(dataFs, "db"), kind: "embedded", drop: async () => {} },
          auditSpoolDir: join(spoolFs, "audit-spool"),
        });
        // Long routes, so the records cannot all fit in the free space of pages PGlite already has.
        await playOutage(
          cp,
          {
            breakDatabase: () => fill(dataFs),
            healDatabase: () => free(dataFs),
            breakSpool: () => fill(spoolFs),
            healSpool: () => free(spoolFs),
          },
          `-${"x".repeat(1500)}`,
        );
      } finally {
        await cp?.close();
        for (const dir of mounted) execFileSync("umount", [dir]);
        await rm(root, { recursive: true, force: true });
      }
    },
    90_000,
  );
});

/** Appends to `file` until the file system has no byte left. */
async function fillDisk(file: string): Promise<void> {
  for (const size of [1 << 20, 4096, 1]) {
    const chunk = Buffer.alloc(size, 1);
    try {
      for (;;) await appendFile(file, chunk);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOSPC") throw err;
    }
  }
}

// Issue 45, "the audit spool must heal", under a real Postgres restart (a
// server of the test's own, stopped and started under the control planes):
// a spool file cut or replaced by another process while the control plane
// has it open is counted again as it is, its torn line quarantined, and every
// row still in it stored once; and two `forelead serve` processes started
// from one directory with default flags get a spool each (a third given one
// of theirs is refused, naming the holder and --audit-spool), and both heal
// within seconds of a Postgres restart under traffic, every answered request
// in the trail exactly once.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { randomUUID } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { auditUnavailableMessage } from "../../src/identity/audit.js";
import { auditQuarantineFile, auditSpoolFile } from "../../src/identity/audit-spool.js";
import { readOrCreateSecretsKeyFile } from "../../src/secrets/key-file.js";
import { lockFileName } from "../../src/store/data-dir-lock.js";
import { adminActor, eventually, type AdminActor } from "../support/actors.js";
import { createRestClient, type RestClient, type RestReply } from "../support/clients.js";
import { startTestControlPlane, testAdminId } from "../support/control-plane.js";
import { createTestPki } from "../support/pki.js";
import {
  postgresServerInstalled,
  startPostgresServer,
  type PostgresServer,
} from "../support/postgres-server.js";

const repoRoot = join(import.meta.dirname, "../..");
const refusedUnrecorded = (r: RestReply) =>
  r.status === 503 && r.json?.message === auditUnavailableMessage;

/**
 * The routes of the marks stored as allowed, oldest first, from the server's own database (a
 * request refused for the audit trail is stored as a refusal).
 */
async function storedMarks(url: string, prefix: string): Promise<string[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ route: string }>(
      "select route from audit_records where route like $1 and decision = 'allow' order by id",
      [`GET /v1/admin/jobs/${prefix}%`],
    );
    return rows.map((r) => r.route.slice("GET /v1/admin/jobs/".length));
  } finally {
    await client.end();
  }
}

describe.runIf(postgresServerInstalled())("a spool file changed by another process", () => {
  let server: PostgresServer;
  const printed: string[] = [];
  beforeAll(async () => {
    server = await startPostgresServer();
    vi.spyOn(console, "error").mockImplementation(
      (...args: unknown[]) => void printed.push(args.map(String).join(" ")),
    );
  });
  afterAll(async () => {
    vi.restoreAllMocks();
    await server?.destroy();
  });

  /**
   * Stops Postgres, makes ten requests (spooled), lets `change` alter the spool
   * file and say which marks it left in it, makes ten more, starts Postgres
   * again; checks the control plane healed and stored each mark left once.
   */
  async function playChange(
    name: string,
    change: (file: string, marks: readonly string[]) => Promise<readonly string[]>,
  ): Promise<string[]> {
    const spoolDir = await mkdtemp(join(tmpdir(), `forelead-spool-${name}-`));
    const file = join(spoolDir, auditSpoolFile);
    const cp = await startTestControlPlane({
      database: { location: server.url, kind: "postgres", drop: async () => {} },
      auditSpoolDir: spoolDir,
    });
    const admin: AdminActor = await adminActor(cp);
    const printedBefore = printed.length;
    const mark = async (tag: string) => {
      const reply = await admin.rest.request("GET", `/v1/admin/jobs/${tag}`);
      expect(refusedUnrecorded(reply), `${tag}: ${reply.text}`).toBe(false);
    };
    try {
      await server.stop();
      const before = Array.from({ length: 10 }, (_, i) => `${name}-before-${i}`);
      for (const tag of before) await mark(tag);
      await cp.plane.audit.flush();
      expect(cp.plane.audit.backlog().spooled).toBeGreaterThanOrEqual(before.length);
      const kept = await change(file, before);
      const after = Array.from({ length: 10 }, (_, i) => `${name}-after-${i}`);
      for (const tag of after) await mark(tag);
      await cp.plane.audit.flush();
      await server.start();
      await eventually(
        "the spool written",
        async () => {
          await cp.plane.audit.flush();
          const b = cp.plane.audit.backlog();
          return b.spooled === 0 && b.inMemory === 0 ? true : undefined;
        },
        30_000,
        100,
      );
      const jobs = await admin.rest.request("GET", "/v1/admin/jobs?workspaceId=w1");
      expect(jobs.status, jobs.text).toBe(200);
      expect(await storedMarks(server.url, `${name}-`)).toEqual([...kept, ...after]);
      return printed.slice(printedBefore).filter((l) => l.startsWith("audit:"));
    } finally {
      await admin.close();
      await cp.close();
      await rm(spoolDir, { recursive: true, force: true });
    }
  }

  it(
    "cut in the middle of a line (truncate(1)): the torn line is " +
      "quarantined, the lines left and every later record are stored once, and " +
      "it says so once",
    async () => {
      const log = await playChange("cut", async (file, marks) => {
        const lines = (await readFile(file, "utf8")).split("\n").filter(Boolean);
        const tags = lines.map((l) => (JSON.parse(l) as { route: string }).route.split("/").pop()!);
        // Cut into the line of the sixth mark, as another process's truncate would.
        const sixth = tags.indexOf(marks[5]!);
        const cut = lines.slice(0, sixth).join("\n").length + 1 + 20;
        execFileSync("truncate", ["-s", String(cut), file]);
        return marks.slice(0, 5);
      });
      const changed = log.find((l) => l.includes("was changed by another process"));
      expect(changed, log.join("\n")).toMatch(
        /\(cut from \d+ to \d+ bytes\); counted again: \d+ lines wait in it, \d+ did before/,
      );
      expect(log.filter((l) => l.includes("was changed by another process"))).toHaveLength(1);
      expect(log.filter((l) => l.includes(auditQuarantineFile))).toHaveLength(1);
    },
    90_000,
  );

  it(
    "replaced by another file (an editor's save, with a row added): every " +
      "row of the new file and every later record are stored once",
    async () => {
      const handWritten = {
        record_id: randomUUID(),
        at: new Date().toISOString(),
        route: "GET /v1/admin/jobs/replaced-hand-written",
        decision: "allow",
        reason: "added by an operator",
      };
      const log = await playChange("replaced", async (file, marks) => {
        const text = await readFile(file, "utf8");
        await writeFile(`${file}.new`, `${text}${JSON.stringify(handWritten)}\n`);
        await rename(`${file}.new`, file);
        return [...marks, "replaced-hand-written"];
      });
      expect(
        log.filter((l) => l.includes("was changed by another process (replaced by another file)")),
        log.join("\n"),
      ).toHaveLength(1);
      expect(log.some((l) => l.includes(auditQuarantineFile))).toBe(false);
    },
    90_000,
  );
});

describe.runIf(postgresServerInstalled())("a spool that cannot be used at all", () => {
  it(
    "while Postgres is down: 503; once Postgres is back, serving again " +
      "though the spool is still broken; its records are written once it " +
      "heals, each once",
    async () => {
      const server = await startPostgresServer();
      const spoolDir = await mkdtemp(join(tmpdir(), "forelead-spool-broken-"));
      const cp = await startTestControlPlane({
        database: { location: server.url, kind: "postgres", drop: async () => {} },
        auditSpoolDir: spoolDir,
      });
      const admin = await adminActor(cp);
      const answered: string[] = [];
      let n = 0;
      const mark = async (phase: string) => {
        const tag = `broken-${phase}-${n++}`;
        const reply = await admin.rest.request("GET", `/v1/admin/jobs/${tag}`);
        if (!refusedUnrecorded(reply)) answered.push(tag);
        return reply;
      };
      try {
        await server.stop();
        for (let i = 0; i < 5; i++) await mark("down");
        await cp.plane.audit.flush();
        expect(cp.plane.audit.backlog().spooled).toBeGreaterThanOrEqual(5);
        // A file where the spool's directory was: it can be neither read nor written.
        await rename(spoolDir, `${spoolDir}.aside`);
        await writeFile(spoolDir, "");
        await eventually("a 503 refusal", async () =>
          refusedUnrecorded(await mark("nospool")) ? true : undefined,
        );

        await server.start();
        await eventually(
          "serving with the spool still broken",
          async () => (refusedUnrecorded(await mark("dbback")) ? undefined : true),
          15_000,
          100,
        );
        const jobs = await admin.rest.request("GET", "/v1/admin/jobs?workspaceId=w1");
        expect(jobs.status, jobs.text).toBe(200);
        expect(cp.plane.audit.backlog().spoolUnreadable).toMatch(/ENOTDIR/);
        const doctor = await admin.rest.request("GET", "/v1/admin/doctor");
        const check = doctor.json.checks.find((c: { name: string }) => c.name === "audit backlog");
        expect(check.status, check.detail).toBe("warn");
        expect(check.detail).toContain("cannot read the spool (ENOTDIR");

        await rm(spoolDir);
        await rename(`${spoolDir}.aside`, spoolDir);
        await eventually(
          "the spool written",
          async () => {
            await cp.plane.audit.flush();
            const b = cp.plane.audit.backlog();
            return b.spooled === 0 && b.inMemory === 0 && !b.spoolUnreadable ? true : undefined;
          },
          15_000,
          100,
        );
        for (let i = 0; i < 3; i++) expect(refusedUnrecorded(await mark("after"))).toBe(false);
        await cp.plane.audit.flush();
        // Out of order with the spool's records (they waited for it), but every one, once.
        expect((await storedMarks(server.url, "broken-")).sort()).toEqual([...answered].sort());
      } finally {
        await admin.close();
        await cp.close();
        await server.destroy();
        await rm(spoolDir, { recursive: true, force: true });
        await rm(`${spoolDir}.aside`, { recursive: true, force: true });
      }
    },
    90_000,
  );
});

/** One `forelead serve` process in `cwd`, its output captured. */
interface Serve {
  readonly child: ChildProcess;
  readonly output: () => string;
  readonly exited: Promise<number | null>;
}

function spawnServe(cwd: string, args: readonly string[], started: Serve[]): Serve {
  const child = spawn(process.execPath, [join(repoRoot, "bin/forelead.js"), "serve", ...args], {
    cwd,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let text = "";
  child.stdout!.setEncoding("utf8").on("data", (c: string) => (text += c));
  child.stderr!.setEncoding("utf8").on("data", (c: string) => (text += c));
  const exited = new Promise<number | null>((resolve) =>
    child.once("exit", (code) => resolve(code)),
  );
  const serve = { child, output: () => text, exited };
  started.push(serve);
  return serve;
}

/** The URL and audit spool a serve prints once it serves. */
async function serving(serve: Serve): Promise<{ url: string; spool: string }> {
  return eventually(
    "the serving line",
    async () => {
      if (serve.child.exitCode !== null)
        throw new Error(`serve exited ${serve.child.exitCode}:\n${serve.output()}`);
      const m = /forelead: serving (https:\/\/\S+) .*, audit spool (\S+), lease/.exec(
        serve.output(),
      );
      return m ? { url: m[1]!, spool: m[2]! } : undefined;
    },
    45_000,
  );
}

describe.runIf(postgresServerInstalled())(
  "two forelead serve processes from one directory with default flags",
  () => {
    let server: PostgresServer;
    let dir: string;
    let ca: string;
    let admin: { certPem: string; keyPem: string };
    let args: string[];
    const started: Serve[] = [];
    const replicas: { serve: Serve; url: string; spool: string; client: RestClient }[] = [];

    beforeAll(async () => {
      server = await startPostgresServer();
      dir = await mkdtemp(join(tmpdir(), "forelead-two-replicas-"));
      const pki = await createTestPki();
      ca = pki.ca.certPem;
      admin = await pki.service("test-admin");
      await writeFile(join(dir, "server.pem"), pki.server.certPem);
      await writeFile(join(dir, "server-key.pem"), pki.server.keyPem, { mode: 0o600 });
      await writeFile(join(dir, "ca.pem"), pki.ca.certPem);
      await readOrCreateSecretsKeyFile(join(dir, "secrets.key"));
      // Relative paths on purpose: what a systemd template unit with one WorkingDirectory runs.
      // Ports of their own (port 0): the listen and metrics defaults are one port each.
      args = [
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--tls-cert",
        "server.pem",
        "--tls-key",
        "server-key.pem",
        "--client-ca",
        "ca.pem",
        "--database",
        server.url,
        "--admin",
        testAdminId,
        "--secrets-key",
        "secrets.key",
      ];
    }, 60_000);
    afterAll(async () => {
      await Promise.all(replicas.map((r) => r.client.close().catch(() => {})));
      for (const s of started) if (s.child.exitCode === null) s.child.kill("SIGTERM");
      await Promise.all(started.map((s) => s.exited));
      await server?.destroy();
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    it(
      "get a spool each, locked; a third serve given one of theirs is refused, " +
        "naming the holder and --audit-spool",
      async () => {
        // One after the other, so that A is the one on the first folder.
        for (let i = 0; i < 2; i++) {
          const serve = spawnServe(dir, args, started);
          const { url, spool } = await serving(serve);
          replicas.push({ serve, url, spool, client: createRestClient(url, ca, admin) });
        }
        const [a, b] = replicas;
        expect(a!.spool).toBe(join(dir, "data/audit-spool/127.0.0.1-0", auditSpoolFile));
        expect(b!.spool).toBe(join(dir, "data/audit-spool/127.0.0.1-0.2", auditSpoolFile));
        const aDir = join(dir, "data/audit-spool/127.0.0.1-0");
        const lock = JSON.parse(await readFile(join(aDir, lockFileName), "utf8"));
        expect(lock).toMatchObject({ pid: a!.serve.child.pid, command: "forelead serve" });

        const third = spawnServe(dir, [...args, "--audit-spool", aDir], started);
        expect(await third.exited).toBe(1);
        expect(third.output()).toContain(
          `${aDir} is in use by forelead serve (pid ${a!.serve.child.pid}, started ` +
            `${lock.startedAt}); stop it, or give this replica a spool of its own ` +
            `with --audit-spool`,
        );
        expect(third.output()).not.toContain("serving");
      },
      120_000,
    );

    it(
      "both heal within seconds of a Postgres restart under traffic on both: " +
        "no request answered unrecorded, every spooled record stored exactly once",
      async () => {
        expect(replicas).toHaveLength(2);
        const answered: string[] = [];
        const refused: string[] = [];
        let stop = false;
        let healMs = 0;
        const traffic = replicas.map(async (r, i) => {
          for (let n = 0; !stop; n++) {
            const tag = `rep-${"AB"[i]}-${String(n).padStart(5, "0")}`;
            const reply = await r.client.request("GET", `/v1/admin/jobs/${tag}`);
            if (refusedUnrecorded(reply)) refused.push(tag);
            else if (reply.status > 0) answered.push(tag);
          }
        });
        const countOf = (i: number) =>
          answered.filter((t) => t.startsWith(`rep-${"AB"[i]}`)).length;
        const spoolSize = (r: (typeof replicas)[number]) =>
          stat(r.spool).then(
            (s) => s.size,
            () => 0,
          );
        try {
          await eventually("traffic on both", async () =>
            countOf(0) >= 5 && countOf(1) >= 5 ? true : undefined,
          );
          await server.stop();
          await eventually(
            "records spooled on both",
            async () =>
              (await spoolSize(replicas[0]!)) > 0 && (await spoolSize(replicas[1]!)) > 0
                ? true
                : undefined,
            15_000,
          );
          await server.start();
          const restartedAt = performance.now();
          await eventually(
            "both serving with their spools written",
            async () => {
              for (const r of replicas) {
                const jobs = await r.client.request("GET", "/v1/admin/jobs?workspaceId=w1");
                if (jobs.status !== 200 || (await spoolSize(r)) > 0) return undefined;
              }
              return true;
            },
            15_000,
            100,
          );
          healMs = performance.now() - restartedAt;
          expect(healMs, "both healed after the restart").toBeLessThan(10_000);
          const beforeStop = answered.length;
          await eventually("more traffic after healing", async () =>
            answered.length > beforeStop + 10 ? true : undefined,
          );
        } finally {
          stop = true;
          await Promise.all(traffic);
        }
        expect(refused, "requests refused for the audit trail").toEqual([]);
        // Every answered request's record, once: the replicas flush every 200 ms.
        const expected = [...answered].sort();
        const stored = await eventually(
          "every answered request in the trail",
          async () => {
            const marks = await storedMarks(server.url, "rep-");
            return marks.length >= expected.length ? marks : undefined;
          },
          15_000,
          100,
        );
        expect([...stored].sort()).toEqual(expected);
        for (const r of replicas) expect(r.serve.child.exitCode).toBeNull();
        console.info(
          `two replicas: both healed ${healMs.toFixed(0)} ms after the restart and wrote ${stored.length} records once`,
        );
      },
      120_000,
    );

    it(
      "killed with records in their spools, are not stranded: a replica " +
        "started again takes its folder back and adopts the other's, writing " +
        "each spooled record once",
      async () => {
        expect(replicas).toHaveLength(2);
        await server.stop();
        const tags = ["A", "B"].map((r) => Array.from({ length: 5 }, (_, n) => `kill-${r}-${n}`));
        for (const [i, r] of replicas.entries())
          for (const tag of tags[i]!) {
            const reply = await r.client.request("GET", `/v1/admin/jobs/${tag}`);
            expect(refusedUnrecorded(reply), reply.text).toBe(false);
          }
        const spooledTags = async (r: (typeof replicas)[number]) =>
          (await readFile(r.spool, "utf8").catch(() => ""))
            .split("\n")
            .filter(Boolean)
            .map((l) => (JSON.parse(l) as { route: string }).route.split("/").pop()!)
            .filter((t) => t.startsWith("kill-"));
        await eventually("every request of both spooled", async () =>
          (await spooledTags(replicas[0]!)).length === 5 &&
          (await spooledTags(replicas[1]!)).length === 5
            ? true
            : undefined,
        );
        for (const r of replicas) {
          await r.client.close();
          r.serve.child.kill("SIGKILL");
          await r.serve.exited;
        }
        await server.start();

        const again = spawnServe(dir, args, started);
        const { spool } = await serving(again);
        expect(spool, "the first folder, whose holder is dead").toBe(replicas[0]!.spool);
        await eventually(
          "both spools written",
          async () =>
            (await storedMarks(server.url, "kill-")).length >= 10 &&
            (await spooledTags(replicas[0]!)).length === 0 &&
            (await spooledTags(replicas[1]!)).length === 0
              ? true
              : undefined,
          15_000,
          100,
        );
        expect((await storedMarks(server.url, "kill-")).sort()).toEqual(tags.flat().sort());
        expect(again.output()).toContain(
          `audit: adopted the spool ${replicas[1]!.spool}, which no live process ` +
            `held: wrote its 5 records to the database`,
        );
      },
      120_000,
    );
  },
);

// The doctor (issue 17 item 9): GET /v1/admin/doctor, `forelead doctor` and
// `forelead serve --check` name each failure and exit non-zero on one: an
// expired server certificate, an unreachable database, a full artifacts disk.
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { issueServerCertificate } from "../../src/identity/ca.js";
import { createRestClient } from "../support/clients.js";
import { startTestControlPlane, type TestControlPlane } from "../support/control-plane.js";
import { useControlPlane } from "../support/fixture.js";
import type { TestPki } from "../support/pki.js";
import {
  postgresServerInstalled,
  startPostgresServer,
  type PostgresServer,
} from "../support/postgres-server.js";

const run = promisify(execFile);
const forelead = join(process.cwd(), "bin/forelead.js");
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "forelead-doctor-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Runs `forelead ...` to completion; never throws, so failures can be asserted. */
async function forel(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [forelead, ...args], {
      cwd: dir,
      timeout: 110_000,
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return {
      code: typeof e.code === "number" ? e.code : -1,
      stdout: e.stdout ?? "",
      stderr: e.stderr ?? "",
    };
  }
}

/** The admin client flags of `forelead doctor` for `cp`, with the files written under `dir`. */
async function adminFlags(cp: TestControlPlane, name: string): Promise<string[]> {
  const admin = await cp.pki.service("test-admin");
  const files = {
    ca: join(dir, `${name}-ca.pem`),
    cert: join(dir, `${name}-admin.pem`),
    key: join(dir, `${name}-admin-key.pem`),
  };
  await writeFile(files.ca, cp.pki.ca.certPem);
  await writeFile(files.cert, admin.certPem);
  await writeFile(files.key, admin.keyPem, { mode: 0o600 });
  return ["--server", cp.url, "--ca", files.ca, "--cert", files.cert, "--key", files.key];
}

interface Check {
  name: string;
  status: string;
  detail: string;
  hint?: string;
}

async function doctorRoute(cp: TestControlPlane): Promise<{ status: string; checks: Check[] }> {
  const client = createRestClient(cp.url, cp.pki.ca.certPem, await cp.pki.service("test-admin"));
  try {
    const reply = await client.request("GET", "/v1/admin/doctor");
    expect(reply.status, reply.text).toBe(200);
    return reply.json;
  } finally {
    await client.close();
  }
}

const statusOf = (checks: Check[], name: string) => checks.find((c) => c.name === name)?.status;

describe("a healthy control plane", () => {
  const cp = useControlPlane();

  it(
    "passes every check on the route and `forelead doctor` exits 0",
    { timeout: 120_000 },
    async () => {
      const report = await doctorRoute(cp);
      expect(report.checks.map((c) => c.name)).toEqual([
        "server certificate",
        "issuer",
        "database",
        "migrations",
        "clock skew",
        "artifacts store",
        "LISTEN",
        "event backlog",
        "audit backlog",
        "retention",
      ]);
      for (const c of report.checks)
        expect(["ok", "skip"], `${c.name}: ${c.detail}`).toContain(c.status);
      expect(report.status).toBe("ok");
      const cli = await forel(["doctor", ...(await adminFlags(cp, "healthy"))]);
      expect(cli.code, cli.stdout + cli.stderr).toBe(0);
      expect(cli.stdout).toMatch(/^OK +server certificate +CN=127\.0\.0\.1/m);
      expect(cli.stdout).toMatch(/^OK +database +reachable, round trip/m);
      expect(cli.stdout).toMatch(/\d+ ok, 0 warn, 0 fail/);
      const json = await forel(["doctor", "--json", ...(await adminFlags(cp, "healthy"))]);
      expect(json.code).toBe(0);
      const status = await forel(["status", ...(await adminFlags(cp, "healthy"))]);
      expect(status.code, status.stdout + status.stderr).toBe(0);
      expect(status.stdout).toMatch(/^database: (pglite|postgres) reachable/m);
      expect(status.stdout).toMatch(/^replicas \(1\):/m);
      expect(status.stdout).toMatch(
        /^audit spool: \/\S+\/audit-spool\.ndjson held by pid \d+ on \S+, started \S+, 0 records waiting, 0 quarantined$/m,
      );
      const statuses = (checks: Check[]) => checks.map((c) => [c.name, c.status]);
      expect(statuses(JSON.parse(json.stdout).checks)).toEqual(statuses(report.checks));
    },
  );
});

describe("a full artifacts disk", () => {
  let mountPoint: string | undefined;
  let cp: TestControlPlane | undefined;
  let mountFailure = "";

  beforeAll(async () => {
    const point = join(dir, "tiny-artifacts");
    await mkdir(point);
    try {
      await run("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", point]);
      mountPoint = point;
    } catch (err) {
      mountFailure = (err as Error).message;
      return;
    }
    cp = await startTestControlPlane({ artifactsDir: mountPoint });
    // Fill it: the file grows until the filesystem refuses (ENOSPC).
    await run("sh", [
      "-c",
      `dd if=/dev/zero of=${join(mountPoint, "filler")} bs=4096 2>/dev/null; true`,
    ]);
  });
  afterAll(async () => {
    await cp?.close();
    if (mountPoint) await run("umount", [mountPoint]);
  });

  it("is a failure of the artifacts store check, named by the CLI, which exits 1", async (ctx) => {
    if (!cp) ctx.skip(`cannot mount a tmpfs here (needs root): ${mountFailure}`);
    const report = await doctorRoute(cp!);
    const check = report.checks.find((c) => c.name === "artifacts store")!;
    expect(check.status, check.detail).toBe("fail");
    expect(check.detail).toMatch(/ENOSPC|0\.0 % free/);
    expect(report.status).toBe("fail");
    const cli = await forel(["doctor", ...(await adminFlags(cp!, "full"))]);
    expect(cli.code, cli.stdout).toBe(1);
    expect(cli.stdout).toMatch(/^FAIL +artifacts store +/m);
    expect(cli.stdout).toMatch(/hint: free space there/);
  });
});

describe.skipIf(!postgresServerInstalled())(
  "an unreachable database (a Postgres server of the test's own, stopped)",
  () => {
    let server: PostgresServer;
    let cp: TestControlPlane;

    beforeAll(async () => {
      server = await startPostgresServer();
      cp = await startTestControlPlane({
        database: { location: server.url, kind: "postgres", drop: async () => {} },
      });
    }, 60_000);
    afterAll(async () => {
      await cp?.close();
      await server?.destroy();
    });

    it(
      "fails the database check and the CLI exits 1; once it is back the doctor is healthy again",
      { timeout: 90_000 },
      async () => {
        await server.stop();
        const report = await doctorRoute(cp);
        expect(statusOf(report.checks, "database")).toBe("fail");
        expect(report.checks.find((c) => c.name === "database")!.detail).toMatch(/^unreachable: /);
        expect(report.checks.find((c) => c.name === "database")!.detail).not.toContain(
          "unused-secret",
        );
        const cli = await forel(["doctor", ...(await adminFlags(cp, "down"))]);
        expect(cli.code, cli.stdout).toBe(1);
        expect(cli.stdout).toMatch(/^FAIL +database +unreachable/m);
        await server.start();
        const back = await doctorRoute(cp);
        expect(statusOf(back.checks, "database")).toBe("ok");
      },
    );
  },
);

describe("an expired server certificate", () => {
  let cp: TestControlPlane;
  let expired: { certPem: string; keyPem: string };
  let pki: TestPki;

  beforeAll(async () => {
    const first = await startTestControlPlane();
    pki = first.pki;
    await first.close();
    // notBefore is backdated 60 s: a 1 s lifetime ended 59 s ago.
    expired = await issueServerCertificate(pki.ca, { hosts: ["127.0.0.1"], lifetimeMs: 1000 });
    cp = await startTestControlPlane({
      pki,
      tlsCertPem: expired.certPem,
      tlsKeyPem: expired.keyPem,
    });
  });
  afterAll(async () => {
    await cp?.close();
  });

  it("`forelead doctor` cannot trust the server and says so, exiting 1", async () => {
    const cli = await forel(["doctor", ...(await adminFlags(cp, "expired"))]);
    expect(cli.code, cli.stdout + cli.stderr).toBe(1);
    expect(cli.stdout).toMatch(
      /^FAIL +control plane +.*the server's certificate at https:\S+ has expired; the control plane's operator must renew it/m,
    );
  });

  it(
    "`forelead serve --check` names it, and the unreachable database, and exits 1 without listening",
    { timeout: 120_000 },
    async () => {
      const files = {
        cert: join(dir, "expired.pem"),
        key: join(dir, "expired-key.pem"),
        ca: join(dir, "expired-ca.pem"),
      };
      await writeFile(files.cert, expired.certPem);
      await writeFile(files.key, expired.keyPem, { mode: 0o600 });
      await writeFile(files.ca, pki.ca.certPem);
      const check = await forel([
        "serve",
        "--check",
        "--listen",
        "127.0.0.1:1",
        "--tls-cert",
        files.cert,
        "--tls-key",
        files.key,
        "--client-ca",
        files.ca,
        "--database",
        "postgres://forelead:pw-not-logged@127.0.0.1:1/none",
      ]);
      expect(check.code, check.stdout + check.stderr).toBe(1);
      expect(check.stdout).toMatch(/^OK +options +/m);
      expect(check.stdout).toMatch(
        /^FAIL +server certificate +the server certificate expired at /m,
      );
      expect(check.stdout).toMatch(/^FAIL +database +unreachable: /m);
      expect(check.stdout).not.toContain("pw-not-logged");
      expect(check.stdout).not.toContain("serving");
    },
  );
});

// Each run is a fresh process opening an embedded database (and first making a PKI): slow on a busy
// machine.
describe("forelead serve --check", { timeout: 120_000 }, () => {
  it("passes a good configuration (the development PKI, an embedded database) and exits 0", async () => {
    const check = await forel([
      "serve",
      "--check",
      "--certs-dir",
      join(dir, "certs"),
      "--database",
      join(dir, "data", "db"),
    ]);
    expect(check.code, check.stdout + check.stderr).toBe(0);
    expect(check.stdout).toMatch(/^OK +options +/m);
    expect(check.stdout).toMatch(/^OK +server certificate +/m);
    expect(check.stdout).toMatch(/^OK +issuer +/m);
    expect(check.stdout).toMatch(/^OK +database +reachable/m);
    // A fresh database: serve migrates it when it starts.
    expect(check.stdout).toMatch(/^WARN +migrations +\d+ pending/m);
    expect(check.stdout).toMatch(/^OK +artifacts store +/m);
  });

  it("refuses a bad flag as a failed options check naming it", async () => {
    const check = await forel([
      "serve",
      "--check",
      "--certs-dir",
      join(dir, "certs"),
      "--database",
      join(dir, "data", "db"),
      "--listen",
      "nowhere",
    ]);
    expect(check.code).toBe(1);
    expect(check.stdout).toMatch(/^FAIL +options +--listen "nowhere" is not host:port/m);
  });
});

// The identity commands as an operator runs them: `forelead serve` as its own
// process with the development PKI as issuer, then `forelead grants create`,
// `forelead runner enroll`, `forelead certs` and `forelead audit` as separate
// processes. Last, the server's own output is searched for the grant.
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readOrCreateSecretsKeyFile } from "../../src/secrets/key-file.js";
import { createRestClient } from "../support/clients.js";
import { startTestControlPlane, type TestControlPlane } from "../support/control-plane.js";
import { createTestDatabase, databaseKind, type TestDatabase } from "../support/database.js";
import { enrollRequest, issuerOf, makeCsr } from "../support/identity.js";
import { createTestPki } from "../support/pki.js";

const repoRoot = fileURLToPath(new URL("../..", import.meta.url));

/** Runs `forelead ARGS`; never throws on a non-zero exit. */
function cli(args: readonly string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ["bin/forelead.js", ...args],
      { cwd: repoRoot, timeout: 60_000 },
      (err, stdout, stderr) => {
        resolve({
          code: err ? Number((err as NodeJS.ErrnoException & { code?: number }).code ?? 1) : 0,
          stdout,
          stderr,
        });
      },
    );
  });
}

describe(`forelead serve, grants, runner enroll, certs and audit as processes (${databaseKind})`, () => {
  let tmp: string;
  let database: TestDatabase;
  let serve: ChildProcess | undefined;
  let out = "";
  let url = "";
  const ops = "spiffe://forelead/services/ops";
  const dash = "spiffe://forelead/services/dash";
  const conn = (who: string) => [
    "--server",
    url,
    "--ca",
    path.join(tmp, "certs/ca.pem"),
    "--cert",
    path.join(tmp, `${who}.pem`),
    "--key",
    path.join(tmp, `${who}-key.pem`),
  ];

  beforeAll(async () => {
    tmp = await mkdtemp(path.join(os.tmpdir(), "forelead-cli-"));
    database = await createTestDatabase();
    const certs = path.join(tmp, "certs");
    expect((await cli(["ca", "init", "--dir", certs])).code).toBe(0);
    for (const who of ["ops", "dash"]) {
      const issued = await cli([
        "ca",
        "issue",
        "--dir",
        certs,
        "--spiffe-id",
        `spiffe://forelead/services/${who}`,
        "--out",
        path.join(tmp, who),
      ]);
      expect(issued.code, issued.stderr).toBe(0);
    }
    serve = spawn(
      process.execPath,
      [
        "bin/forelead.js",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--certs-dir",
        certs,
        "--database",
        database.location,
        "--secrets-key",
        (await readOrCreateSecretsKeyFile(path.join(tmp, "secrets.key")),
        path.join(tmp, "secrets.key")),
        "--admin",
        ops,
        "--grant",
        `${dash}=read`,
      ],
      { cwd: repoRoot, stdio: ["ignore", "pipe", "pipe"] },
    );
    serve.stdout!.setEncoding("utf8").on("data", (c: string) => (out += c));
    serve.stderr!.setEncoding("utf8").on("data", (c: string) => (out += c));
    url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`serve did not start within 30 s:\n${out}`)),
        30_000,
      );
      serve!.stdout!.on("data", () => {
        const m = /^forelead: serving (https:\/\/127\.0\.0\.1:\d+) /m.exec(out);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]!);
        }
      });
      serve!.once("exit", (code) => reject(new Error(`serve exited with ${code}:\n${out}`)));
    });
  }, 90_000);

  afterAll(async () => {
    if (serve && serve.exitCode === null) {
      serve.kill("SIGTERM");
      await new Promise((r) => serve!.once("exit", r));
    }
    await database?.drop();
    await rm(tmp, { recursive: true, force: true });
  });

  it("serve names its roles and its issuer: the development CA when no TLS flags are given", () => {
    expect(out).toContain(`roles ${ops}=admin ${dash}=read`);
    expect(out).toMatch(
      /forelead: issuing runner certificates with CN=Forelead Development CA \(valid until /,
    );
  });

  it(
    "grants create --out writes the grant with mode 0600, not to stdout; " +
      "every key file the CLI wrote is 0600",
    async () => {
      const file = path.join(tmp, "grant-out");
      const created = await cli([
        "grants",
        "create",
        "--workspace",
        "w1",
        "--out",
        file,
        ...conn("ops"),
      ]);
      expect(created.code, created.stderr).toBe(0);
      expect(created.stdout).toBe("");
      expect(created.stderr).toContain(`Written to ${file} (mode 0600)`);
      expect((await readFile(file, "utf8")).trim()).toMatch(/^feg_[A-Za-z0-9_-]{43}$/);
      expect((await stat(file)).mode & 0o777).toBe(0o600);
      const keys = [
        path.join(tmp, "ops-key.pem"),
        path.join(tmp, "dash-key.pem"),
        ...(await readdir(path.join(tmp, "certs")))
          .filter((f) => f.includes("key"))
          .map((f) => path.join(tmp, "certs", f)),
      ];
      expect(keys.length).toBeGreaterThan(2);
      for (const key of keys) expect((await stat(key)).mode & 0o777, key).toBe(0o600);
    },
  );

  it(
    "an operator creates a grant, the runner enrolls with it, the " +
      "certificate works; certs and audit show what happened; the server never " +
      "prints the grant",
    { timeout: 120_000 },
    async () => {
      const created = await cli([
        "grants",
        "create",
        "--workspace",
        "w1",
        "--runner-id",
        "r1",
        "--expires-in",
        "10m",
        ...conn("ops"),
      ]);
      expect(created.code, created.stderr).toBe(0);
      const grant = created.stdout.trim();
      expect(grant).toMatch(/^feg_[A-Za-z0-9_-]{43}$/);
      expect(created.stderr).toMatch(
        /^grant [0-9a-f-]{36} for workspace "w1", runner "r1"; single use, expires at \S+\. It is shown only now:/,
      );

      const grantFile = path.join(tmp, "grant");
      await writeFile(grantFile, `${grant}\n`, { mode: 0o600 });
      const stateDir = path.join(tmp, "state");
      const enrolled = await cli([
        "runner",
        "enroll",
        "--server",
        url,
        "--ca",
        path.join(tmp, "certs/ca.pem"),
        "--grant-file",
        grantFile,
        "--runner-id",
        "r1",
        "--state-dir",
        stateDir,
      ]);
      expect(enrolled.code, enrolled.stderr).toBe(0);
      expect(enrolled.stdout).toMatch(
        /^enrolled spiffe:\/\/forelead\/runners\/r1\/workspaces\/w1; certificate [0-9a-f]+ valid until /,
      );
      const again = await cli([
        "runner",
        "enroll",
        "--server",
        url,
        "--ca",
        path.join(tmp, "certs/ca.pem"),
        "--grant",
        grant,
        "--runner-id",
        "r1",
        "--state-dir",
        path.join(tmp, "state2"),
      ]);
      expect(again.code).toBe(1);
      expect(again.stderr).toContain("was already used at");

      const runner = createRestClient(url, await readFile(path.join(tmp, "certs/ca.pem"), "utf8"), {
        certPem: await readFile(path.join(stateDir, "cert.pem"), "utf8"),
        keyPem: await readFile(path.join(stateDir, "key.pem"), "utf8"),
      });
      // The certificate is accepted (the refusal is about registration, not identity); no register
      // here: a registration without the agent's instance id would hold off the agent below for a
      // lease length.
      const probe = await runner.request("POST", "/v1/runner/claim", {
        apiVersion: "v1",
        runnerId: "r1",
        waitSeconds: 0,
      });
      await runner.close();
      expect(probe.status, probe.text).toBe(400);
      expect(probe.json.code, probe.text).toBe("failed_precondition");
      expect(probe.json.message).toContain('runner "r1" is not registered in workspace "w1"');

      // `forelead runner --state-dir` runs jobs with the enrolled identity.
      const agent = spawn(
        process.execPath,
        [
          "bin/forelead.js",
          "runner",
          "--server",
          url,
          "--ca",
          path.join(tmp, "certs/ca.pem"),
          "--state-dir",
          stateDir,
          "--executor",
          "process",
          "--labels",
          "linux",
          "--work-dir",
          path.join(tmp, "work"),
        ],
        { cwd: repoRoot, stdio: ["ignore", "pipe", "pipe"] },
      );
      let agentOut = "";
      agent.stdout!.setEncoding("utf8").on("data", (c: string) => (agentOut += c));
      agent.stderr!.setEncoding("utf8").on("data", (c: string) => (agentOut += c));
      const opsClient = createRestClient(
        url,
        await readFile(path.join(tmp, "certs/ca.pem"), "utf8"),
        {
          certPem: await readFile(path.join(tmp, "ops.pem"), "utf8"),
          keyPem: await readFile(path.join(tmp, "ops-key.pem"), "utf8"),
        },
      );
      const job = (
        await opsClient.request("POST", "/v1/admin/jobs", {
          apiVersion: "v1",
          workspaceId: "w1",
          labels: ["linux"],
          spec: { argv: ["echo", "enrolled"] },
        })
      ).json.job;
      let state = "";
      for (let i = 0; i < 300 && state !== "succeeded" && state !== "failed"; i++) {
        await new Promise((r) => setTimeout(r, 100));
        state = (await opsClient.request("GET", `/v1/admin/jobs/${job.id}`)).json.job.state;
      }
      await opsClient.close();
      agent.kill("SIGTERM");
      await new Promise((r) => agent.once("exit", r));
      expect(state, agentOut).toBe("succeeded");

      const certs = await cli(["certs", ...conn("dash")]);
      expect(certs.code, certs.stderr).toBe(0);
      expect(certs.stdout).toMatch(
        /^current\s+spiffe:\/\/forelead\/runners\/r1\/workspaces\/w1 serial [0-9a-f]+ expires \S+ \(in 2[34]h\d*m?\d*s?\), issued via enroll$/m,
      );
      expect(certs.stdout).toContain(
        "1 certificate(s): 0 expiring soon, 0 failed to renew, 0 expired",
      );
      const soon = await cli(["certs", "--expiring-within", "48h", ...conn("dash")]);
      expect(soon.stdout).toMatch(
        /^EXPIRING SOON\s+spiffe:\/\/forelead\/runners\/r1\/workspaces\/w1 /m,
      );

      const refused = await cli(["grants", "create", "--workspace", "w1", ...conn("dash")]);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain(
        `${dash} lacks the "admin" role that CreateEnrollmentGrant needs`,
      );

      const denies = await cli(["audit", "--decision", "deny", "--since", "10m", ...conn("dash")]);
      expect(denies.code, denies.stderr).toBe(0);
      expect(denies.stdout).toMatch(
        new RegExp(
          `deny  POST /forelead\\.admin\\.v1\\.AdminService/CreateEnrollmentGrant ` +
            `by ${dash} \\(serial [0-9a-f]+\\) from \\S+: ${dash} lacks the "admin" ` +
            `role`,
        ),
      );
      const actions = await cli(["audit", "--kind", "action", "--json", ...conn("dash")]);
      const lines = actions.stdout
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l));
      expect(lines.map((l) => `${l.action} ${l.decision}`)).toEqual(
        expect.arrayContaining([
          "grant.create allow",
          "grant.use allow",
          "certificate.issue allow",
          "grant.use deny",
        ]),
      );

      serve!.kill("SIGTERM");
      await new Promise((r) => serve!.once("exit", r));
      expect(out).toContain("SIGTERM received");
      expect(out).not.toContain(grant);
      expect(out).not.toContain(grant.slice(4, 30));
    },
  );
});

describe(`forelead certs flags runners that failed to renew (${databaseKind})`, () => {
  let cp: TestControlPlane;
  let tmp: string;
  beforeAll(async () => {
    const pki = await createTestPki();
    cp = await startTestControlPlane({ pki, ...issuerOf(pki) });
    tmp = await mkdtemp(path.join(os.tmpdir(), "forelead-certs-"));
    const admin = await pki.service("test-admin");
    await writeFile(path.join(tmp, "ca.pem"), pki.ca.certPem);
    await writeFile(path.join(tmp, "admin.pem"), admin.certPem);
    await writeFile(path.join(tmp, "admin-key.pem"), admin.keyPem, { mode: 0o600 });
  });
  afterAll(async () => {
    await cp?.close();
    await rm(tmp, { recursive: true, force: true });
  });

  it(
    "a certificate past 3/4 of its lifetime with no newer one is FAILED TO RENEW, an expired one EXPIRED",
    { timeout: 60_000 },
    async () => {
      const rest = createRestClient(cp.url, cp.pki.ca.certPem, await cp.pki.service("test-admin"));
      for (const runnerId of ["late", "dead", "fine"]) {
        const grant = (
          await rest.request("POST", "/v1/admin/enrollment-grants", {
            apiVersion: "v1",
            workspaceId: "wc",
            runnerId,
          })
        ).json.grant;
        expect(
          (await enrollRequest(cp, { grant, runnerId, csr: (await makeCsr()).csrPem })).status,
        ).toBe(200);
      }
      await rest.close();
      // As if enrolled 20 h (and 25 h) ago and never renewed since.
      await sql`update issued_certificates set not_before = now() - interval '20 hours', not_after =
        now() + interval '4 hours' where runner_id = 'late'`.execute(cp.plane.store.db);
      await sql`update issued_certificates set not_before = now() - interval '25 hours', not_after =
        now() - interval '1 hour' where runner_id = 'dead'`.execute(cp.plane.store.db);
      const certs = await cli([
        "certs",
        "--workspace",
        "wc",
        "--server",
        cp.url,
        "--ca",
        path.join(tmp, "ca.pem"),
        "--cert",
        path.join(tmp, "admin.pem"),
        "--key",
        path.join(tmp, "admin-key.pem"),
      ]);
      expect(certs.code, certs.stderr).toBe(0);
      expect(certs.stdout).toMatch(
        /^EXPIRED\s+spiffe:\/\/forelead\/runners\/dead\/workspaces\/wc serial \S+ expired /m,
      );
      expect(certs.stdout).toMatch(
        /^FAILED TO RENEW\s+spiffe:\/\/forelead\/runners\/late\/workspaces\/wc serial \S+ expires \S+ \(in [34]h/m,
      );
      expect(certs.stdout).toMatch(
        /^current\s+spiffe:\/\/forelead\/runners\/fine\/workspaces\/wc /m,
      );
      expect(certs.stdout).toContain(
        "3 certificate(s): 0 expiring soon, 1 failed to renew, 1 expired",
      );
    },
  );
});

import { execFile, spawn } from "node:child_process";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readOrCreateSecretsKeyFile } from "../../src/secrets/key-file.js";
import { createRestClient } from "../support/clients.js";
import { createTestPki } from "../support/pki.js";

const run = promisify(execFile);
const forelead = join(process.cwd(), "bin/forelead.js");
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "forelead-cli-"));
  await readOrCreateSecretsKeyFile(join(dir, "pg-secrets.key"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Runs `forelead ...` to completion; never throws, so refusals can be asserted. */
async function forel(
  args: string[],
  timeout = 60_000,
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [forelead, ...args], {
      cwd: dir,
      timeout,
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

describe("the forelead command", () => {
  it("--help works from a fresh install (no build step)", async () => {
    const help = await forel(["--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("serve");
    expect(help.stdout).toContain("ca");
  });

  it(
    "ca init writes a development PKI once, with private keys 0600; ca issue " +
      "writes a client certificate",
    async () => {
      const init = await forel(["ca", "init", "--dir", "pki", "--hosts", "localhost,127.0.0.1"]);
      expect(init.code, init.stderr).toBe(0);
      expect(init.stdout).toContain("wrote the development PKI");
      expect((await stat(join(dir, "pki/ca-key.pem"))).mode & 0o777).toBe(0o600);
      const again = await forel(["ca", "init", "--dir", "pki"]);
      expect(again.stdout).toContain("left unchanged");
      const issue = await forel([
        "ca",
        "issue",
        "--dir",
        "pki",
        "--spiffe-id",
        "spiffe://forelead/runners/r1/workspaces/w1",
        "--ttl",
        "2h",
        "--out",
        "r1",
      ]);
      expect(issue.code, issue.stderr).toBe(0);
      const pem = await readFile(join(dir, "r1.pem"), "utf8");
      const { X509Certificate } = await import("node:crypto");
      const cert = new X509Certificate(pem);
      expect(cert.subjectAltName).toContain("spiffe://forelead/runners/r1/workspaces/w1");
      expect(new Date(cert.validTo).getTime() - new Date(cert.validFrom).getTime()).toBe(
        2 * 3600 * 1000,
      );
    },
  );

  it(
    "ca issue refuses an invalid SPIFFE ID, a bad duration, a lifetime no " +
      "longer than the backdating and one over the server's maximum, saying which",
    async () => {
      const badId = await forel([
        "ca",
        "issue",
        "--dir",
        "pki",
        "--spiffe-id",
        "spiffe://Forelead/x",
        "--out",
        "x",
      ]);
      expect(badId.code).toBe(1);
      expect(badId.stderr).toContain("the trust domain must be lowercase");
      const badTtl = await forel([
        "ca",
        "issue",
        "--dir",
        "pki",
        "--spiffe-id",
        "spiffe://forelead/x",
        "--ttl",
        "soon",
        "--out",
        "x",
      ]);
      expect(badTtl.code).toBe(1);
      expect(badTtl.stderr).toContain('"soon" is not a duration');
      const backdated = await forel([
        "ca",
        "issue",
        "--dir",
        "pki",
        "--spiffe-id",
        "spiffe://forelead/x",
        "--ttl",
        "60s",
        "--out",
        "x",
      ]);
      expect(backdated.code).toBe(1);
      expect(backdated.stderr).toContain(
        "--ttl 60s is not longer than the 60 s the certificate is backdated for clock skew",
      );
      // The server's maximum (24 h by default) is the writer's too: 720h would be refused on use.
      const tooLong = await forel([
        "ca",
        "issue",
        "--dir",
        "pki",
        "--spiffe-id",
        "spiffe://forelead/x",
        "--ttl",
        "720h",
        "--out",
        "x",
      ]);
      expect(tooLong.code).toBe(1);
      expect(tooLong.stderr).toContain("lifetime is 720h, over the 24h maximum");
      await expect(stat(join(dir, "x.pem"))).rejects.toThrow(/ENOENT/);
    },
  );

  it.each([
    [["--listen", "nowhere"], '--listen "nowhere" is not host:port'],
    [["--lease-seconds", "0"], "--lease-seconds must be a whole number from 5 to 3600"],
    [["--tls-cert", "missing.pem"], "--tls-cert, --tls-key and --client-ca go together"],
    // Relative paths are resolved where the command starts (an absolute path in the error).
    [
      [
        "--tls-cert",
        "missing.pem",
        "--tls-key",
        "missing-key.pem",
        "--client-ca",
        "missing-ca.pem",
      ],
      "cannot read --tls-cert /",
    ],
    [
      ["--database", "postgres://nobody@127.0.0.1:1/none", "--secrets-key", "pg-secrets.key"],
      "cannot reach the database at postgres://nobody@127.0.0.1:1/none",
    ],
    [
      ["--database", "postgres://nobody@127.0.0.1:1/none"],
      "a postgres:// database needs --secrets-key FILE",
    ],
    [
      ["--database", "postgres://nobody@127.0.0.1:1/none", "--secrets-key", "absent.key"],
      "the secrets key file /",
    ],
    [["--admin", "not-a-spiffe-id"], "is not a valid SPIFFE ID"],
    [["--bogus"], "unknown option '--bogus'"],
    [["--sso-group", "ops=read"], "--sso-group needs --sso-issuer and --sso-groups-claim"],
    [
      ["--sso-issuer", "http://login.example.com", "--sso-client-id", "d"],
      "a provider must be served over https",
    ],
    [["--sso-issuer", "https://login.example.com"], "--sso-issuer needs --sso-client-id"],
    [
      [
        "--grant",
        "spiffe://forelead/services/dash=delegate",
        "--grant",
        "spiffe://forelead/services/dash=read",
      ],
      "is granted delegate and another role",
    ],
  ])("serve %j refuses to start with a clear message", async (args, message) => {
    const result = await forel([
      "serve",
      "--listen",
      "127.0.0.1:0",
      "--certs-dir",
      "pki",
      "--database",
      join(dir, "db-refusals"),
      ...args,
    ]);
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain(message);
  });

  it("serve refuses a key that does not match its certificate", async () => {
    const pki = await createTestPki();
    const other = await createTestPki();
    await writeFile(join(dir, "s.pem"), pki.server.certPem);
    await writeFile(join(dir, "wrong-key.pem"), other.server.keyPem);
    await writeFile(join(dir, "ca.pem"), pki.ca.certPem);
    const result = await forel([
      "serve",
      "--listen",
      "127.0.0.1:0",
      "--tls-cert",
      "s.pem",
      "--tls-key",
      "wrong-key.pem",
      "--client-ca",
      "ca.pem",
      "--database",
      join(dir, "db-key"),
    ]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("the TLS certificate and key cannot be used together");
  });

  it(
    "serve logs one line when it listens, serves, and exits 0 on SIGTERM",
    { timeout: 90_000 },
    async () => {
      await forel(["ca", "init", "--dir", "pki-serve"]);
      await forel([
        "ca",
        "issue",
        "--dir",
        "pki-serve",
        "--spiffe-id",
        "spiffe://forelead/runners/r1/workspaces/w1",
        "--out",
        "serve-r1",
      ]);
      const child = spawn(
        process.execPath,
        [
          forelead,
          "serve",
          "--listen",
          "127.0.0.1:0",
          "--metrics-listen",
          "127.0.0.1:0",
          "--certs-dir",
          "pki-serve",
          "--database",
          join(dir, "db-serve"),
        ],
        { cwd: dir },
      );
      let out = "";
      child.stdout.on("data", (d) => (out += d));
      const url = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`no listen line within 30 s: ${out}`)),
          30_000,
        );
        child.stdout.on("data", () => {
          const m = /serving (https:\/\/\S+)/.exec(out);
          if (m) {
            clearTimeout(timer);
            resolve(m[1]!);
          }
        });
        child.once("exit", (code) => reject(new Error(`serve exited ${code}: ${out}`)));
      });
      const ca = await readFile(join(dir, "pki-serve/ca.pem"), "utf8");
      const client = createRestClient(url, ca, {
        certPem: await readFile(join(dir, "serve-r1.pem"), "utf8"),
        keyPem: await readFile(join(dir, "serve-r1-key.pem"), "utf8"),
      });
      expect((await client.request("GET", "/v1/runner/clock")).status).toBe(200);
      const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
      const t0 = Date.now();
      child.kill("SIGTERM");
      expect(await exited).toBe(0);
      console.log(`serve exited ${Date.now() - t0} ms after SIGTERM`);
      await client.close();
      expect(out.split("\n").filter((l) => l.includes("serving"))).toHaveLength(1);
    },
  );
});

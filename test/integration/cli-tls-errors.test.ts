// The CLI's connection failures as an operator meets them: `doctor` finds the server the way every
// command does, and a wrong key, a wrong CA or an expired certificate is named with its file and
// the fix, never as OpenSSL's text tagged [internal].
import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { useControlPlane } from "../support/fixture.js";
import { createTestPki } from "../support/pki.js";

const run = promisify(execFile);
const forelead = join(process.cwd(), "bin/forelead.js");
const cp = useControlPlane();
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "forelead-cli-tls-"));
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

interface Ran {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `forelead ...args` with only `env`'s FORELEAD_* settings and a home without config. */
async function forelead_(args: string[], env: Record<string, string> = {}): Promise<Ran> {
  const clean = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.startsWith("FORELEAD_")),
  );
  try {
    const { stdout, stderr } = await run(process.execPath, [forelead, ...args], {
      cwd: dir,
      env: { ...clean, HOME: dir, XDG_CONFIG_HOME: join(dir, "xdg"), ...env },
      timeout: 60_000,
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: e.code ?? -1, stdout: e.stdout ?? "", stderr: e.stderr ?? "" };
  }
}

/** Writes PEM files under `dir` and returns their paths. */
async function files(name: string, pems: { ca: string; cert: string; key: string }) {
  const paths = {
    ca: join(dir, `${name}-ca.pem`),
    cert: join(dir, `${name}.pem`),
    key: join(dir, `${name}-key.pem`),
  };
  await writeFile(paths.ca, pems.ca);
  await writeFile(paths.cert, pems.cert);
  await writeFile(paths.key, pems.key, { mode: 0o600 });
  return paths;
}

describe("the CLI's connection failures", () => {
  it("doctor without --server asks the server of FORELEAD_SERVER, like every command", async () => {
    const admin = await cp.pki.service("test-admin");
    const f = await files("good", {
      ca: cp.pki.ca.certPem,
      cert: admin.certPem,
      key: admin.keyPem,
    });
    const ran = await forelead_(["doctor"], {
      FORELEAD_SERVER: cp.url,
      FORELEAD_CA: f.ca,
      FORELEAD_CERT: f.cert,
      FORELEAD_KEY: f.key,
    });
    expect(ran.stdout).not.toContain("undefined");
    expect(ran.stdout).toMatch(/^OK +database/m);
    const down = await forelead_(["doctor"], {
      FORELEAD_SERVER: "https://127.0.0.1:1",
      FORELEAD_CA: f.ca,
      FORELEAD_CERT: f.cert,
      FORELEAD_KEY: f.key,
    });
    expect(down.code).toBe(1);
    expect(down.stdout).toContain("https://127.0.0.1:1 cannot be asked");
  });

  it("doctor with an expired client certificate says so, not that the server cannot be asked", async () => {
    const expired = await cp.pki.service("test-admin", {
      notBefore: new Date(Date.now() - 3 * 3600_000),
      notAfter: new Date(Date.now() - 3600_000),
    });
    const f = await files("expired", {
      ca: cp.pki.ca.certPem,
      cert: expired.certPem,
      key: expired.keyPem,
    });
    const ran = await forelead_([
      "doctor",
      "--server",
      cp.url,
      "--ca",
      f.ca,
      "--cert",
      f.cert,
      "--key",
      f.key,
    ]);
    expect(ran.code).toBe(1);
    expect(ran.stdout).toMatch(/FAIL +client certificate +the client certificate .*expired\.pem/);
    expect(ran.stdout).not.toContain("cannot be asked");
  });

  it("a key that is not the certificate's, a CA that did not sign the server, and an expired certificate are named with the file and the fix", async () => {
    const admin = await cp.pki.service("test-admin");
    const other = await createTestPki();
    const stranger = await other.service("test-admin");
    const expired = await cp.pki.service("test-admin", {
      notBefore: new Date(Date.now() - 3 * 3600_000),
      notAfter: new Date(Date.now() - 3600_000),
    });
    const wrongKey = await files("wrong-key", {
      ca: cp.pki.ca.certPem,
      cert: admin.certPem,
      key: stranger.keyPem,
    });
    const wrongCa = await files("wrong-ca", {
      ca: other.ca.certPem,
      cert: admin.certPem,
      key: admin.keyPem,
    });
    const old = await files("old", {
      ca: cp.pki.ca.certPem,
      cert: expired.certPem,
      key: expired.keyPem,
    });
    const status = (f: { ca: string; cert: string; key: string }) =>
      forelead_(["status", "--server", cp.url, "--ca", f.ca, "--cert", f.cert, "--key", f.key]);

    const keyRan = await status(wrongKey);
    expect(keyRan.code).toBe(1);
    expect(keyRan.stderr).not.toMatch(/\[internal\]|routines/);
    expect(keyRan.stderr).toContain(
      `the key ${wrongKey.key} (flag --key) is not the key of the certificate ${wrongKey.cert} ` +
        `(flag --cert)`,
    );

    const caRan = await status(wrongCa);
    expect(caRan.code).toBe(1);
    expect(caRan.stderr).not.toMatch(/\[internal\]|routines/);
    expect(caRan.stderr).toContain(
      `the server's certificate at ${cp.url} is not signed by the CA in ${wrongCa.ca} (flag --ca)`,
    );

    const oldRan = await status(old);
    expect(oldRan.code).toBe(1);
    expect(oldRan.stderr).not.toMatch(/\[internal\]|routines/);
    expect(oldRan.stderr).toMatch(
      new RegExp(`the client certificate ${old.cert} \\(flag --cert\\) expired at `),
    );
  });
});

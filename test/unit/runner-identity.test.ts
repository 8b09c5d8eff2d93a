import { mkdtemp, readdir, rename, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { statusOf } from "../../src/identity/certificates.js";
import { createIssuer } from "../../src/identity/issuer.js";
import { verifyCsr } from "../../src/identity/csr.js";
import { parseTrustBundle } from "../../src/identity/certificate-policy.js";
import { createKeyAndCsr } from "../../src/runner/identity/enrollment.js";
import { renewalDelayMs } from "../../src/runner/identity/keeper.js";
import type { RunnerIdentity } from "../../src/runner/identity/runner-identity.js";
import { loadIdentity, saveIdentity } from "../../src/runner/identity/state-dir.js";
import { createTestPki, type TestPki } from "../support/pki.js";

const HOUR = 3_600_000;
let pki: TestPki;
let scratch: string;

beforeAll(async () => {
  pki = await createTestPki();
  scratch = await mkdtemp(join(tmpdir(), "forelead-runner-identity-"));
});
afterAll(async () => rm(scratch, { recursive: true, force: true }));

/** An identity signed by the test CA over a key made like the runner makes it. */
async function identity(runnerId: string): Promise<RunnerIdentity> {
  const { keyPem, csrPem } = await createKeyAndCsr(runnerId);
  const issuer = await createIssuer(
    { certPem: pki.ca.certPem, keyPem: pki.ca.keyPem },
    parseTrustBundle(pki.ca.certPem, "ca"),
    24 * HOUR,
  );
  const signed = await issuer.sign(
    `spiffe://forelead/runners/${runnerId}/workspaces/w1`,
    await verifyCsr(csrPem),
  );
  const dir = join(scratch, `make-${runnerId}-${Math.random().toString(36).slice(2)}`);
  await saveIdentity(dir, {
    certPem: signed.chainPem,
    keyPem,
    spiffeId: signed.spiffeId,
    runnerId,
    workspaceId: "w1",
    serialHex: signed.serialHex,
    notBefore: signed.notBefore,
    notAfter: signed.notAfter,
  });
  return loadIdentity(dir);
}

describe("renewal timing", () => {
  it("is half the lifetime, within ±10 % jitter", () => {
    const notBefore = new Date(0);
    const notAfter = new Date(24 * HOUR);
    expect(renewalDelayMs({ notBefore, notAfter }, 0, () => 0.5)).toBe(12 * HOUR);
    expect(renewalDelayMs({ notBefore, notAfter }, 0, () => 0)).toBeCloseTo(0.4 * 24 * HOUR);
    expect(renewalDelayMs({ notBefore, notAfter }, 0, () => 0.999999)).toBeCloseTo(
      0.6 * 24 * HOUR,
      -2,
    );
    // overdue: at once
    expect(renewalDelayMs({ notBefore, notAfter }, 20 * HOUR, () => 0.5)).toBe(0);
  });

  it("a fleet enrolled together spreads its renewals", () => {
    const delays = Array.from({ length: 200 }, () =>
      renewalDelayMs({ notBefore: new Date(0), notAfter: new Date(24 * HOUR) }, 0),
    );
    expect(Math.min(...delays)).toBeGreaterThanOrEqual(0.4 * 24 * HOUR);
    expect(Math.max(...delays)).toBeLessThanOrEqual(0.6 * 24 * HOUR);
    expect(new Set(delays.map((d) => Math.round(d / 60_000))).size).toBeGreaterThan(50);
  });
});

describe("the state directory", () => {
  it("holds the key and certificate 0600 in a 0700 directory, and nothing else after a save", async () => {
    const dir = join(scratch, "fresh");
    const id = await identity("s1");
    await saveIdentity(dir, id);
    expect((await stat(dir)).mode & 0o777).toBe(0o700);
    expect((await readdir(dir)).sort()).toEqual(["cert.pem", "key.pem"]);
    for (const f of ["cert.pem", "key.pem"])
      expect((await stat(join(dir, f))).mode & 0o777).toBe(0o600);
    expect(await loadIdentity(dir)).toMatchObject({
      spiffeId: "spiffe://forelead/runners/s1/workspaces/w1",
      runnerId: "s1",
      workspaceId: "w1",
      serialHex: id.serialHex,
    });
  });

  it(
    "a crash between the key and the certificate renames is finished on " +
      "load; one before them keeps the old pair",
    async () => {
      const dir = join(scratch, "crash");
      const [old, next] = [await identity("s2"), await identity("s2")];
      await saveIdentity(dir, old);
      // Crash after the key was renamed: key.pem is new, cert.pem old, cert.pem.next waiting.
      await writeFile(join(dir, "cert.pem.next"), next.certPem, { mode: 0o600 });
      await writeFile(join(dir, "key.pem.next"), next.keyPem, { mode: 0o600 });
      await rename(join(dir, "key.pem.next"), join(dir, "key.pem"));
      expect((await loadIdentity(dir)).serialHex).toBe(next.serialHex);
      expect((await readdir(dir)).sort()).toEqual(["cert.pem", "key.pem"]);

      // Crash before any rename: both .next files exist; the current pair is kept and the strays
      // removed.
      const third = await identity("s2");
      await writeFile(join(dir, "cert.pem.next"), third.certPem, { mode: 0o600 });
      await writeFile(join(dir, "key.pem.next"), third.keyPem, { mode: 0o600 });
      expect((await loadIdentity(dir)).serialHex).toBe(next.serialHex);
      expect((await readdir(dir)).sort()).toEqual(["cert.pem", "key.pem"]);
    },
  );

  it("refuses a key that does not belong to the certificate, and an empty directory, saying what to do", async () => {
    const dir = join(scratch, "mismatch");
    const [a, b] = [await identity("s3"), await identity("s3")];
    await saveIdentity(dir, { ...a, keyPem: b.keyPem });
    await expect(loadIdentity(dir)).rejects.toThrow(
      /key\.pem does not belong to .*cert\.pem; enroll again/,
    );
    await expect(loadIdentity(join(scratch, "empty"))).rejects.toThrow(
      "holds no runner identity (cert.pem and key.pem); run `forelead runner enroll",
    );
  });
});

describe("certificate status", () => {
  const at = (h: number) => new Date(h * HOUR);
  const cert = (nowH: number, extra: Partial<{ newest: boolean; retired: boolean }> = {}) => ({
    not_before: at(0),
    not_after: at(24),
    newest: true,
    retired: false,
    now: at(nowH),
    ...extra,
  });
  it(
    "current, then expiring soon, renewal overdue past 3/4 of the lifetime, " +
      "expired; superseded and retired first",
    () => {
      expect(statusOf(cert(1), 2 * HOUR)).toBe("current");
      expect(statusOf(cert(1), 24 * HOUR)).toBe("expiring_soon");
      expect(statusOf(cert(17.9), 2 * HOUR)).toBe("current");
      expect(statusOf(cert(18), 2 * HOUR)).toBe("renewal_overdue");
      expect(statusOf(cert(24), 2 * HOUR)).toBe("expired");
      expect(statusOf(cert(30, { newest: false }), 2 * HOUR)).toBe("superseded");
      expect(statusOf(cert(1, { retired: true }), 2 * HOUR)).toBe("retired");
    },
  );
});

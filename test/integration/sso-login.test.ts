import { spawn } from "node:child_process";
import { mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { issueClientCertificate } from "../../src/identity/ca.js";
import { parseRoleGrant } from "../../src/identity/roles.js";
import { foreleadBin } from "../support/cli-dir.js";
import { createRestClient } from "../support/clients.js";
import { createKeyAndCsr } from "../../src/runner/identity/enrollment.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { createTestPki } from "../support/pki.js";
import {
  followSignIn,
  startTestOidcProvider,
  testSigningKey,
  type TestOidcProvider,
} from "../support/oidc.js";

const alice = "spiffe://forelead/users/_YWxpY2VAZXhhbXBsZS5jb20";
const dashboardClient = { clientId: "dashboard", secret: "dashboard-secret" };
let provider: TestOidcProvider;
const cp = useControlPlane(async () => {
  provider = await startTestOidcProvider({
    clients: [{ clientId: "forelead-cli" }, dashboardClient],
    key: await testSigningKey(),
  });
  const pki = await createTestPki();
  return {
    pki,
    issuer: { certPem: pki.ca.certPem, keyPem: pki.ca.keyPem },
    grants: [parseRoleGrant(`${alice}=read:w1`)],
    sso: { issuer: provider.issuer, cliClientId: "forelead-cli", identityClaim: "email" },
  };
});
const { admin } = cp;
let home = "";
afterAll(async () => {
  await provider?.close();
  if (home) await rm(home, { recursive: true, force: true });
});

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `forelead args` as the user whose home is `home`; `onOutput` sees stdout as it comes. */
function forel(args: readonly string[], onOutput?: (text: string) => void): Promise<Run> {
  const child = spawn(process.execPath, [foreleadBin, ...args], {
    cwd: home,
    env: { ...process.env, HOME: home, XDG_CONFIG_HOME: join(home, ".config") },
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => {
    stdout += d.toString();
    onOutput?.(stdout);
  });
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  return new Promise((done) => child.on("close", (code) => done({ code, stdout, stderr })));
}

const server = () => ["--server", cp.url, "--ca", "ca.pem"];

describe(`forelead login (${databaseKind})`, () => {
  it(
    "signs a person in at the provider, stores a 0600 certificate, and jobs list then " +
      "works as that person without a certificate flag; logout deletes it",
    async () => {
      home = await mkdtemp(join(tmpdir(), "forelead-login-"));
      await writeFile(join(home, "ca.pem"), cp.pki.ca.certPem);
      const w1 = (await admin.enqueue({ workspaceId: "w1" })).json.job.id as string;
      const w2 = (await admin.enqueue({ workspaceId: "w2" })).json.job.id as string;

      let browsing: Promise<void> | undefined;
      const login = await forel(
        [
          "login",
          ...server(),
          "--sso-issuer",
          provider.issuer,
          "--client-id",
          "forelead-cli",
          "--scope",
          "openid email",
        ],
        (out) => {
          const url = /https?:\/\/\S+\/auth\?\S+/.exec(out)?.[0];
          if (!url || browsing) return;
          // The person's browser: the provider's pages, then the CLI's loopback redirect.
          browsing = followSignIn(url, "alice", (u) => !u.startsWith(provider.issuer)).then(
            async (back) => void (await fetch(back)).text(),
          );
        },
      );
      await browsing;
      expect(login.code, login.stderr).toBe(0);
      expect(login.stdout).toContain(`signed in as ${alice} ("alice@example.com")`);
      const cert = join(home, ".config/forelead/login.pem");
      for (const file of [cert, join(home, ".config/forelead/login-key.pem")])
        expect((await stat(file)).mode & 0o777, file).toBe(0o600);

      const listed = await forel(["jobs", "list", ...server(), "--json"]);
      expect(listed.code, listed.stderr).toBe(0);
      expect(listed.stdout).toContain(w1);
      expect(listed.stdout).not.toContain(w2);

      const logout = await forel(["logout"]);
      expect(logout.code).toBe(0);
      await expect(stat(cert)).rejects.toThrow(/ENOENT/);
      const after = await forel(["jobs", "list", ...server()]);
      expect(after.code).toBe(1);
    },
  );

  it("--device: the person completes the printed URL and code at the provider; the CLI gets its certificate", async () => {
    // A home of its own, for this test only; the others' is put back after.
    const previous = home;
    home = await mkdtemp(join(tmpdir(), "forelead-login-device-"));
    try {
      await writeFile(join(home, "ca.pem"), cp.pki.ca.certPem);
      const w1 = (await admin.enqueue({ workspaceId: "w1" })).json.job.id as string;
      let browsing: Promise<URL> | undefined;
      let printed: { url: string; code: string } | undefined;
      const login = await forel(
        [
          "login",
          "--device",
          ...server(),
          "--sso-issuer",
          provider.issuer,
          "--client-id",
          "forelead-cli",
          "--scope",
          "openid email",
        ],
        (out) => {
          const shown = /open (\S+) and enter the code (\S+)/.exec(out);
          if (!shown || browsing) return;
          printed = { url: shown[1]!, code: shown[2]! };
          // Another device's browser: the provider's device page with the code, its login and
          // consent, up to its success page.
          browsing = followSignIn(
            printed.url,
            "alice",
            () => false,
            (html) => html.includes("Sign-in Success"),
          );
        },
      );
      expect(printed, login.stdout + login.stderr).toBeDefined();
      expect(new URL(printed!.url).origin).toBe(provider.issuer);
      expect(new URL(printed!.url).searchParams.get("user_code")).toBe(printed!.code);
      await browsing;
      expect(login.code, login.stderr).toBe(0);
      expect(login.stdout).toContain(`signed in as ${alice} ("alice@example.com")`);
      const listed = await forel(["jobs", "list", ...server(), "--json"]);
      expect(listed.code, listed.stderr).toBe(0);
      expect(listed.stdout).toContain(w1);
      expect((await forel(["logout"])).code).toBe(0);
    } finally {
      await rm(home, { recursive: true, force: true });
      home = previous;
    }
  });

  it("an expired sign-in is refused before any call, saying to run forelead login", async () => {
    const dir = join(home, ".config/forelead");
    const issued = await issueClientCertificate(cp.pki.ca, {
      uris: [alice],
      notBefore: new Date(Date.now() - 3 * 3600_000),
      notAfter: new Date(Date.now() - 3600_000),
    });
    await writeFile(join(dir, "login.pem"), issued.certPem, { mode: 0o600 });
    await writeFile(join(dir, "login-key.pem"), issued.keyPem, { mode: 0o600 });
    const listed = await forel(["jobs", "list", ...server()]);
    expect(listed.code).toBe(1);
    expect(listed.stderr).toContain("your sign-in expired at");
    expect(listed.stderr).toContain("run forelead login again");
  });

  it("an ID token for the dashboard's client gets no certificate: 401, audited", async () => {
    const idToken = await provider.signIn(dashboardClient, "alice", "n1");
    const certless = createRestClient(cp.url, cp.pki.ca.certPem, undefined);
    try {
      const reply = await certless.request("POST", "/v1/login", {
        apiVersion: "v1",
        idToken,
        nonce: "n1",
        csr: (await createKeyAndCsr("x")).csrPem,
      });
      expect(reply.status).toBe(401);
      expect(reply.json.message).toBe(
        'sign-in refused: the ID token is for audience "dashboard", not for this client ' +
          "(forelead-cli)",
      );
    } finally {
      await certless.close();
    }
    const audit = await admin.rest.request("GET", "/v1/admin/audit?kind=action&decision=deny");
    const record = (audit.json.records as Record<string, string>[]).find(
      (r) => r.action === "certificate.issue" && r.route === "POST /v1/login",
    );
    expect(record?.reason).toContain('for audience "dashboard"');
    expect(JSON.stringify(audit.json)).not.toContain(idToken);
  });
});

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sql } from "kysely";
import { parseGroupGrant, parseRoleGrant } from "../../src/identity/roles.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane, useServiceClients } from "../support/fixture.js";
import type { RestClient } from "../support/clients.js";
import {
  startTestOidcProvider,
  testSigningKey,
  type TestOidcClient,
  type TestOidcProvider,
} from "../support/oidc.js";

const dashboardClient: TestOidcClient = { clientId: "dashboard", secret: "dashboard-secret" };
const otherClient: TestOidcClient = { clientId: "other-app", secret: "other-secret" };
const clients = [dashboardClient, otherClient, { clientId: "forelead-cli" }];
const service = (name: string) => `spiffe://forelead/services/${name}`;
// The documented rule: an email is not a SPIFFE segment, so it is "_" + base64url of its bytes.
const alice = "spiffe://forelead/users/_YWxpY2VAZXhhbXBsZS5jb20";
const bob = "spiffe://forelead/users/_Ym9iQGV4YW1wbGUuY29t";

let provider: TestOidcProvider;
let elsewhere: TestOidcProvider;
const cp = useControlPlane(async () => {
  const key = await testSigningKey();
  provider = await startTestOidcProvider({ clients, key, groups: { bob: ["w2-team"] } });
  // Another provider signing with the same key: its tokens differ only by their issuer.
  elsewhere = await startTestOidcProvider({ clients, key });
  return {
    grants: [
      parseRoleGrant(`${service("dashboard")}=delegate`),
      parseRoleGrant(`${service("dashboard2")}=delegate`),
      parseRoleGrant(`${alice}=read:w1`),
    ],
    groupGrants: [parseGroupGrant("w2-team=read:w2")],
    sso: {
      issuer: provider.issuer,
      clientId: dashboardClient.clientId,
      cliClientId: "forelead-cli",
      identityClaim: "email",
      groupsClaim: "groups",
    },
  };
});
afterAll(async () => {
  await provider?.close();
  await elsewhere?.close();
});
const { admin } = cp;
const client = useServiceClients(cp);

let dashboard: RestClient;
let w1Job = "";
let w2Job = "";
beforeAll(async () => {
  dashboard = await client("dashboard");
  w1Job = (await admin.enqueue({ workspaceId: "w1" })).json.job.id as string;
  w2Job = (await admin.enqueue({ workspaceId: "w2" })).json.job.id as string;
});

const createSession = (as: RestClient, idToken: string, nonce: string) =>
  as.request("POST", "/v1/admin/sessions", { apiVersion: "v1", idToken, nonce });
const onBehalf = (credential: string) => ({ "forelead-on-behalf-of": credential });
const sessionCount = async () =>
  (
    await sql<{ n: number }>`select count(*)::int as n from person_sessions`.execute(
      cp.plane.store.db,
    )
  ).rows[0]!.n;
async function audit(query: string): Promise<Record<string, string>[]> {
  const reply = await admin.rest.request("GET", `/v1/admin/audit?pageSize=50&${query}`);
  expect(reply.status, reply.text).toBe(200);
  return reply.json.records ?? [];
}

describe(`people signed in by single sign-on, through a delegate (${databaseKind})`, () => {
  it(
    "a delegate with a read:w1 person's session reads w1 as that person, is refused " +
      "cancel and w2, and the audit names the person, its claim and the delegate",
    async () => {
      const idToken = await provider.signIn(dashboardClient, "alice", "n-alice");
      const opened = await createSession(dashboard, idToken, "n-alice");
      expect(opened.status, opened.text).toBe(200);
      expect(opened.json.person).toBe(alice);
      expect(opened.json.personClaim).toBe("alice@example.com");
      const credential = opened.json.sessionCredential as string;
      expect(credential).toMatch(/^fps_/);
      const as = onBehalf(credential);

      const read = await dashboard.request("GET", `/v1/admin/jobs/${w1Job}`, undefined, as);
      expect(read.status, read.text).toBe(200);
      const cancel = await dashboard.request(
        "POST",
        `/v1/admin/jobs/${w1Job}/cancel`,
        { apiVersion: "v1" },
        as,
      );
      expect(cancel.status, cancel.text).toBe(403);
      expect(cancel.json.message).toContain(alice);
      const other = await dashboard.request("GET", `/v1/admin/jobs/${w2Job}`, undefined, as);
      expect(other.status).toBe(403);
      expect(other.json.message).toContain(`--grant ${alice}=read:w2`);
      const status = await dashboard.request("GET", "/v1/admin/status", undefined, as);
      expect(status.status).toBe(403);

      const records = await audit(`spiffeId=${encodeURIComponent(alice)}`);
      const allowed = records.find((r) => r.decision === "allow" && r.kind === "decision");
      expect(allowed).toMatchObject({
        delegate: service("dashboard"),
        personClaim: "alice@example.com",
        remoteAddress: "127.0.0.1",
      });
      expect(allowed!.reason).toContain(`read ${alice} in workspace "w1"`);
      expect(
        records.some((r) => r.decision === "deny" && r.delegate === service("dashboard")),
      ).toBe(true);
      const created = (await audit("kind=action")).find((r) => r.action === "session.create");
      expect(created?.decision).toBe("allow");
      // Neither the ID token nor the credential is in any record.
      const all = JSON.stringify(await audit(""));
      expect(all).not.toContain(credential);
      expect(all).not.toContain(idToken);
    },
  );

  it("a group in the ID token maps to its role: bob (w2-team) reads w2, not w1", async () => {
    const idToken = await provider.signIn(dashboardClient, "bob", "n-bob");
    const opened = await createSession(dashboard, idToken, "n-bob");
    expect(opened.status, opened.text).toBe(200);
    expect(opened.json.person).toBe(bob);
    const as = onBehalf(opened.json.sessionCredential as string);
    expect((await dashboard.request("GET", `/v1/admin/jobs/${w2Job}`, undefined, as)).status).toBe(
      200,
    );
    expect((await dashboard.request("GET", `/v1/admin/jobs/${w1Job}`, undefined, as)).status).toBe(
      403,
    );
  });

  it(
    "an ID token for another audience, from another issuer, expired or with another " +
      "nonce is refused naming why, audited, and opens nothing",
    async () => {
      const before = await sessionCount();
      const cases: [string, () => Promise<[string, string]>, string][] = [
        [
          "another audience",
          async () => [await provider.signIn(otherClient, "alice", "n1"), "n1"],
          'the ID token is for audience "other-app", not for this client (dashboard)',
        ],
        [
          "another issuer",
          async () => [await elsewhere.signIn(dashboardClient, "alice", "n2"), "n2"],
          `the ID token was issued by "${elsewhere.issuer}", not by the sign-in provider ` +
            provider.issuer,
        ],
        [
          "another nonce",
          async () => [await provider.signIn(dashboardClient, "alice", "n3"), "n-other"],
          "the ID token's nonce is not the one sent with this sign-in; sign in again",
        ],
        [
          "expired",
          async () => {
            provider.setIdTokenTtl(1);
            try {
              const token = await provider.signIn(dashboardClient, "alice", "n4");
              const exp = JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString())
                .exp as number;
              // Waits until the token's own expiry has passed; nothing here measures time.
              while (Date.now() / 1000 <= exp) await new Promise((r) => setTimeout(r, 200));
              return [token, "n4"];
            } finally {
              provider.setIdTokenTtl(3600);
            }
          },
          "the ID token has expired; sign in again",
        ],
      ];
      for (const [name, token, message] of cases) {
        const [idToken, nonce] = await token();
        const refused = await createSession(dashboard, idToken, nonce);
        expect(refused.status, name).toBe(401);
        expect(refused.json.message, name).toBe(`sign-in refused: ${message}`);
        const record = (await audit("kind=action&decision=deny")).find(
          (r) => r.action === "session.create" && r.reason?.includes(message),
        );
        expect(record, name).toBeDefined();
        expect(JSON.stringify(record)).not.toContain(idToken);
      }
      expect(await sessionCount()).toBe(before);
    },
  );

  it(
    "a credential replayed after EndSession, one of another delegate, and a made-up one " +
      "are refused and audited",
    async () => {
      const idToken = await provider.signIn(dashboardClient, "alice", "n-end");
      const credential = (await createSession(dashboard, idToken, "n-end")).json
        .sessionCredential as string;
      const as = onBehalf(credential);
      const path = `/v1/admin/jobs/${w1Job}`;
      expect((await dashboard.request("GET", path, undefined, as)).status).toBe(200);

      const other = await client("dashboard2");
      const stolen = await other.request("GET", path, undefined, as);
      expect(stolen.status).toBe(401);
      expect(stolen.json.message).toContain(
        `the session of ${alice} belongs to another delegate (${service("dashboard")})`,
      );

      const ended = await dashboard.request("POST", "/v1/admin/sessions/end", {
        apiVersion: "v1",
        sessionCredential: credential,
      });
      expect(ended.status, ended.text).toBe(200);
      const replayed = await dashboard.request("GET", path, undefined, as);
      expect(replayed.status).toBe(401);
      expect(replayed.json.message).toContain(`the session of ${alice} ended at`);
      expect(replayed.json.message).not.toContain(credential);

      const madeUp = await dashboard.request(
        "GET",
        path,
        undefined,
        onBehalf(`fps_${"A".repeat(43)}`),
      );
      expect(madeUp.status).toBe(401);
      expect(madeUp.json.message).toContain("the session credential is unknown");
      const denied = await audit(
        `decision=deny&spiffeId=${encodeURIComponent(service("dashboard"))}`,
      );
      expect(denied.some((r) => r.reason?.includes("ended at"))).toBe(true);
    },
  );

  it(
    "a delegate without a session can call nothing but SessionService; no other identity " +
      "may open a session",
    async () => {
      for (const [method, path] of [
        ["GET", `/v1/admin/jobs/${w1Job}`],
        ["GET", "/v1/admin/jobs"],
        ["GET", "/v1/admin/status"],
        ["POST", `/v1/admin/jobs/${w1Job}/cancel`],
      ] as const) {
        const reply = await dashboard.request(
          method,
          path,
          method === "POST" ? { apiVersion: "v1" } : undefined,
        );
        expect(reply.status, path).toBe(403);
        expect(reply.json.message, path).toContain(
          `${service("dashboard")} is a delegate: it has no power of its own`,
        );
      }
      const idToken = await provider.signIn(dashboardClient, "alice", "n-admin");
      const byAdmin = await admin.rest.request("POST", "/v1/admin/sessions", {
        apiVersion: "v1",
        idToken,
        nonce: "n-admin",
      });
      expect(byAdmin.status).toBe(403);
      expect(byAdmin.json.message).toContain("CreateSession is for delegates");
    },
  );
});

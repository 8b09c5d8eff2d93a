// Job secrets (issue 16, items 1 and 2): a write-only channel. A job's
// secrets are delivered only in the claim reply that issues its lease, are
// never in a view, listing, event, audit record, error reply or log line,
// are stored sealed (AES-256-GCM, bound to their row) and are erased when
// the job settles. Repository credentials are sealed the same way; a start
// with the wrong key is refused naming the key file, and a rotation
// re-encrypts every row.
import { readdir, readFile, rm, mkdtemp, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sql } from "kysely";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { WebhookService } from "../../gen/forelead/admin/v1/webhooks_pb.js";
import { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { sealedKeyId } from "../../src/secrets/box.js";
import { readOrCreateSecretsKeyFile } from "../../src/secrets/key-file.js";
import type { SecretsKeys } from "../../src/secrets/keys.js";
import { registeredRunner } from "../support/actors.js";
import { createTestClient } from "../support/clients.js";
import { startTestControlPlane, type TestControlPlane } from "../support/control-plane.js";
import { createTestDatabase, databaseKind, type TestDatabase } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

const token = "ghp_Secret-Token-4711-abcdefghij";
const fileContent = "-----BEGIN KEY-----\nsecret-file-body-0815\n-----END KEY-----\n";
const values = [token, "secret-file-body-0815"];

/** Every console line the in-process control plane writes while a test runs. */
const logged: string[] = [];
for (const level of ["log", "error", "warn", "info"] as const) {
  const original = console[level].bind(console);
  vi.spyOn(console, level).mockImplementation((...args: unknown[]) => {
    logged.push(
      args
        .map((a) =>
          a instanceof Error
            ? `${a.message} ${a.stack}`
            : typeof a === "string"
              ? a
              : JSON.stringify(a),
        )
        .join(" "),
    );
    original(...args);
  });
}

function expectNoValue(what: string, text: string): void {
  for (const v of values) expect(text.includes(v), `${what} holds a secret value`).toBe(false);
}

describe(`job secrets (${databaseKind})`, () => {
  const cp = useControlPlane();
  const { admin } = cp;
  let seq = 0;
  const ws = () => `sec${++seq}`;

  afterEach(() => {
    expectNoValue("a server log line", logged.join("\n"));
  });

  it(
    "over REST: the claim reply carries them, renew does not, views list " +
      "names only, the rows are sealed and erased at settle",
    async () => {
      const workspaceId = ws();
      const runner = await registeredRunner(cp, "r1", workspaceId);
      const enq = await admin.enqueue({
        workspaceId,
        secrets: { API_TOKEN: token },
        secretFiles: { "deploy.key": fileContent },
        idempotencyKey: "k1",
      });
      expect(enq.status, enq.text).toBe(200);
      expectNoValue("the enqueue reply", enq.text);
      expect(enq.json.job).toMatchObject({
        secretNames: ["API_TOKEN"],
        secretFileNames: ["deploy.key"],
      });
      const jobId: string = enq.json.job.id;

      // Stored sealed: no plain value in jobs or job_secrets, each sealed row under the current key.
      const db = cp.plane.store.db;
      expectNoValue(
        "the jobs row",
        JSON.stringify(await db.selectFrom("jobs").selectAll().where("id", "=", jobId).execute()),
      );
      const sealed = await db
        .selectFrom("job_secrets")
        .selectAll()
        .where("job_id", "=", jobId)
        .execute();
      expect(sealed.map((r) => `${r.kind}:${r.name}`).sort()).toEqual([
        "env:API_TOKEN",
        "file:deploy.key",
      ]);
      for (const r of sealed)
        expectNoValue("a job_secrets row", Buffer.from(r.sealed).toString("latin1"));

      const claim = await runner.claim();
      expect(claim.status, claim.text).toBe(200);
      expect(claim.json.secrets).toEqual({ API_TOKEN: token });
      expect(claim.json.secretFiles).toEqual({ "deploy.key": fileContent });

      const renew = await runner.renew(jobId, claim.json.token);
      expect(renew.status, renew.text).toBe(200);
      expect(renew.json.secrets).toBeUndefined();
      expect(renew.json.secretFiles).toBeUndefined();
      expectNoValue("the renew reply", renew.text);

      const ev = await runner.rest.ndjson("/v1/runner/events", [
        {
          apiVersion: "v1",
          runnerId: "r1",
          jobId,
          leaseToken: claim.json.token,
          sequence: 1,
          data: { type: "job.started" },
        },
      ]);
      expect(ev.status, ev.text).toBe(204);
      const done = await runner.complete(jobId, claim.json.token);
      expect(done.status, done.text).toBe(200);
      expectNoValue("the completion reply", done.text);

      // Erased when the job settled, in the completion's transaction.
      expect(
        await db.selectFrom("job_secrets").selectAll().where("job_id", "=", jobId).execute(),
      ).toEqual([]);

      for (const path of [
        `/v1/admin/jobs/${jobId}`,
        `/v1/admin/jobs?workspaceId=${workspaceId}`,
        `/v1/admin/jobs/${jobId}/events`,
        "/v1/admin/audit?pageSize=500",
      ]) {
        const reply = await admin.rest.request("GET", path);
        expect(reply.status, `${path}: ${reply.text}`).toBe(200);
        expectNoValue(path, reply.text);
      }
      expect((await admin.job(jobId)).json.job).toMatchObject({
        state: "succeeded",
        secretNames: ["API_TOKEN"],
        secretFileNames: ["deploy.key"],
      });
      expectNoValue(
        "the audit_records table",
        JSON.stringify(await db.selectFrom("audit_records").selectAll().execute()),
      );
    },
  );

  it("over Connect: EnqueueJob takes them and the RunnerService claim delivers them", async () => {
    const workspaceId = ws();
    const adminClient = createTestClient(
      AdminService,
      cp.url,
      cp.pki.ca.certPem,
      await cp.pki.service("test-admin"),
      "connect-binary",
    );
    const runner = await registeredRunner(cp, "r2", workspaceId);
    await runner.close();
    const runnerClient = createTestClient(
      RunnerService,
      cp.url,
      cp.pki.ca.certPem,
      await cp.pki.runner("r2", workspaceId),
      "grpc",
    );
    const { job } = await adminClient.enqueueJob({
      apiVersion: "v1",
      workspaceId,
      labels: ["linux"],
      spec: { image: "busybox", argv: ["true"], timeoutSeconds: 60 },
      secrets: { API_TOKEN: token },
    });
    expect(job?.secretNames).toEqual(["API_TOKEN"]);
    const got = await adminClient.getJob({ jobId: job!.id });
    expectNoValue(
      "GetJob over Connect",
      JSON.stringify(got.job, (_k, v: unknown) => (typeof v === "bigint" ? String(v) : v)),
    );
    const { lease } = await runnerClient.claim({
      apiVersion: "v1",
      runnerId: "r2",
      waitSeconds: 0,
    });
    expect(lease?.secrets).toEqual({ API_TOKEN: token });
    const renewed = await runnerClient.renew({
      apiVersion: "v1",
      jobId: job!.id,
      leaseToken: lease!.token,
    });
    expect(renewed.lease?.secrets).toEqual({});
  });

  it("cancelling a queued job erases its secrets at once", async () => {
    const workspaceId = ws();
    const enq = await admin.enqueue({ workspaceId, secrets: { API_TOKEN: token } });
    const jobId: string = enq.json.job.id;
    const db = cp.plane.store.db;
    expect(
      await db.selectFrom("job_secrets").select("name").where("job_id", "=", jobId).execute(),
    ).toHaveLength(1);
    const cancel = await admin.cancel(jobId);
    expect(cancel.json.job.state).toBe("cancelled");
    expect(
      await db.selectFrom("job_secrets").select("name").where("job_id", "=", jobId).execute(),
    ).toEqual([]);
  });

  it(
    "a lease lost to expiry with no attempts left fails the job and erases " +
      "its secrets in the sweep's statement",
    async () => {
      const workspaceId = ws();
      const runner = await registeredRunner(cp, "r3", workspaceId);
      const enq = await admin.enqueue({
        workspaceId,
        maxAttempts: 1,
        secrets: { API_TOKEN: token },
      });
      const jobId: string = enq.json.job.id;
      const claim = await runner.claim();
      expect(claim.json.secrets).toEqual({ API_TOKEN: token });
      const db = cp.plane.store.db;
      // The lease ends by the database's clock: move its expiry into the past rather than wait for
      // it.
      await sql`update jobs set lease_expires_at = now() - interval '1 second' where id = ${jobId}`.execute(
        db,
      );
      await sql`update leases set expires_at = now() - interval '1 second' where job_id = ${jobId}`.execute(
        db,
      );
      await cp.plane.broker.sweep();
      expect((await admin.job(jobId)).json.job).toMatchObject({
        state: "failed",
        failure: { reason: "lease_lost" },
      });
      expect(
        await db.selectFrom("job_secrets").select("name").where("job_id", "=", jobId).execute(),
      ).toEqual([]);
      await runner.close();
    },
  );

  it(
    "an idempotent re-enqueue with the same secrets returns the job; with a " +
      "different value it is the usual 409, without a value",
    async () => {
      const workspaceId = ws();
      const body = { workspaceId, idempotencyKey: "same", secrets: { API_TOKEN: token } };
      const first = await admin.enqueue(body);
      const again = await admin.enqueue(body);
      expect(again.status, again.text).toBe(200);
      expect(again.json.job.id).toBe(first.json.job.id);
      const other = await admin.enqueue({ ...body, secrets: { API_TOKEN: `${token}-changed` } });
      expect(other.status, other.text).toBe(409);
      expect(other.json.message).toMatch(/already used .* with a different request; use a new key/);
      expectNoValue("the 409", other.text);
      // The job row's request hash is the same shape without values: a keyed hash cannot be matched
      // against a guess.
      const row = await cp.plane.store.db
        .selectFrom("jobs")
        .select("request_sha256")
        .where("id", "=", first.json.job.id)
        .executeTakeFirstOrThrow();
      expect(row.request_sha256).toMatch(/^[0-9a-f]{64}$/);
    },
  );

  it.each([
    ["a NUL in a value", { secrets: { API_TOKEN: `${token}\0x` } }, /secrets\.API_TOKEN/],
    [
      "a name that is not an environment variable",
      { secrets: { "BAD-NAME": token } },
      /secrets key "BAD-NAME" is not an environment variable name/,
    ],
    [
      "a file name with a slash",
      { secretFiles: { "../etc/passwd": token } },
      /secretFiles key "\.\.\/etc\/passwd" is not a file name/,
    ],
    [
      "a value over 64 KiB",
      { secrets: { API_TOKEN: token + "x".repeat(65 * 1024) } },
      /secrets\.API_TOKEN is over 65536 bytes/,
    ],
    [
      "over 100 secrets",
      { secrets: Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`S${i}`, token])) },
      /101 secrets .* at most 100/,
    ],
  ])("%s is a 400 naming the secret, never its value", async (_what, overrides, message) => {
    const reply = await admin.enqueue({ workspaceId: ws(), ...overrides });
    expect(reply.status, reply.text).toBe(400);
    expect(reply.json.message).toMatch(message);
    expectNoValue("the 400", reply.text);
  });
});

describe(`secrets at rest across restarts (${databaseKind})`, () => {
  let dir: string;
  let database: TestDatabase;
  let k1: SecretsKeys["current"];
  let k2: SecretsKeys["current"];
  let plane: TestControlPlane | undefined;
  const credential = "plain-repo-credential-31337";

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "forelead-secrets-"));
    database =
      databaseKind === "embedded"
        ? { location: join(dir, "db"), kind: "embedded", drop: async () => {} }
        : await createTestDatabase();
    k1 = (await readOrCreateSecretsKeyFile(join(dir, "k1.key"))).key;
    k2 = (await readOrCreateSecretsKeyFile(join(dir, "k2.key"))).key;
  });
  afterAll(async () => {
    await plane?.close();
    await database.drop();
    await rm(dir, { recursive: true, force: true });
  });
  const start = async (secretsKeys: SecretsKeys) =>
    (plane = await startTestControlPlane({ database, secretsKeys }));
  const stop = async () => {
    await plane?.close();
    plane = undefined;
  };

  // Five starts of a control plane on one database: more than the default 30 s on a loaded machine.
  it(
    "seals plain credentials, refuses a wrong key naming its file, rotates every row to the new key",
    { timeout: 180_000 },
    async () => {
      expect((await stat(join(dir, "k1.key"))).mode & 0o777).toBe(0o600);
      let cp = await start({ current: k1 });
      const db = () => cp.plane.store.db;
      // A job with secrets left queued, and a credential written in plain text as before
      // credential_sealed existed.
      const admin = createTestClient(
        AdminService,
        cp.url,
        cp.pki.ca.certPem,
        await cp.pki.service("test-admin"),
        "connect-json",
      );
      const { job } = await admin.enqueueJob({
        apiVersion: "v1",
        workspaceId: "rot",
        labels: ["linux"],
        spec: { image: "busybox", argv: ["true"], timeoutSeconds: 60 },
        secrets: { API_TOKEN: token },
      });
      // A webhook subscription's signing secret is sealed and rotated like the others.
      await createTestClient(
        WebhookService,
        cp.url,
        cp.pki.ca.certPem,
        await cp.pki.service("test-admin"),
        "connect-json",
      ).createWebhook({
        apiVersion: "v1",
        workspaceId: "rot-hooks",
        url: "https://example.invalid/hook",
        events: ["job.settled"],
        secret: `${token}-webhook`,
      });
      await db()
        .insertInto("repositories")
        .values({
          name: "legacy",
          url: "https://example.invalid/r.git",
          credential,
          registered_by: "test",
        })
        .execute();
      await stop();

      cp = await start({ current: k1 });
      const repo = await db()
        .selectFrom("repositories")
        .selectAll()
        .where("name", "=", "legacy")
        .executeTakeFirstOrThrow();
      expect(repo.credential).toBeNull();
      expect(sealedKeyId(repo.credential_sealed!)).toBe(k1.id);
      expect(Buffer.from(repo.credential_sealed!).toString("latin1")).not.toContain(credential);
      const listed = await createTestClient(
        AdminService,
        cp.url,
        cp.pki.ca.certPem,
        await cp.pki.service("test-admin"),
        "connect-json",
      ).listRepositories({});
      expect(listed.repositories.map((r) => [r.name, r.hasCredential])).toEqual([["legacy", true]]);
      expect(
        JSON.stringify(listed, (_k, v: unknown) => (typeof v === "bigint" ? String(v) : v)),
      ).not.toContain(credential);
      await stop();

      await expect(start({ current: k2 })).rejects.toThrow(
        `the secrets key ${join(dir, "k2.key")} does not open the secrets stored in this database`,
      );

      cp = await start({ current: k2, previous: k1 });
      const keyIds = async () => {
        const { rows } = await sql<{
          id: number;
        }>`select get_byte(sealed, 1) as id from job_secrets union all select
          get_byte(credential_sealed, 1) from repositories where credential_sealed is not null
          union all select get_byte(secret_sealed, 1) from webhook_subscriptions`.execute(db());
        return rows.map((r) => Number(r.id));
      };
      expect(await keyIds()).toEqual([k2.id, k2.id, k2.id]);
      expect(
        logged.some((l) => l.includes(`re-encrypted 3 secret(s) from ${join(dir, "k1.key")}`)),
      ).toBe(true);
      await stop();

      // The old key is no longer needed: a start with the new one alone serves, and the claim opens
      // the rotated row.
      cp = await start({ current: k2 });
      const runner = await registeredRunner(cp, "r1", "rot");
      const claim = await runner.claim();
      expect(claim.json.job.id).toBe(job!.id);
      expect(claim.json.secrets).toEqual({ API_TOKEN: token });
      await runner.close();
      await stop();
      await expect(start({ current: k1 })).rejects.toThrow(
        `the secrets key ${join(dir, "k1.key")} does not open`,
      );
    },
  );

  it.runIf(databaseKind === "embedded")(
    "the embedded data directory's raw files hold no secret value or credential",
    async () => {
      const hits: string[] = [];
      const walk = async (d: string): Promise<void> => {
        for (const e of await readdir(d, { withFileTypes: true })) {
          const p = join(d, e.name);
          if (e.isDirectory()) await walk(p);
          else if (e.isFile()) {
            const bytes = await readFile(p);
            for (const v of values)
              if (bytes.includes(Buffer.from(v))) hits.push(`${p}: ${v.slice(0, 4)}…`);
          }
        }
      };
      await walk(database.location);
      expect(hits).toEqual([]);
    },
  );
});

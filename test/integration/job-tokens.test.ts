// Every job has a verifiable identity (issue 47): under a live lease the control plane signs an
// ES256 JWT naming the job, for an audience its enqueue allowed; the issuer's discovery document
// and JWKS are served over HTTPS (HTTP/1.1 and HTTP/2, no client certificate) on a listener of
// their own, and an independent verifier (jose's remote key set, Python's PyJWT) checks the token
// from them. Refusals issue nothing; rotation keeps the old key published; no token, lease token
// or private key reaches a log line, audit record, event or view.
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { createRemoteJWKSet, customFetch, decodeJwt, decodeProtectedHeader, jwtVerify } from "jose";
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { jobTokenCommand } from "../../src/cli/job-token.js";
import {
  adminActor,
  jobBody,
  leasedJob,
  registeredRunner,
  type RunnerActor,
} from "../support/actors.js";
import { createTestClient } from "../support/clients.js";
import { startTestControlPlane } from "../support/control-plane.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { fetchTrusting, h2Get, httpsGet } from "../support/https-get.js";

/** Every console line the in-process control plane writes while the file runs. */
const logged: string[] = [];
for (const level of ["log", "error", "warn", "info"] as const) {
  const original = console[level].bind(console);
  vi.spyOn(console, level).mockImplementation((...args: unknown[]) => {
    logged.push(args.map((a) => (typeof a === "string" ? a : JSON.stringify(a))).join(" "));
    original(...args);
  });
}

const dir = await mkdtemp(join(tmpdir(), "forelead-job-tokens-"));
const keyFile = join(dir, "job-token-keys.json");
const audiences = ["sts.amazonaws.com", "https://vault.example"];

describe(`job ID tokens (${databaseKind})`, () => {
  const cp = useControlPlane(() => ({
    jobTokens: { keyFile, listen: { host: "127.0.0.1", port: 0 } },
  }));
  const { admin } = cp;
  /** Every token and lease token the tests saw: none may appear anywhere but in its reply. */
  const secrets: string[] = [];
  let seq = 0;
  const ws = () => `jt${++seq}`;

  afterAll(() => rm(dir, { recursive: true, force: true }));
  afterEach(async () => {
    await cp.plane.audit.flush();
    const db = cp.plane.store.db;
    const keyD = (
      JSON.parse(await readFile(keyFile, "utf8")) as { keys: { d: string }[] }
    ).keys.map((k) => k.d);
    const places = {
      "a server log line": logged.join("\n"),
      "the audit trail": JSON.stringify(await db.selectFrom("audit_records").selectAll().execute()),
      "the event stream": JSON.stringify(await db.selectFrom("events").selectAll().execute()),
      "a jobs row": JSON.stringify(await db.selectFrom("jobs").selectAll().execute()),
    };
    for (const [where, text] of Object.entries(places))
      for (const s of [...secrets, ...keyD])
        expect(text.includes(s), `${where} holds a token or key`).toBe(false);
  });

  const issuer = () => cp.plane.jobTokens!.issuerUrl;
  const caPem = () => cp.pki.ca.certPem;

  async function allowedJob(workspaceId: string, runnerId = "r1") {
    const runner = await registeredRunner(cp, runnerId, workspaceId);
    const enq = await admin.enqueue({
      workspaceId,
      idToken: { allowedAudiences: audiences },
    });
    expect(enq.status, enq.text).toBe(200);
    const claim = await runner.claim();
    expect(claim.status, claim.text).toBe(200);
    secrets.push(claim.json.token);
    return {
      runner,
      jobId: String(claim.json.job.id),
      token: String(claim.json.token),
      leaseExpiresAt: new Date(claim.json.expiresAt),
    };
  }

  function askToken(runner: RunnerActor, jobId: string, leaseToken: string, audience: string) {
    return runner.rest.request("POST", "/v1/runner/id-token", {
      apiVersion: "v1",
      jobId,
      leaseToken,
      audience,
    });
  }

  async function issuedCount(): Promise<number> {
    await cp.plane.audit.flush(); // records are written in batches
    const rows = await cp.plane.store.db
      .selectFrom("audit_records")
      .select("id")
      .where("action", "=", "job.id_token")
      .where("decision", "=", "allow")
      .execute();
    return rows.length;
  }

  it("the discovery document and JWKS are served over HTTP/1.1 and HTTP/2 without a client certificate, cached, and nothing else", async () => {
    const url = `${issuer()}/.well-known/openid-configuration`;
    const h1 = await httpsGet(url, caPem());
    expect(h1.status, h1.body).toBe(200);
    expect(h1.headers["cache-control"]).toBe("public, max-age=300");
    const config = JSON.parse(h1.body);
    expect(config).toMatchObject({
      issuer: issuer(),
      jwks_uri: `${issuer()}/.well-known/jwks.json`,
      id_token_signing_alg_values_supported: ["ES256"],
    });
    const h2 = await h2Get(config.jwks_uri, caPem());
    expect(h2.protocol).toBe("h2");
    expect(h2.status, h2.body).toBe(200);
    const jwks = JSON.parse(h2.body) as { keys: Record<string, string>[] };
    expect(jwks.keys.length).toBe(1);
    expect(jwks.keys[0]).toMatchObject({ kty: "EC", crv: "P-256", alg: "ES256", use: "sig" });
    expect(jwks.keys[0]!["d"]).toBeUndefined();
    const again = await httpsGet(config.jwks_uri, caPem(), {
      "if-none-match": String(h2.headers["etag"]),
    });
    expect(again.status).toBe(304);
    const other = await httpsGet(`${issuer()}/v1/runner/clock`, caPem());
    expect(other.status).toBe(404);
    expect(JSON.parse(other.body).message).toContain("/.well-known/jwks.json");
    const post = await httpsGet(url, caPem(), {}, "POST");
    expect(post.status).toBe(405);
  });

  it("a token under a live lease verifies against the remote JWKS, every claim as documented, exp within the lease", async () => {
    const workspaceId = ws();
    const job = await allowedJob(workspaceId);
    const before = await issuedCount();
    const reply = await askToken(job.runner, job.jobId, job.token, audiences[0]!);
    expect(reply.status, reply.text).toBe(200);
    const token: string = reply.json.token;
    secrets.push(token);
    const jwks = createRemoteJWKSet(new URL(`${issuer()}/.well-known/jwks.json`), {
      [customFetch]: fetchTrusting(caPem()),
    });
    const { payload, protectedHeader } = await jwtVerify(token, jwks, {
      issuer: issuer(),
      audience: audiences[0],
      algorithms: ["ES256"],
    });
    expect(protectedHeader.typ).toBe("JWT");
    expect(payload).toMatchObject({
      iss: issuer(),
      sub: `spiffe://forelead/workspaces/${workspaceId}/jobs/${job.jobId}`,
      aud: audiences[0],
      workspace: workspaceId,
      job_id: job.jobId,
      attempt: 1,
      runner_id: "r1",
      enqueued_by: "spiffe://forelead/services/test-admin",
    });
    expect(payload.jti).toMatch(/^[0-9a-f-]{36}$/);
    expect(payload.nbf).toBe(payload.iat);
    expect(payload.exp! * 1000).toBeLessThanOrEqual(job.leaseExpiresAt.getTime());
    expect(payload.exp! - payload.iat!).toBeLessThanOrEqual(900);
    expect(new Date(reply.json.expiresAt).getTime()).toBe(payload.exp! * 1000);
    expect(payload.pipeline_id).toBeUndefined();
    // One audit record for the issuance, naming job, audience, jti and expiry.
    expect(await issuedCount()).toBe(before + 1);
    const record = await cp.plane.store.db
      .selectFrom("audit_records")
      .selectAll()
      .where("action", "=", "job.id_token")
      .orderBy("id", "desc")
      .executeTakeFirstOrThrow();
    expect(record.target).toContain(job.jobId);
    expect(record.target).toContain(audiences[0]);
    expect(record.reason).toContain(String(payload.jti));
    expect(record.reason).toContain(new Date(payload.exp! * 1000).toISOString());
    expect(record.spiffe_id).toBe(`spiffe://forelead/runners/r1/workspaces/${workspaceId}`);
  });

  it("the token verifies in Python with PyJWT's JWKS client fetching over HTTPS", async () => {
    const job = await allowedJob(ws());
    const reply = await askToken(job.runner, job.jobId, job.token, audiences[1]!);
    expect(reply.status, reply.text).toBe(200);
    secrets.push(reply.json.token);
    const caFile = join(dir, "ca.pem");
    await writeFile(caFile, caPem());
    const script = [
      "import json, sys, urllib.request, jwt",
      "issuer, audience, token = sys.argv[1:4]",
      "config = json.load(urllib.request.urlopen(issuer + '/.well-known/openid-configuration'))",
      "key = jwt.PyJWKClient(config['jwks_uri']).get_signing_key_from_jwt(token)",
      "claims = jwt.decode(token, key.key, algorithms=['ES256'], audience=audience, issuer=issuer)",
      "print(json.dumps(claims))",
    ].join("\n");
    const { stdout } = await promisify(execFile)(
      "/usr/bin/python3",
      ["-c", script, issuer(), audiences[1]!, reply.json.token],
      { env: { ...process.env, SSL_CERT_FILE: caFile } },
    );
    const claims = JSON.parse(stdout);
    expect(claims).toMatchObject({ aud: audiences[1], job_id: job.jobId, runner_id: "r1" });
  });

  it("the Connect surface issues the same token", async () => {
    const job = await allowedJob(ws(), "r2");
    const workspaceId = await cp.plane.store.db
      .selectFrom("jobs")
      .select("workspace_id")
      .where("id", "=", job.jobId)
      .executeTakeFirstOrThrow();
    const client = createTestClient(
      RunnerService,
      cp.url,
      caPem(),
      await cp.pki.runner("r2", workspaceId.workspace_id),
      "connect-json",
    );
    const reply = await client.idToken({
      apiVersion: "v1",
      jobId: job.jobId,
      leaseToken: job.token,
      audience: audiences[0]!,
    });
    secrets.push(reply.token);
    expect(decodeProtectedHeader(reply.token).alg).toBe("ES256");
    expect(Number(reply.expiresAt!.seconds) * 1000).toBeLessThanOrEqual(
      job.leaseExpiresAt.getTime(),
    );
  });

  it("refusals issue nothing: bad audiences, no idToken, released, expired and foreign leases, another workspace's runner", async () => {
    const workspaceId = ws();
    const job = await allowedJob(workspaceId);
    const before = await issuedCount();
    const refuse = async (
      what: string,
      runner: RunnerActor,
      jobId: string,
      leaseToken: string,
      audience: string,
      status: number,
      message: string,
    ) => {
      const reply = await askToken(runner, jobId, leaseToken, audience);
      expect(reply.status, `${what}: ${reply.text}`).toBe(status);
      expect(reply.json.message, what).toContain(message);
      expect(reply.json.token, what).toBeUndefined();
    };
    await refuse("empty", job.runner, job.jobId, job.token, "", 400, "is not an audience");
    await refuse(
      "10 KiB",
      job.runner,
      job.jobId,
      job.token,
      "a".repeat(10 * 1024),
      400,
      "(10240 characters) is not an audience",
    );
    await refuse(
      "not allowed",
      job.runner,
      job.jobId,
      job.token,
      "other.example",
      403,
      "is not in job",
    );
    // A runner of another workspace: the job is not found in its workspace.
    const stranger = await registeredRunner(cp, "r1", ws());
    await refuse("other ws", stranger, job.jobId, job.token, audiences[0]!, 404, "not found");
    // Another runner of the same workspace with this lease's token: foreign.
    const other = await registeredRunner(cp, "r9", workspaceId);
    await refuse("foreign", other, job.jobId, job.token, audiences[0]!, 409, "not a lease of");
    // Expired: the lease's expiry moved into the past in the database's clock.
    const db = cp.plane.store.db;
    await db
      .updateTable("jobs")
      .set({ lease_expires_at: new Date(Date.now() - 60_000) })
      .where("id", "=", job.jobId)
      .execute();
    await db
      .updateTable("leases")
      .set({ expires_at: new Date(Date.now() - 60_000) })
      .where("job_id", "=", job.jobId)
      .execute();
    await refuse("expired", job.runner, job.jobId, job.token, audiences[0]!, 409, "expired at");
    // Released.
    const second = await leasedJobWithTokens(workspaceId);
    expect((await second.runner.release(second.jobId, second.token)).status).toBe(204);
    await refuse(
      "released",
      second.runner,
      second.jobId,
      second.token,
      audiences[0]!,
      409,
      "released",
    );
    // A job enqueued without idToken.
    const plain = await leasedJob(cp, admin, "r3", ws());
    secrets.push(plain.token);
    await refuse(
      "no idToken",
      plain.runner,
      plain.jobId,
      plain.token,
      audiences[0]!,
      403,
      "idToken",
    );
    expect(await issuedCount()).toBe(before);
  });

  async function leasedJobWithTokens(workspaceId: string) {
    const runner = await registeredRunner(cp, "r8", workspaceId);
    const enq = await admin.enqueue({
      workspaceId,
      labels: ["gpu"],
      idToken: { allowedAudiences: audiences },
    });
    expect(enq.status, enq.text).toBe(200);
    await runner.register({ labels: ["gpu"] });
    const claim = await runner.claim();
    expect(claim.status, claim.text).toBe(200);
    secrets.push(claim.json.token);
    return { runner, jobId: String(claim.json.job.id), token: String(claim.json.token) };
  }

  it("an enqueue's idToken is checked: 1 to 8 audiences, each an audience", async () => {
    for (const allowedAudiences of [[], ["ok", ""], Array.from({ length: 9 }, (_, i) => `a${i}`)]) {
      const enq = await admin.enqueue({ workspaceId: ws(), idToken: { allowedAudiences } });
      expect(enq.status, enq.text).toBe(400);
      expect(enq.json.message).toContain("idToken.allowedAudiences");
    }
  });

  /** Claims the one job `runner` may take and asks for a token for `audience` under its lease. */
  async function claimAndAsk(runner: RunnerActor, audience: string) {
    const claim = await runner.claim();
    expect(claim.status, claim.text).toBe(200);
    secrets.push(claim.json.token);
    const reply = await askToken(runner, claim.json.job.id, claim.json.token, audience);
    if (reply.status === 200) secrets.push(reply.json.token);
    return { job: claim.json.job, reply };
  }

  it("a schedule template's idToken reaches each job it fires; a bad one is a 400 naming it", async () => {
    const workspaceId = ws();
    const {
      workspaceId: _w,
      apiVersion: _a,
      ...template
    } = jobBody({
      idToken: { allowedAudiences: [audiences[1]] },
    });
    const schedule = (job: Record<string, unknown>, name: string) =>
      admin.rest.request("POST", "/v1/admin/schedules", {
        apiVersion: "v1",
        name,
        workspaceId,
        cron: "0 3 * * *",
        job,
      });
    for (const allowedAudiences of [[], [""], ["a".repeat(10 * 1024)]]) {
      const bad = await schedule({ ...template, idToken: { allowedAudiences } }, "bad");
      expect(bad.status, bad.text).toBe(400);
      expect(bad.json.message).toContain("idToken.allowedAudiences");
    }
    const created = await schedule(template, "nightly");
    expect(created.status, created.text).toBe(200);
    expect(created.json.schedule.job.idToken).toEqual({ allowedAudiences: [audiences[1]] });
    const run = await admin.rest.request(
      "POST",
      `/v1/admin/schedules/${created.json.schedule.id}/run`,
      { apiVersion: "v1" },
    );
    expect(run.status, run.text).toBe(200);
    expect(run.json.fire).toMatchObject({ outcome: "enqueued" });
    const runner = await registeredRunner(cp, "r1", workspaceId);
    const { job, reply } = await claimAndAsk(runner, audiences[1]!);
    expect(job.id).toBe(run.json.fire.jobId);
    expect(job.idTokenAudiences).toEqual([audiences[1]]);
    expect(reply.status, reply.text).toBe(200);
    expect(decodeJwt(reply.json.token)).toMatchObject({ aud: audiences[1], job_id: job.id });
    await runner.close();
  });

  it("a batch enqueue gives each job its own idToken; a bad one refuses the batch with a 400", async () => {
    const workspaceId = ws();
    const bad = await admin.rest.request("POST", "/v1/admin/jobs:batch", {
      apiVersion: "v1",
      jobs: [
        jobBody({ workspaceId, idToken: { allowedAudiences: [audiences[0]] } }),
        jobBody({ workspaceId, idToken: { allowedAudiences: ["ok", ""] } }),
      ],
    });
    expect(bad.status, bad.text).toBe(400);
    expect(bad.json.message).toContain("idToken.allowedAudiences");
    const batch = await admin.rest.request("POST", "/v1/admin/jobs:batch", {
      apiVersion: "v1",
      jobs: [
        jobBody({ workspaceId, priority: 2, idToken: { allowedAudiences: [audiences[0]] } }),
        jobBody({ workspaceId, priority: 1 }),
      ],
    });
    expect(batch.status, batch.text).toBe(200);
    const [allowed, plain] = batch.json.jobs as { id: string }[];
    const runner = await registeredRunner(cp, "r1", workspaceId, { slots: 2 });
    const first = await claimAndAsk(runner, audiences[0]!);
    expect(first.job.id).toBe(allowed!.id);
    expect(first.reply.status, first.reply.text).toBe(200);
    expect(decodeJwt(first.reply.json.token)).toMatchObject({
      aud: audiences[0],
      job_id: allowed!.id,
    });
    const second = await claimAndAsk(runner, audiences[0]!);
    expect(second.job.id).toBe(plain!.id);
    expect(second.reply.status, second.reply.text).toBe(403);
    expect(second.reply.json.message).toContain("idToken");
    await runner.close();
  });

  it("a pipeline step's job gets tokens with its pipeline and step, and a subject template can name them", async () => {
    const plane = await startTestControlPlane({
      pki: cp.pki,
      jobTokens: {
        keyFile,
        issuerUrl: "https://ci.example:8444/forelead",
        subjectTemplate: "workspaces/{workspace}/pipelines/{pipeline}/steps/{step}",
      },
    });
    const stepAdmin = await adminActor(plane);
    try {
      const workspaceId = ws();
      const runner = await registeredRunner(plane, "r1", workspaceId);
      const submitted = await stepAdmin.rest.request("POST", "/v1/admin/pipelines", {
        apiVersion: "v1",
        workspaceId,
        name: "release",
        steps: [
          {
            name: "deploy",
            labels: ["linux"],
            spec: { image: "busybox", argv: ["true"], timeoutSeconds: 60 },
            idToken: { allowedAudiences: [audiences[0]] },
          },
        ],
      });
      expect(submitted.status, submitted.text).toBe(200);
      const claim = await runner.claim();
      expect(claim.status, claim.text).toBe(200);
      secrets.push(claim.json.token);
      expect(claim.json.job.idTokenAudiences).toEqual([audiences[0]]);
      const reply = await askToken(runner, claim.json.job.id, claim.json.token, audiences[0]!);
      expect(reply.status, reply.text).toBe(200);
      secrets.push(reply.json.token);
      const payload = decodeJwt(reply.json.token);
      expect(payload).toMatchObject({
        iss: "https://ci.example:8444/forelead",
        sub: `spiffe://forelead/workspaces/${workspaceId}/pipelines/release/steps/deploy`,
        pipeline_id: submitted.json.pipeline.id,
        pipeline: "release",
        step: "deploy",
      });
      await runner.close();
    } finally {
      await stepAdmin.close();
      await plane.close();
    }
  });

  it("rotation: a token signed before still verifies, only the new key signs after, a replica with the same key set serves the same JWKS", async () => {
    const job = await allowedJob(ws());
    const first = await askToken(job.runner, job.jobId, job.token, audiences[0]!);
    expect(first.status, first.text).toBe(200);
    secrets.push(first.json.token);
    const oldKid = decodeProtectedHeader(first.json.token).kid;
    const newKid = /key (\S+) signs/.exec(await jobToken("rotate", "--key", keyFile))![1];
    // The running control plane reads the rotated file within a second.
    let next = first;
    for (let i = 0; i < 100 && decodeProtectedHeader(next.json.token).kid === oldKid; i++) {
      await new Promise((r) => setTimeout(r, 50));
      next = await askToken(job.runner, job.jobId, job.token, audiences[0]!);
      expect(next.status, next.text).toBe(200);
      secrets.push(next.json.token);
    }
    expect(decodeProtectedHeader(next.json.token).kid).toBe(newKid);
    const jwksUrl = `${issuer()}/.well-known/jwks.json`;
    const jwks = JSON.parse((await httpsGet(jwksUrl, caPem())).body) as { keys: { kid: string }[] };
    expect(jwks.keys.map((k) => k.kid)).toEqual([newKid, oldKid]);
    const remote = createRemoteJWKSet(new URL(jwksUrl), { [customFetch]: fetchTrusting(caPem()) });
    for (const t of [first.json.token, next.json.token])
      await jwtVerify(t, remote, { issuer: issuer(), audience: audiences[0] });
    // A replica on the same key set (and its own database) publishes the same keys.
    const replica = await startTestControlPlane({
      pki: cp.pki,
      jobTokens: { keyFile, listen: { host: "127.0.0.1", port: 0 } },
    });
    try {
      const theirs = await httpsGet(
        `${replica.plane.jobTokens!.issuerUrl}/.well-known/jwks.json`,
        caPem(),
      );
      expect(JSON.parse(theirs.body)).toEqual(jwks);
    } finally {
      await replica.close();
    }
    // Published as static files for hosting elsewhere: the same documents.
    const out = join(dir, "site");
    await jobToken("publish", "--key", keyFile, "--issuer-url", issuer(), "--out", out);
    expect(JSON.parse(await readFile(join(out, ".well-known/jwks.json"), "utf8"))).toEqual(jwks);
    const config = await httpsGet(`${issuer()}/.well-known/openid-configuration`, caPem());
    expect(
      JSON.parse(await readFile(join(out, ".well-known/openid-configuration"), "utf8")),
    ).toEqual(JSON.parse(config.body));
  });
});

/** Runs `forelead job-token ARGS` in process; returns what it printed. */
async function jobToken(...args: string[]): Promise<string> {
  let out = "";
  await jobTokenCommand((t) => (out += t)).parseAsync(args, { from: "user" });
  return out;
}

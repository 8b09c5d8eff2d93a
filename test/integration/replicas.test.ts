// The broker's concurrency proof (docs/design.md "Leases": "No job is ever leased
// twice at once, across any number of control-plane replicas on one
// Postgres"). Two real `forelead serve` processes share one fresh Postgres
// database; 2,000 no-op jobs are enqueued through both while 50 runners, each
// with its own certificate and HTTP/2 connections, claim and complete them
// through both. Every fifth lease is renewed and completed through the other
// replica. Each runner runs one more claim loop than it has slots, so the
// slot limit is pushed against, not just never reached. A third of the
// runners claim several leases per request (ClaimLeases) and a third of
// them with their completions (CompleteRequest.next), as the runner agent does.
//
// Needs real Postgres (DATABASE_URL): two processes cannot share an embedded
// database, so the suite is skipped there.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readOrCreateSecretsKeyFile } from "../../src/secrets/key-file.js";
import { hashLeaseToken } from "../../src/broker/ids.js";
import { createRestClient, type RestClient, type RestReply } from "../support/clients.js";
import { createTestDatabase, databaseKind, type TestDatabase } from "../support/database.js";
import { createTestPki, type TestPki } from "../support/pki.js";

const repoRoot = fileURLToPath(new URL("../..", import.meta.url));
const adminId = "spiffe://forelead/services/test-admin";
const workspaceId = "w1";

const totalJobs = 2_000;
const runnerCount = 50;
const enqueueInFlight = 32;
/** Every n-th lease (by global claim order) is renewed and completed through the other replica. */
const crossEvery = 5;
/** The workload stops by itself after this long, whatever happened. */
const workloadDeadlineMs = 140_000;
/** After this many unexpected replies every loop stops: the test fails with them. */
const maxErrors = 10;

/** One `forelead serve` OS process. */
interface Replica {
  readonly name: string;
  readonly child: ChildProcess;
  readonly url: string;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stdout(): string;
  stderr(): string;
}

/** Starts `forelead serve` and resolves once it prints the URL it serves (30 s bound). */
async function startReplica(
  name: string,
  args: readonly string[],
  started: Replica[],
): Promise<Replica> {
  const child = spawn(process.execPath, ["bin/forelead.js", "serve", ...args], {
    cwd: repoRoot,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  child.stdout!.setEncoding("utf8").on("data", (c: string) => (out += c));
  child.stderr!.setEncoding("utf8").on("data", (c: string) => (err += c));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal })),
  );
  const partial = { name, child, exited, stdout: () => out, stderr: () => err };
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(
      () =>
        reject(
          new Error(
            `replica ${name} printed no "forelead: serving" line within 30 s\nstdout: ${out}\nstderr: ${err}`,
          ),
        ),
      30_000,
    );
    const look = () => {
      const m = /^forelead: serving (https:\/\/127\.0\.0\.1:\d+) /m.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    };
    child.stdout!.on("data", look);
    child.once("error", (e) => {
      clearTimeout(timer);
      reject(new Error(`replica ${name} could not be spawned: ${e.message}`));
    });
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(
        new Error(
          `replica ${name} exited (code ${code}, signal ${signal}) before serving\nstdout: ${out}\nstderr: ${err}`,
        ),
      );
    });
  }).catch((e: Error) => {
    child.kill("SIGKILL");
    throw e;
  });
  const replica = { ...partial, url };
  started.push(replica);
  return replica;
}

/** Resolves with the exit of `replica`, or undefined after `ms`. */
async function exitWithin(
  replica: Replica,
  ms: number,
): Promise<{ code: number | null; signal: NodeJS.Signals | null } | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>(
    (resolve) => (timer = setTimeout(() => resolve(undefined), ms)),
  );
  try {
    return await Promise.race([replica.exited, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** One lease as this test saw it. Times are performance.now() milliseconds. */
interface LeaseRecord {
  readonly jobId: string;
  readonly token: string;
  readonly runnerId: string;
  readonly slots: number;
  readonly claimedVia: string;
  readonly completedVia: string;
  /** Renewed and completed through the other replica than the runner's home. */
  readonly crossed: boolean;
  /** When the claim reply arrived (the lease was issued before). */
  readonly claimedAt: number;
  /** When the complete request was sent (the lease ended after). */
  readonly completeSentAt: number;
  /** When the complete reply arrived. */
  readonly completedAt: number;
}

/**
 * The most intervals [start, end] that overlap at any instant. Ends sort
 * before starts at the same instant: [a, t] and [t, b] do not overlap.
 */
function maxOverlap(intervals: ReadonlyArray<readonly [number, number]>): number {
  const points = intervals
    .flatMap(([s, e]) => [[s, 1] as const, [e, -1] as const])
    .sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let live = 0;
  let max = 0;
  for (const [, delta] of points) {
    live += delta;
    max = Math.max(max, live);
  }
  return max;
}

describe.runIf(databaseKind === "postgres")("two control-plane replicas on one Postgres", () => {
  const replicas: Replica[] = [];
  const clients: RestClient[] = [];
  let pki: TestPki;
  let database: TestDatabase | undefined;
  let tmp: string | undefined;

  beforeAll(async () => {
    pki = await createTestPki();
    tmp = await mkdtemp(path.join(os.tmpdir(), "forelead-replicas-"));
    const files = {
      cert: path.join(tmp, "server.pem"),
      key: path.join(tmp, "server-key.pem"),
      ca: path.join(tmp, "ca.pem"),
    };
    await writeFile(files.cert, pki.server.certPem);
    await writeFile(files.key, pki.server.keyPem, { mode: 0o600 });
    await writeFile(files.ca, pki.ca.certPem);
    database = await createTestDatabase();
    const args = [
      "--listen",
      "127.0.0.1:0",
      "--metrics-listen",
      "127.0.0.1:0",
      "--tls-cert",
      files.cert,
      "--tls-key",
      files.key,
      "--client-ca",
      files.ca,
      "--database",
      database.location,
      "--admin",
      adminId,
      "--secrets-key",
      (await readOrCreateSecretsKeyFile(path.join(tmp, "secrets.key")),
      path.join(tmp, "secrets.key")),
    ];
    // Both at once, on an empty database: their start-up migrations race too.
    const results = await Promise.allSettled([
      startReplica("A", args, replicas),
      startReplica("B", args, replicas),
    ]);
    const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
    if (failed) throw failed.reason;
    replicas.sort((a, b) => a.name.localeCompare(b.name));
  }, 90_000);

  afterAll(async () => {
    await Promise.all(clients.map((c) => c.close().catch(() => {})));
    // The shutdown test normally stopped them; anything still alive is stopped here.
    for (const r of replicas) {
      if (r.child.exitCode === null && r.child.signalCode === null) {
        r.child.kill("SIGTERM");
        if (!(await exitWithin(r, 15_000))) {
          r.child.kill("SIGKILL");
          await exitWithin(r, 5_000);
        }
      }
    }
    await database?.drop();
    if (tmp) await rm(tmp, { recursive: true, force: true });
  }, 60_000);

  it("2,000 jobs, 50 runners, two replicas: every job leased once, completed once, slots never exceeded", async () => {
    const [A, B] = replicas as [Replica, Replica];
    const connect = (url: string, cert: { certPem: string; keyPem: string }) => {
      const c = createRestClient(url, pki.ca.certPem, cert);
      clients.push(c);
      return c;
    };
    const adminCert = await pki.service("test-admin");
    const admins = [connect(A.url, adminCert), connect(B.url, adminCert)] as const;

    const errors: string[] = [];
    let stopped = false;
    const fail = (what: string) => {
      if (errors.length < 50) errors.push(what);
      if (errors.length >= maxErrors) stopped = true;
    };
    const describeReply = (r: RestReply) => `${r.status} ${r.text.slice(0, 300)}`;

    // Runners: certificates, connections (home replica and the other one), registrations.
    const runners = await Promise.all(
      Array.from({ length: runnerCount }, async (_, i) => {
        const runnerId = `r${i}`;
        const cert = await pki.runner(runnerId, workspaceId);
        const [home, away] = i % 2 === 0 ? [A, B] : [B, A];
        const mode = (["claim", "claims", "next"] as const)[i % 3]!;
        return {
          runnerId,
          slots: 1 + (i % 4),
          mode,
          home: { name: home.name, client: connect(home.url, cert) },
          away: { name: away.name, client: connect(away.url, cert) },
        };
      }),
    );
    await Promise.all(
      runners.map(async (r) => {
        const reply = await r.home.client.request("POST", "/v1/runner/register", {
          apiVersion: "v1",
          runnerId: r.runnerId,
          workspaceId,
          slots: r.slots,
          cpu: 4,
          memoryBytes: "1073741824",
          architecture: "amd64",
          labels: ["linux"],
        });
        expect(reply.status, `register ${r.runnerId}: ${describeReply(reply)}`).toBe(200);
      }),
    );

    const started = performance.now();
    const deadline = started + workloadDeadlineMs;
    const live = () => !stopped && performance.now() < deadline;

    // Enqueue: 2,000 jobs, alternating replicas, 32 in flight. Runners are already claiming.
    const enqueued: Array<{ id: string; via: string; handedTo?: string }> = [];
    let enqueueDone = false;
    let enqueueFinishedAt = 0;
    const enqueue = async () => {
      let next = 0;
      await Promise.all(
        Array.from({ length: enqueueInFlight }, async () => {
          while (live() && next < totalJobs) {
            const n = next++;
            const admin = admins[n % 2]!;
            try {
              const reply = await admin.request("POST", "/v1/admin/jobs", {
                apiVersion: "v1",
                workspaceId,
                labels: ["linux"],
                maxAttempts: 3,
                priority: 0,
                idempotencyKey: `replicas-${n}`,
                spec: { image: "busybox", argv: ["true"] },
              });
              // Running: handed off in the enqueue's own statement to a runner waiting on that
              // replica (src/broker/leases/handoff.ts).
              if (reply.status !== 200 || !["queued", "running"].includes(reply.json?.job?.state))
                fail(`enqueue ${n} via ${n % 2 ? "B" : "A"}: ${describeReply(reply)}`);
              else
                enqueued.push({
                  id: reply.json.job.id,
                  via: n % 2 ? "B" : "A",
                  handedTo:
                    reply.json.job.state === "running" ? reply.json.job.runnerId : undefined,
                });
            } catch (e) {
              fail(`enqueue ${n}: ${(e as Error).message}`);
            }
          }
        }),
      );
      enqueueDone = true;
      enqueueFinishedAt = performance.now();
    };

    // The admin view: true when no job is queued or running.
    const nothingLeft = async (admin: RestClient): Promise<boolean> => {
      for (const state of ["queued", "running"]) {
        const reply = await admin.request(
          "GET",
          `/v1/admin/jobs?workspaceId=${workspaceId}&state=${state}&pageSize=1`,
        );
        if (reply.status !== 200) {
          fail(`list ${state} jobs: ${describeReply(reply)}`);
          return true;
        }
        if ((reply.json.jobs ?? []).length > 0) return false;
      }
      return true;
    };

    const records: LeaseRecord[] = [];
    let leaseSeq = 0;
    let claims = 0;
    let emptyClaims = 0;
    let renewals = 0;
    let multiLeases = 0;
    let nextLeases = 0;

    // Each runner claims one of three ways (docs/protocol.md): a claim and a plain completion;
    // ClaimLeases of up to its slots, each completion asking for the next lease; or a claim with
    // completions asking for the next lease. As the runner agent does, a loop works every lease a
    // claim gave it at once, each followed by the leases its completions bring.
    type Held = {
      token: string;
      jobId: string;
      expiresAt: string;
      claimedVia: string;
      claimedAt: number;
    };
    const asLease = (
      lease: { token?: unknown; job?: { id?: unknown }; expiresAt?: unknown } | undefined,
      via: string,
      at: number,
    ): Held | undefined =>
      typeof lease?.token === "string" &&
      lease.token &&
      typeof lease.job?.id === "string" &&
      typeof lease.expiresAt === "string"
        ? {
            token: lease.token,
            jobId: lease.job.id,
            expiresAt: lease.expiresAt,
            claimedVia: via,
            claimedAt: at,
          }
        : undefined;
    /**
     * Renews (every fifth) and completes `held`, then the lease its completion brought, and so on.
     */
    const runLeases = async (r: (typeof runners)[number], loop: number, first: Held) => {
      for (let held: Held | undefined = first; held && live();) {
        const { token, jobId, expiresAt, claimedVia, claimedAt } = held;
        held = undefined;
        const crossed = leaseSeq++ % crossEvery === crossEvery - 1;
        const via = crossed ? r.away : r.home;
        try {
          if (crossed) {
            const renew = await via.client.request("POST", "/v1/runner/renew", {
              apiVersion: "v1",
              jobId,
              leaseToken: token,
            });
            renewals++;
            if (
              renew.status !== 200 ||
              renew.json?.job?.id !== jobId ||
              !(Date.parse(renew.json.expiresAt) >= Date.parse(expiresAt))
            ) {
              fail(
                `renew ${jobId} by ${r.runnerId} via ${via.name} (claimed via ${claimedVia}): ${describeReply(renew)}`,
              );
              continue;
            }
          }
          const completeSentAt = performance.now();
          const done = await via.client.request("POST", "/v1/runner/complete", {
            apiVersion: "v1",
            jobId,
            leaseToken: token,
            completionId: `${r.runnerId}-${loop}-${jobId}`,
            outcome: "succeeded",
            exitCode: 0,
            next: r.mode === "claim" ? undefined : { waitSeconds: 0 },
          });
          const completedAt = performance.now();
          if (
            done.status !== 200 ||
            done.json?.job?.state !== "succeeded" ||
            done.json?.job?.id !== jobId
          ) {
            fail(`complete ${jobId} by ${r.runnerId} via ${via.name}: ${describeReply(done)}`);
            continue;
          }
          records.push({
            jobId,
            token,
            runnerId: r.runnerId,
            slots: r.slots,
            claimedVia,
            completedVia: via.name,
            crossed,
            claimedAt,
            completeSentAt,
            completedAt,
          });
          if (done.json.lease) {
            held = asLease(done.json.lease, via.name, completedAt);
            if (!held)
              fail(
                `complete ${jobId} by ${r.runnerId} via ${via.name}: its next lease: ${describeReply(done)}`,
              );
            else nextLeases++;
          }
        } catch (e) {
          fail(`renew/complete ${jobId} by ${r.runnerId} via ${via.name}: ${(e as Error).message}`);
        }
      }
    };
    const work = async (r: (typeof runners)[number], loop: number) => {
      const admin = admins[runners.indexOf(r) % 2]!;
      while (live()) {
        let claim: RestReply;
        try {
          claims++;
          claim = await (r.mode === "claims"
            ? r.home.client.request("POST", "/v1/runner/claims", {
                apiVersion: "v1",
                runnerId: r.runnerId,
                waitSeconds: 1,
                maxLeases: r.slots,
              })
            : r.home.client.request("POST", "/v1/runner/claim", {
                apiVersion: "v1",
                runnerId: r.runnerId,
                waitSeconds: 1,
              }));
        } catch (e) {
          fail(`claim ${r.runnerId}/${loop}: ${(e as Error).message}`);
          continue;
        }
        if (claim.status === 204) {
          emptyClaims++;
          if (
            records.length >= totalJobs ||
            (enqueueDone &&
              (await nothingLeft(admin).catch((e: Error) => (fail(`list: ${e.message}`), true))))
          )
            return;
          continue;
        }
        const claimedAt = performance.now();
        const got =
          claim.status !== 200
            ? []
            : r.mode === "claims"
              ? ((claim.json?.leases ?? []) as unknown[])
              : [claim.json];
        const leases = got.map((l) =>
          asLease(l as Parameters<typeof asLease>[0], r.home.name, claimedAt),
        );
        if (
          !leases.length ||
          leases.some((l) => !l) ||
          (r.mode === "claims" &&
            (leases.length > r.slots || claim.json.lease?.token !== leases[0]!.token))
        ) {
          fail(`claim ${r.runnerId}/${loop} via ${r.home.name}: ${describeReply(claim)}`);
          continue;
        }
        if (leases.length > 1) multiLeases += leases.length;
        await Promise.all((leases as Held[]).map((held) => runLeases(r, loop, held)));
      }
    };

    // slots + 1 claim loops per runner: one more than it may hold, so the limit is tested.
    await Promise.all([
      enqueue(),
      ...runners.flatMap((r) => Array.from({ length: r.slots + 1 }, (_, loop) => work(r, loop))),
    ]);
    const elapsedMs = performance.now() - started;

    const seconds = elapsedMs / 1000;
    console.log(
      `replicas: ${records.length} jobs enqueued and completed through 2 ` +
        `replicas by ${runnerCount} runners in ${seconds.toFixed(2)} s ` +
        `(${(records.length / seconds).toFixed(0)} jobs/s; enqueue of ` +
        `${enqueued.length} took ` +
        `${((enqueueFinishedAt - started) / 1000).toFixed(2)} s); ` +
        `${claims} claims (${emptyClaims} empty), ${renewals} cross-replica renewals, ` +
        `${records.filter((x) => x.crossed).length} cross-replica completions, ` +
        `${multiLeases} leases from multi-lease claims, ${nextLeases} from ` +
        `completions`,
    );

    expect(errors, errors.join("\n")).toEqual([]);
    expect(
      performance.now() < deadline,
      `the workload hit its ${workloadDeadlineMs / 1000} s bound`,
    ).toBe(true);

    // Enqueue: 2,000 distinct jobs, half through each replica.
    const jobIds = new Set(enqueued.map((e) => e.id));
    expect(jobIds.size).toBe(totalJobs);
    expect(enqueued.filter((e) => e.via === "A").length).toBe(totalJobs / 2);

    // From the records: each job claimed once and completed once, tokens distinct and never shared
    // between runners.
    expect(records.length).toBe(totalJobs);
    const byJob = new Map<string, LeaseRecord[]>();
    for (const rec of records) byJob.set(rec.jobId, [...(byJob.get(rec.jobId) ?? []), rec]);
    expect([...byJob.keys()].sort()).toEqual([...jobIds].sort());
    const twice = [...byJob].filter(([, recs]) => recs.length !== 1);
    expect(twice.map(([id, recs]) => `${id}: ${recs.map((x) => x.runnerId).join(", ")}`)).toEqual(
      [],
    );
    const tokenOwner = new Map<string, string>();
    for (const rec of records) {
      const owner = tokenOwner.get(rec.token);
      expect(owner, `token issued twice (to ${owner} and ${rec.runnerId})`).toBeUndefined();
      tokenOwner.set(rec.token, rec.runnerId);
    }
    expect(tokenOwner.size).toBe(totalJobs);
    expect(records.filter((x) => x.crossed).length).toBe(Math.floor(totalJobs / crossEvery));
    // The fewer-round-trip paths were in use.
    expect(multiLeases).toBeGreaterThan(0);
    expect(nextLeases).toBeGreaterThan(0);
    // Handed off by its enqueue: claimed by that runner (the one record of the job above), on the
    // enqueue's replica. How many depends on timing alone (0 to a few dozen: most leases here come
    // from completions and multi-lease claims, and under load no claim may be waiting when an
    // enqueue lands), so the count is only reported; handoff.test.ts makes handoffs happen on
    // purpose, on one replica and on two.
    const handed = enqueued.filter((e) => e.handedTo);
    console.log(`replicas: ${handed.length} jobs handed off by their enqueue to a waiting claim`);
    expect(
      handed
        .filter(
          (e) =>
            byJob.get(e.id)?.[0]?.runnerId !== e.handedTo ||
            byJob.get(e.id)?.[0]?.claimedVia !== e.via,
        )
        .map((e) => e.id),
    ).toEqual([]);

    // From the records: no runner ever held more live leases than its slots. A lease was
    // live from before its claim reply arrived until after its complete was sent, so
    // [claimedAt, completeSentAt] lies inside it: an overlap here is a real one.
    const overruns: string[] = [];
    let atLimit = 0;
    for (const r of runners) {
      const held = maxOverlap(
        records
          .filter((x) => x.runnerId === r.runnerId)
          .map((x) => [x.claimedAt, x.completeSentAt] as const),
      );
      if (held > r.slots) overruns.push(`${r.runnerId} held ${held} leases with ${r.slots} slots`);
      if (held === r.slots) atLimit++;
    }
    expect(overruns).toEqual([]);
    console.log(
      `replicas: ${atLimit} of ${runnerCount} runners were seen holding exactly their slots at once`,
    );

    // From the database: every job succeeded on attempt 1 under exactly one lease, settled,
    // held by the runner that reported it, with the token it was given.
    const db = new pg.Client({ connectionString: database!.location });
    await db.connect();
    try {
      const states = await db.query<{ state: string; attempts: number; n: number }>(
        "select state, attempts, count(*)::int as n from jobs group by state, attempts order by state, attempts",
      );
      expect(states.rows).toEqual([{ state: "succeeded", attempts: 1, n: totalJobs }]);
      const leases = await db.query<{
        job_id: string;
        runner_id: string;
        token_sha256: Buffer;
        attempt: number;
        end_reason: string | null;
        completion_id: string | null;
      }>("select job_id, runner_id, token_sha256, attempt, end_reason, completion_id from leases");
      expect(leases.rows.length).toBe(totalJobs);
      const leaseByJob = new Map<string, (typeof leases.rows)[number][]>();
      for (const row of leases.rows)
        leaseByJob.set(row.job_id, [...(leaseByJob.get(row.job_id) ?? []), row]);
      expect(leaseByJob.size).toBe(totalJobs);
      const mismatched: string[] = [];
      for (const rec of records) {
        const rows = leaseByJob.get(rec.jobId) ?? [];
        const row = rows[0];
        if (rows.length !== 1 || !row) {
          mismatched.push(`${rec.jobId}: ${rows.length} lease rows`);
          continue;
        }
        if (row.end_reason !== "settled")
          mismatched.push(`${rec.jobId}: end_reason ${row.end_reason}`);
        if (row.attempt !== 1) mismatched.push(`${rec.jobId}: attempt ${row.attempt}`);
        if (row.runner_id !== rec.runnerId)
          mismatched.push(
            `${rec.jobId}: lease row runner ${row.runner_id}, claimed by ${rec.runnerId}`,
          );
        if (!row.token_sha256.equals(hashLeaseToken(rec.token)))
          mismatched.push(
            `${rec.jobId}: stored token hash is not the hash of the token the runner got`,
          );
        if (!row.completion_id?.startsWith(`${rec.runnerId}-`))
          mismatched.push(`${rec.jobId}: completion_id ${row.completion_id}`);
      }
      expect(mismatched.slice(0, 20)).toEqual([]);
      const open = await db.query<{ n: number }>(
        "select count(*)::int as n from leases where ended_at is null",
      );
      expect(open.rows[0]!.n).toBe(0);
    } finally {
      await db.end();
    }

    // Neither replica logged an error while this ran.
    for (const r of replicas) expect(r.stderr(), `replica ${r.name} stderr`).toBe("");
  }, 180_000);

  it("both replicas close their connections and the database and exit 0 on SIGTERM", async () => {
    await Promise.all(clients.splice(0).map((c) => c.close()));
    for (const r of replicas) r.child.kill("SIGTERM");
    for (const r of replicas) {
      const exit = await exitWithin(r, 20_000);
      expect(
        exit,
        `replica ${r.name} did not exit within 20 s of SIGTERM\nstderr: ${r.stderr()}`,
      ).toBeDefined();
      expect(exit, `replica ${r.name}\nstdout: ${r.stdout()}\nstderr: ${r.stderr()}`).toEqual({
        code: 0,
        signal: null,
      });
      expect(r.stdout()).toContain("forelead: SIGTERM received");
    }
  }, 60_000);
});

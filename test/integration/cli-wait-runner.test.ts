// Paper cuts of issue 46 in the commands scripts run: `jobs enqueue --wait` off a terminal says
// why it waits, once, and can stop waiting or print only the id; `forelead runner` takes its
// connection from the environment as every command does, both label forms, and stamps its lines.
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { useCliDir } from "../support/cli-dir.js";
import { useControlPlane } from "../support/fixture.js";

const cp = useControlPlane();
const cli = useCliDir(cp, "cli-wait-runner");
const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

describe("jobs enqueue --wait off a terminal", () => {
  it("prints the waiting reason once on stderr and stops at --wait-timeout with exit 124, the job kept", async () => {
    const ran = await cli.forel([
      "jobs",
      "enqueue",
      "--workspace",
      "wait-w1",
      "--labels",
      "nowhere,never",
      "--wait",
      "--wait-timeout",
      "2s",
      ...cli.connection(),
      "--",
      "true",
    ]);
    expect(ran.code).toBe(124);
    const waiting = ran.stderr.match(/waiting: [^\n;]*/g) ?? [];
    // Once when it starts, once in the timeout's line: the same reason, never repeated in between.
    expect(waiting).toHaveLength(2);
    expect(waiting[0]).toMatch(/never|nowhere|runner/);
    expect(ran.stderr).toMatch(
      /still queued after --wait-timeout 2s: waiting: .*; it stays enqueued: follow it with forelead jobs logs --follow [0-9a-f-]{36}, or cancel it/,
    );
    const id = /job ([0-9a-f-]{36}) queued/.exec(ran.stderr)![1]!;
    const job = await cp.admin.job(id);
    expect(job.status).toBe(200);
    expect(
      (JSON.parse(job.text) as { job: { state: string; labels: string[] } }).job,
    ).toMatchObject({
      state: "queued",
      labels: expect.arrayContaining(["nowhere", "never"]),
    });
  });

  it("--id-only prints the job's id alone; --quiet leaves only why the wait stopped on stderr", async () => {
    const ran = await cli.forel([
      "jobs",
      "enqueue",
      "--workspace",
      "wait-w1",
      "--label",
      "nowhere",
      "--id-only",
      "--quiet",
      "--wait",
      "--wait-timeout",
      "1s",
      ...cli.connection(),
      "--",
      "true",
    ]);
    expect(ran.code).toBe(124);
    expect(ran.stdout.trim()).toMatch(uuid);
    expect(ran.stderr.trim().split("\n")).toEqual([
      expect.stringMatching(/^forelead: job \S+ still queued after --wait-timeout 1s: waiting: /),
    ]);
    const plain = await cli.forel([
      "jobs",
      "enqueue",
      "--workspace",
      "wait-w1",
      "--id-only",
      ...cli.connection(),
      "--",
      "true",
    ]);
    expect(plain.code, plain.stderr).toBe(0);
    expect(plain.stdout).toMatch(/^[0-9a-f-]{36}\n$/);
    expect(plain.stderr).toBe("");
  });
});

describe("forelead runner", { timeout: 120_000 }, () => {
  it("takes --server, --ca, --cert and --key from FORELEAD_*, both label forms, and stamps its log lines", async () => {
    const cert = await cp.pki.runner("env-r1", "env-w1");
    await writeFile(join(cli.dir(), "env-r1.pem"), cert.certPem);
    await writeFile(join(cli.dir(), "env-r1-key.pem"), cert.keyPem, { mode: 0o600 });
    const enqueued = await cli.forel([
      "jobs",
      "enqueue",
      "--workspace",
      "env-w1",
      "--label",
      "gpu",
      "--labels",
      "fast,big",
      "--id-only",
      ...cli.connection(),
      "--",
      "true",
    ]);
    expect(enqueued.code, enqueued.stderr).toBe(0);
    const ran = await cli.forel(
      [
        "runner",
        "--executor",
        "process",
        "--once",
        "--idle-exit",
        "20s",
        "--labels",
        "gpu,fast",
        "--label",
        "big",
        "--work-dir",
        join(cli.dir(), "work"),
      ],
      {
        FORELEAD_SERVER: cp.url,
        FORELEAD_CA: join(cli.dir(), "ca.pem"),
        FORELEAD_CERT: join(cli.dir(), "env-r1.pem"),
        FORELEAD_KEY: join(cli.dir(), "env-r1-key.pem"),
      },
    );
    expect(ran.code, ran.stdout + ran.stderr).toBe(0);
    const lines = ran.stdout.split("\n").filter(Boolean);
    expect(lines.length).toBeGreaterThan(1);
    for (const line of lines)
      expect(line).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z forelead runner: /);
    const job = await cp.admin.job(enqueued.stdout.trim());
    expect((JSON.parse(job.text) as { job: { state: string } }).job.state).toBe("succeeded");
  });
});

// `forelead jobs enqueue --batch FILE`: the file's jobs (NDJSON or a JSON
// array, "-" for stdin) in one EnqueueJobs call, the flags as defaults.
import { spawn } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { databaseKind } from "../support/database.js";
import { foreleadBin, useCliDir } from "../support/cli-dir.js";
import { useControlPlane } from "../support/fixture.js";

const cp = useControlPlane();
const cli = useCliDir(cp, "cli-batch");
const slow = 300_000;

interface JobJson {
  id: string;
  state: string;
  workspaceId: string;
  labels?: string[];
  priority?: number;
  spec?: { image?: string; argv?: string[] };
  secretNames?: string[];
}

/** Runs `forelead ...args` with `input` on its standard input. */
function withStdin(
  args: readonly string[],
  input: string,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [foreleadBin, ...args], {
      cwd: cli.dir(),
      stdio: ["pipe", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(input);
  });
}

describe(`forelead jobs enqueue --batch (${databaseKind})`, () => {
  it(
    "enqueues an NDJSON file's jobs in one request with the flags as " +
      "defaults, prints them as a table or --json, and a repeat returns the " +
      "same jobs",
    async () => {
      const lines = [
        { spec: { argv: ["echo", "a"] }, idempotencyKey: "cli-a", priority: 5 },
        { spec: { argv: ["echo", "b"] }, idempotencyKey: "cli-b", labels: ["gpu"] },
        {
          workspaceId: "cb-other",
          spec: { image: "alpine", argv: ["echo", "c"] },
          secrets: { TOKEN: "cli-batch-secret-value" },
        },
      ];
      await writeFile(
        join(cli.dir(), "jobs.ndjson"),
        lines.map((l) => JSON.stringify(l)).join("\n") + "\n\n",
      );
      const out = await cli.forel([
        "jobs",
        "enqueue",
        "--batch",
        "jobs.ndjson",
        "--workspace",
        "cb-w1",
        "--image",
        "busybox",
        "--label",
        "linux",
        "--json",
        ...cli.connection(),
      ]);
      expect(out.code, out.stderr).toBe(0);
      expect(out.stdout + out.stderr).not.toContain("cli-batch-secret-value");
      const reply = JSON.parse(out.stdout) as { jobs: JobJson[]; created: number };
      expect(reply.created).toBe(3);
      expect(
        reply.jobs.map((j) => [
          j.workspaceId,
          j.spec?.image,
          j.spec?.argv,
          j.labels,
          j.priority ?? 0,
        ]),
      ).toEqual([
        ["cb-w1", "busybox", ["echo", "a"], ["linux"], 5],
        ["cb-w1", "busybox", ["echo", "b"], ["gpu"], 0],
        ["cb-other", "alpine", ["echo", "c"], ["linux"], 0],
      ]);
      expect(reply.jobs[2]!.secretNames).toEqual(["TOKEN"]);
      // The table: one row per job, in the file's order, then the count; the keyed jobs are the
      // same again.
      const table = await cli.forel([
        "jobs",
        "enqueue",
        "--batch",
        "jobs.ndjson",
        "--workspace",
        "cb-w1",
        "--image",
        "busybox",
        "--label",
        "linux",
        ...cli.connection(),
      ]);
      expect(table.code, table.stderr).toBe(0);
      const rows = table.stdout.trim().split("\n");
      expect(rows[0]).toMatch(/^INDEX\s+JOB\s+STATE\s+WORKSPACE$/);
      expect(rows[1]).toMatch(new RegExp(`^0\\s+${reply.jobs[0]!.id}\\s+queued\\s+cb-w1$`));
      expect(rows[2]).toMatch(new RegExp(`^1\\s+${reply.jobs[1]!.id}\\s+queued\\s+cb-w1$`));
      expect(rows[4]).toBe(
        "3 jobs, 1 new (the others were already enqueued under their idempotency keys)",
      );
    },
    slow,
  );

  it(
    "reads a JSON array from stdin with -, and names a bad item, a bad line and the server's refusal by index",
    async () => {
      const array = JSON.stringify(
        [1, 2].map((i) => ({
          workspaceId: "cb-stdin",
          spec: { image: "busybox", argv: ["echo", String(i)] },
        })),
      );
      const fromStdin = await withStdin(
        ["jobs", "enqueue", "--batch", "-", "--json", ...cli.connection()],
        array,
      );
      expect(fromStdin.code, fromStdin.stderr).toBe(0);
      expect(
        (JSON.parse(fromStdin.stdout) as { jobs: JobJson[] }).jobs.map((j) => j.spec?.argv?.[1]),
      ).toEqual(["1", "2"]);
      await writeFile(
        join(cli.dir(), "bad.ndjson"),
        `{"spec":{"argv":["true"]}}\n{"spec": nope}\n`,
      );
      const badLine = await cli.forel([
        "jobs",
        "enqueue",
        "--batch",
        "bad.ndjson",
        "--workspace",
        "cb-bad",
        ...cli.connection(),
      ]);
      expect(badLine.code).not.toBe(0);
      expect(badLine.stderr).toContain("--batch bad.ndjson line 2 is not JSON");
      await writeFile(
        join(cli.dir(), "field.json"),
        JSON.stringify([{ spec: { argv: ["true"] } }, { prio: 1 }]),
      );
      const badField = await cli.forel([
        "jobs",
        "enqueue",
        "--batch",
        "field.json",
        "--workspace",
        "cb-bad",
        ...cli.connection(),
      ]);
      expect(badField.code).not.toBe(0);
      expect(badField.stderr).toContain("--batch field.json item 1: ");
      expect(badField.stderr).toContain("prio");
      await writeFile(
        join(cli.dir(), "refused.ndjson"),
        `{"spec":{"argv":["true"]}}\n{"spec":{"argv":[]}}\n`,
      );
      const refused = await cli.forel([
        "jobs",
        "enqueue",
        "--batch",
        "refused.ndjson",
        "--workspace",
        "cb-bad",
        ...cli.connection(),
      ]);
      expect(refused.code).not.toBe(0);
      expect(refused.stderr).toContain(
        "1 of 2 jobs refused, so nothing was stored: jobs[1]: spec.argv is required",
      );
      const withWait = await cli.forel([
        "jobs",
        "enqueue",
        "--batch",
        "refused.ndjson",
        "--wait",
        ...cli.connection(),
      ]);
      expect(withWait.code).not.toBe(0);
      expect(withWait.stderr).toContain("--wait follows one job; it does not apply with --batch");
      const noWorkspace = await cli.forel(["jobs", "enqueue", ...cli.connection(), "--", "true"]);
      expect(noWorkspace.code).not.toBe(0);
      expect(noWorkspace.stderr).toContain("required option '--workspace <id>' not specified");
    },
    slow,
  );
});

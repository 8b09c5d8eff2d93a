import "reflect-metadata";
import { describe, expect, it } from "vitest";
import { leasedJob } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useCliDir } from "../support/cli-dir.js";
import { useControlPlane } from "../support/fixture.js";

// What `forelead jobs get` shows a person (issue 46 items 3 and 6): the job's progress as a bar
// and its result JSON, in the human output and not only with --json.
const cp = useControlPlane();
const { admin } = cp;
const cli = useCliDir(cp, "cli-job-view");
const { forel, connection } = cli;

describe(`forelead jobs get, for people (${databaseKind})`, () => {
  it(
    "shows the job's progress as a bar with its figures, and its result JSON: " +
      "a short one on its line, a long one indented below the facts",
    { timeout: 90_000 },
    async () => {
      const j = await leasedJob(cp, admin, "jv-r1", "jv1");
      const sent = await j.runner.rest.ndjson("/v1/runner/events", [
        j.msg(1, { type: "job.progress", done: 3, total: 10 }),
      ]);
      expect(sent.status, sent.text).toBe(204);
      const running = await forel(["jobs", "get", j.jobId, ...connection()]);
      expect(running.code, running.stderr).toBe(0);
      expect(running.stdout).toMatch(
        /^progress: +\[######--------------\] 3\/10 \(30%\) at \d{4}-\d\d-\d\dT[\d:.]+Z$/m,
      );
      expect(running.stdout).not.toMatch(/^result/m);
      const done = await j.runner.complete(j.jobId, j.token, { result: { coverage: 81.5 } });
      expect(done.status, done.text).toBe(200);
      const settled = await forel(["jobs", "get", j.jobId, ...connection()]);
      expect(settled.stdout).toMatch(/^result: +\{"coverage":81\.5\}$/m);

      const k = await leasedJob(cp, admin, "jv-r2", "jv2");
      await k.runner.rest.ndjson("/v1/runner/events", [
        k.msg(1, { type: "job.progress", percent: 42.5 }),
      ]);
      const long = { files: ["src/a.ts", "src/b.ts", "src/c.ts"], summary: "x".repeat(60) };
      expect((await k.runner.complete(k.jobId, k.token, { result: long })).status).toBe(200);
      const text = (await forel(["jobs", "get", k.jobId, ...connection()])).stdout;
      expect(text).toMatch(/^progress: +\[#########-----------\] 42\.5% at /m);
      expect(text).toMatch(/^result: +\(below\)$/m);
      expect(text.slice(text.indexOf("result JSON:\n") + "result JSON:\n".length)).toBe(
        `${JSON.stringify(long, null, 2)}\n`,
      );
      await j.runner.close();
      await k.runner.close();
    },
  );
});

describe(`short job ids in forelead jobs get/logs/cancel (${databaseKind})`, () => {
  it(
    "take any unique end of 8 or more characters of a job id; an ambiguous one " +
      "names the candidates, a short one says how long it must be",
    { timeout: 120_000 },
    async () => {
      const enqueue = async () =>
        (await admin.enqueue({ workspaceId: "jv-short" })).json.job.id as string;
      const [a, b, c] = [await enqueue(), await enqueue(), await enqueue()];
      // Two jobs whose ids end alike (as ids of one batch could in their leading characters):
      // the stored ids of b and c are made to share their last 12 characters.
      const shared = "0123456789ab";
      const [b2, c2] = [b, c].map((id, i) => `${id.slice(0, 24)}${i}${shared.slice(1)}`);
      const db = cp.plane.store.db;
      await db.updateTable("jobs").set({ id: b2! }).where("id", "=", b).execute();
      await db.updateTable("jobs").set({ id: c2! }).where("id", "=", c).execute();

      const got = await forel(["jobs", "get", a.slice(-8), ...connection()]);
      expect(got.code, got.stderr).toBe(0);
      expect(got.stdout).toMatch(new RegExp(`^job: +${a}$`, "m"));
      const upper = await forel(["jobs", "get", a.slice(-12).toUpperCase(), ...connection()]);
      expect(upper.stdout).toMatch(new RegExp(`^job: +${a}$`, "m"));
      const logs = await forel(["jobs", "logs", a.slice(-10), ...connection()]);
      expect(logs.code, logs.stderr).toBe(0);
      expect(logs.stdout).toBe("");

      const ambiguous = await forel(["jobs", "cancel", shared.slice(-10), ...connection()]);
      expect(ambiguous.code).toBe(1);
      expect(ambiguous.stderr).toContain(
        `"${shared.slice(-10)}" is the end of 2 job ids; give more of the id:`,
      );
      expect(ambiguous.stderr).toContain(`${b2}  queued  jv-short`);
      expect(ambiguous.stderr).toContain(`${c2}  queued  jv-short`);
      expect((await admin.job(b2!)).json.job.state).toBe("queued");

      const cancelled = await forel(["jobs", "cancel", `0${shared.slice(1)}`, ...connection()]);
      expect(cancelled.code, cancelled.stderr).toBe(0);
      expect(cancelled.stdout).toBe(`job ${b2} cancelled\n`);

      const short = await forel(["jobs", "get", a.slice(-7), ...connection()]);
      expect(short.code).toBe(1);
      expect(short.stderr).toContain(`is not a short job id: the last 8 to 36 characters`);
      expect(short.stderr).toContain("give at least 8");
      const none = await forel(["jobs", "get", "ffffffffffff", ...connection()]);
      expect(none.code).toBe(1);
      expect(none.stderr).toContain(`no job id ends with "ffffffffffff"`);
    },
  );
});

describe(`job names in the CLI (${databaseKind})`, () => {
  it(
    "jobs enqueue --name names the job; jobs get shows it, jobs list in its name column " +
      "(a long one cut); a name with a control character is refused",
    { timeout: 120_000 },
    async () => {
      const long = `Release ${"x".repeat(60)}`;
      const ids: string[] = [];
      for (const name of ["Nightly build", long]) {
        const enq = await forel([
          "jobs",
          "enqueue",
          "--workspace",
          "jv-names",
          "--name",
          name,
          "--id-only",
          ...connection(),
          "--",
          "true",
        ]);
        expect(enq.code, enq.stderr).toBe(0);
        ids.push(enq.stdout.trim());
      }
      const got = await forel(["jobs", "get", ids[0]!, ...connection()]);
      expect(got.stdout).toMatch(/^name: +Nightly build$/m);
      const list = await forel(["jobs", "list", "--workspace", "jv-names", ...connection()]);
      expect(list.stdout).toMatch(/^job +name +state +workspace/m);
      expect(list.stdout).toMatch(new RegExp(`^${ids[0]} +Nightly build +queued +jv-names`, "m"));
      expect(list.stdout).toMatch(
        new RegExp(`^${ids[1]} +${long.slice(0, 31)}… +queued +jv-names`, "m"),
      );
      const bad = await forel([
        "jobs",
        "enqueue",
        "--workspace",
        "jv-names",
        "--name",
        "two\nlines",
        ...connection(),
        "--",
        "true",
      ]);
      expect(bad.code).toBe(1);
      expect(bad.stderr).toContain("displayName holds a control character (U+000A at index 3)");
    },
  );
});

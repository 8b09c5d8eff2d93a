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

import "reflect-metadata";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { leasedJob } from "../support/actors.js";
import { restUploads, sha256 } from "../support/artifacts.js";
import { databaseKind } from "../support/database.js";
import { useCliDir } from "../support/cli-dir.js";
import { useControlPlane } from "../support/fixture.js";

const cp = useControlPlane();
const { admin } = cp;
const cli = useCliDir(cp, "cli-artifacts");
const { forel, connection } = cli;

describe(`forelead jobs artifacts / download (${databaseKind})`, () => {
  it(
    "lists a job's artifacts and downloads one, checked against its digest",
    { timeout: 90_000 },
    async () => {
      const data = Buffer.from("line 1\nline 2\n");
      const j = await leasedJob(cp, admin, "r1", "cli1");
      const up = restUploads(j);
      const id = (await up.open("logs/build.log", data.length, sha256(data), "text/plain")).json
        .uploadId;
      await up.put(id, 0, data);
      const entry = (await up.finalize(id)).json;
      expect((await j.runner.complete(j.jobId, j.token, { artifacts: [entry] })).status).toBe(200);
      await j.runner.close();

      const list = await forel(["jobs", "artifacts", j.jobId, ...connection()]);
      expect(list.code, list.stderr).toBe(0);
      expect(list.stdout).toBe(`logs/build.log\t${data.length}\t${sha256(data)}\ttext/plain\n`);

      const got = await forel(["jobs", "download", j.jobId, "logs/build.log", ...connection()]);
      expect(got.code, got.stderr).toBe(0);
      expect(got.stderr).toContain(`wrote build.log (${data.length} bytes, ${sha256(data)})`);
      expect(await readFile(join(cli.dir(), "build.log"))).toEqual(data);
      const again = await forel(["jobs", "download", j.jobId, "logs/build.log", ...connection()]);
      expect(again.code).toBe(1);
      expect(again.stderr).toContain("build.log exists; pass --force");
      const stdout = await forel([
        "jobs",
        "download",
        j.jobId,
        "logs/build.log",
        "--out",
        "-",
        ...connection(),
      ]);
      expect(stdout.stdout).toBe(data.toString());
      const missing = await forel(["jobs", "download", j.jobId, "nope.txt", ...connection()]);
      expect(missing.code).toBe(1);
      expect(missing.stderr).toContain('has no artifact named "nope.txt"');
    },
  );

  it("serve refuses a --max-artifact-size that is not a size", async () => {
    const bad = await forel([
      "serve",
      "--listen",
      "127.0.0.1:0",
      "--database",
      "memory://",
      "--max-artifact-size",
      "lots",
    ]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain(
      "--max-artifact-size must be a size such as 2GiB, 500MiB or 1048576",
    );
  });
});

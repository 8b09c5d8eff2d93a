import "reflect-metadata";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { databaseKind } from "../support/database.js";
import { useCliDir } from "../support/cli-dir.js";
import { useControlPlane } from "../support/fixture.js";

const cp = useControlPlane();
const cli = useCliDir(cp, "cli-schedules");
const forel = (args: string[]) => cli.forel([...args, ...cli.connection()]);

describe(`forelead schedules (${databaseKind})`, () => {
  it(
    "creates from a YAML file, lists, gets, runs now, pauses, resumes and deletes; " +
      "a bad cron's refusal is printed",
    { timeout: 120_000 },
    async () => {
      await writeFile(
        join(cli.dir(), "s.yaml"),
        [
          "name: nightly",
          "workspaceId: clis",
          'cron: "0 3 * * *"',
          "timeZone: Europe/Berlin",
          "overlap: skip",
          "job:",
          "  labels: [linux]",
          '  spec: {image: busybox, argv: ["true"]}',
          "  secrets: {TOKEN: cli-secret-4471}",
          "",
        ].join("\n"),
      );
      const created = await forel(["schedules", "create", "s.yaml", "--json"]);
      expect(created.code, created.stderr).toBe(0);
      const schedule = JSON.parse(created.stdout).schedule;
      expect(schedule).toMatchObject({ name: "nightly", overlap: "skip", secretNames: ["TOKEN"] });
      expect(created.stdout).not.toContain("cli-secret-4471");
      const listed = await forel(["schedules", "list", "--workspace", "clis"]);
      expect(listed.stdout).toMatch(
        new RegExp(
          `^${schedule.id}\\s+clis\\s+nightly\\s+0 3 \\* \\* \\*\\s+Europe/Berlin\\s+`,
          "m",
        ),
      );
      const run = await forel(["schedules", "run-now", schedule.id]);
      expect(run.code, run.stderr).toBe(0);
      expect(run.stdout).toMatch(/\smanual\s+enqueued\s+[0-9a-f-]{36}\s+-$/m);
      const got = await forel(["schedules", "get", schedule.id]);
      expect(got.stdout).toContain(`schedule ${schedule.id} "nightly" in workspace "clis"`);
      expect(got.stdout).toMatch(/manual\s+enqueued/);
      const paused = await forel(["schedules", "pause", schedule.id]);
      expect(paused.stdout).toContain("paused by spiffe://");
      const resumed = await forel(["schedules", "resume", schedule.id]);
      expect(resumed.stdout).toContain("next run ");
      const deleted = await forel(["schedules", "delete", schedule.id]);
      expect(deleted.stdout).toBe(`deleted schedule ${schedule.id} "nightly"\n`);
      const bad = await forel(["schedules", "create", "s.yaml", "--cron", "0 3 * *"]);
      expect(bad.code).toBe(1);
      expect(bad.stderr).toContain('cron "0 3 * *" is not a cron expression');
    },
  );
});

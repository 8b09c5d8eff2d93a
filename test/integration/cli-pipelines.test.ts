import "reflect-metadata";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { registeredRunner } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useCliDir } from "../support/cli-dir.js";
import { useControlPlane } from "../support/fixture.js";

const cp = useControlPlane();
const cli = useCliDir(cp, "cli-pipelines");
const forel = (args: string[]) => cli.forel([...args, ...cli.connection()]);

describe(`forelead pipelines and jobs retry (${databaseKind})`, () => {
  it(
    "submits a YAML file, gets, lists, cancels and resumes it; a bad graph's " +
      "refusal is printed; jobs retry links a new job",
    { timeout: 120_000 },
    async () => {
      await writeFile(
        join(cli.dir(), "p.yaml"),
        [
          "workspaceId: clip",
          "name: from-yaml",
          "steps:",
          "  - name: build",
          "    displayName: Build the images",
          "    labels: [linux]",
          '    spec: {image: busybox, argv: ["true"]}',
          "  - name: test",
          "    needs: [build]",
          "    labels: [linux]",
          '    spec: {image: busybox, argv: ["true"]}',
          "",
        ].join("\n"),
      );
      const submitted = await forel(["pipelines", "submit", "p.yaml", "--json"]);
      expect(submitted.code, submitted.stderr).toBe(0);
      const pipeline = JSON.parse(submitted.stdout).pipeline;
      expect(
        pipeline.steps.map((s: { name: string; state: string }) => `${s.name}:${s.state}`),
      ).toEqual(["build:queued", "test:pending"]);
      const got = await forel(["pipelines", "get", pipeline.id]);
      expect(got.stdout).toContain(
        `pipeline ${pipeline.id} "from-yaml" in workspace "clip": queued`,
      );
      expect(got.stdout).toMatch(/^STEP\s+NAME\s+NEEDS\s+STATE/m);
      expect(got.stdout).toMatch(/^build\s+Build the images\s+-\s+queued\s+1\s+\S+$/m);
      expect(got.stdout).toMatch(/^test\s+-\s+build\s+pending\s+0\s+-$/m);
      const listed = await forel(["pipelines", "list", "--workspace", "clip"]);
      expect(listed.stdout).toMatch(
        new RegExp(`^${pipeline.id}\\s+clip\\s+from-yaml\\s+queued\\s+0/2`, "m"),
      );
      const cancelled = await forel(["pipelines", "cancel", pipeline.id, "--json"]);
      expect(JSON.parse(cancelled.stdout).pipeline.state).toBe("cancelled");
      const resumed = await forel(["pipelines", "resume", pipeline.id, "--from-step", "build"]);
      expect(resumed.code, resumed.stderr).toBe(0);
      expect(resumed.stdout).toMatch(/^build\s+Build the images\s+-\s+queued\s+2\s+/m);

      await writeFile(
        join(cli.dir(), "cycle.json"),
        JSON.stringify({
          workspaceId: "clip",
          name: "c",
          steps: [
            { name: "a", needs: ["b"] },
            { name: "b", needs: ["a"] },
          ],
        }),
      );
      const cycle = await forel(["pipelines", "submit", "cycle.json"]);
      expect(cycle.code).toBe(1);
      expect(cycle.stderr).toContain("the steps form a cycle: a → b → a (each needs the next)");

      const runner = await registeredRunner(cp, "r-cli-retry", "clir");
      const enq = await cp.admin.enqueue({ workspaceId: "clir" });
      const claim = await runner.claim({ waitSeconds: 5 });
      await runner.complete(claim.json.job.id, claim.json.token, {
        outcome: "failed",
        exitCode: 1,
        error: { code: "exit_code", message: "exited 1" },
      });
      const retried = await forel(["jobs", "retry", enq.json.job.id]);
      expect(retried.code, retried.stderr).toBe(0);
      expect(retried.stdout).toMatch(
        new RegExp(`^job [0-9a-f-]{36} retries job ${enq.json.job.id} \\(queued\\)$`, "m"),
      );
      await runner.close();
    },
  );
});

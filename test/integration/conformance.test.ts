import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { executorsUnderTest, testImage } from "../support/runner-agent.js";

const run = promisify(execFile);
const forelead = join(process.cwd(), "bin/forelead.js");
const brokenRunner = join(process.cwd(), "test/fixtures/broken-runner.mjs");
const executors = await executorsUnderTest();

/**
 * The rows that need a feature the runner declares (src/protocol/features.ts), and the reason each
 * is skipped for a runner declaring none.
 */
const featureRows = ["progress", "result", "suspend"];
const undeclaredReasons = [
  "the runner does not declare progress-v1",
  "the runner does not declare result-v1",
  "the runner does not declare checkpoint-v1, input-v1",
];

interface Row {
  readonly row: string;
  readonly result: "pass" | "fail" | "skip";
  readonly reason: string;
}

/** Runs `forelead conformance --json` against `runnerCommand`; its rows and exit code. */
async function conformance(
  runnerCommand: string,
  flags: string[] = [],
): Promise<{ rows: Row[]; exitCode: number; stderr: string }> {
  const args = [forelead, "conformance", "--json", "--runner-command", runnerCommand, ...flags];
  const { stdout, stderr, exitCode } = await run(process.execPath, args, {
    maxBuffer: 16 * 1024 * 1024,
  }).then(
    (r) => ({ ...r, exitCode: 0 }),
    (err: { stdout: string; stderr: string; code: number }) => ({
      stdout: err.stdout,
      stderr: err.stderr,
      exitCode: err.code,
    }),
  );
  return {
    rows: stdout
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Row),
    exitCode,
    stderr,
  };
}

const rowsWith = (rows: Row[], result: Row["result"]) =>
  rows.filter((r) => r.result === result).map((r) => r.row);
/** The failed rows with their reasons, for an assertion's message. */
const failures = (rows: Row[]) =>
  JSON.stringify(
    rows.filter((r) => r.result === "fail"),
    null,
    1,
  );

describe("forelead conformance", () => {
  for (const executor of executors) {
    it(
      `passes for forelead runner with the ${executor} executor`,
      { timeout: 360_000 },
      async () => {
        const runner =
          `${process.execPath} ${forelead} runner --server {server} --ca {ca} ` +
          `--cert {cert} --key {key} --executor ${executor} --slots 1 --work-dir ` +
          `{workDir} --grace-seconds 1 --sample-interval-ms 0`;
        const { rows, exitCode, stderr } = await conformance(runner, [
          "--executor",
          executor,
          ...(executor === "docker" ? ["--image", testImage] : []),
        ]);
        expect(
          rows.filter((r) => r.result === "fail"),
          stderr,
        ).toEqual([]);
        expect(rowsWith(rows, "skip")).toEqual([]);
        expect(rowsWith(rows, "pass")).toEqual([
          "register",
          "success",
          "failure",
          "incompatible-spec",
          "cancel",
          "timeout",
          "renew",
          "expired-lease",
          "isolation",
          "upload-digest",
          "secrets",
          "repeated-complete",
          ...featureRows,
        ]);
        expect(exitCode).toBe(0);
      },
    );
  }

  it(
    "a runner that never renews fails the cancel and renew rows, and only those",
    { timeout: 300_000 },
    async () => {
      const { rows, exitCode } = await conformance(
        `${process.execPath} ${brokenRunner} never-renew`,
      );
      expect(rowsWith(rows, "fail"), failures(rows)).toEqual(["cancel", "renew"]);
      expect(rows.find((r) => r.row === "cancel")?.reason).toMatch(
        /settled by the control plane: cancelled/,
      );
      // The table shows the runner's side of a failure: its output while the row ran.
      expect(rows.find((r) => r.row === "renew")?.reason).toMatch(
        /\nthe runner's output while the row ran:\n(.*\n)*broken runner \(never-renew\): job [0-9a-f-]{36}: lease lost; not completed/,
      );
      expect(rows.find((r) => r.row === "renew")?.reason).toMatch(
        /settled by the control plane: lease_lost/,
      );
      expect(rows.filter((r) => r.result === "skip").map((r) => r.reason)).toEqual(
        undeclaredReasons,
      );
      expect(rowsWith(rows, "skip")).toEqual(featureRows);
      expect(exitCode).toBe(1);
    },
  );

  it(
    "a runner that completes every job twice, differently, fails the repeated-complete row, and only that",
    { timeout: 300_000 },
    async () => {
      const { rows, exitCode } = await conformance(
        `${process.execPath} ${brokenRunner} complete-twice`,
      );
      expect(rowsWith(rows, "fail"), failures(rows)).toEqual(["repeated-complete"]);
      expect(rows.find((r) => r.row === "repeated-complete")?.reason).toMatch(
        /refused completions: \d+ × 409/,
      );
      expect(rows.filter((r) => r.result === "skip").map((r) => r.reason)).toEqual(
        undeclaredReasons,
      );
      expect(exitCode).toBe(1);
    },
  );

  it(
    "a runner command that exits at once fails register and skips the rest",
    { timeout: 120_000 },
    async () => {
      const { rows, exitCode } = await conformance("echo no runner here; exit 4", [
        "--timeout",
        "10s",
      ]);
      expect(rows[0]).toMatchObject({ row: "register", result: "fail" });
      expect(rows[0]!.reason).toMatch(
        /the runner exited \(exit code 4\) without registering; its output:\nno runner here/,
      );
      expect(
        rows
          .slice(1)
          .every((r) => r.result === "skip" && r.reason === "the runner did not register"),
      ).toBe(true);
      expect(exitCode).toBe(1);
    },
  );
});

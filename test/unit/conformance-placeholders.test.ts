import { execFileSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { placeholders, substitute, type RunnerLaunch } from "../../src/conformance/harness.js";

const launch: RunnerLaunch = {
  server: "https://127.0.0.1:4443",
  ca: "/tmp/a dir/ca.pem",
  cert: "/tmp/it's/runner.pem",
  key: "/tmp/k/runner-key.pem",
  runnerId: "conformance-abc123",
  workspaceId: "conformance",
  workDir: "/tmp/w/$HOME/`x`",
};

describe("the runner command's placeholders", () => {
  it("each placeholder reaches the command as one word, whatever its characters; unknown braces stay", () => {
    const command = substitute(
      "printf '%s\\n' {server} {ca} {cert} {key} {runnerId} {workspaceId} {workDir} {other}",
      launch,
    );
    const words = execFileSync("sh", ["-c", command], { encoding: "utf8" })
      .split("\n")
      .slice(0, -1);
    expect(words).toEqual([
      launch.server,
      launch.ca,
      launch.cert,
      launch.key,
      launch.runnerId,
      launch.workspaceId,
      launch.workDir,
      "{other}",
    ]);
  });

  it("every placeholder has an environment variable of its own", () => {
    expect(Object.keys(placeholders).sort()).toEqual(Object.keys(launch).sort());
    expect(new Set(Object.values(placeholders)).size).toBe(Object.keys(launch).length);
  });
});

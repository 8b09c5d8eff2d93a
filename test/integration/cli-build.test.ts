// The compiled `forelead` (npm run build → dist/, what bin/forelead.js runs after npm ci): built
// from the sources under test before the suites run (test/support/build-cli.ts), run as a user
// runs it. --help lists every command group, --version prints the build
// facts that GET /v1/admin/status reports (src/server/build-info.ts) on every command.
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { commandGroups } from "../../src/cli/main.js";
import { readBuildInfo } from "../../src/server/build-info.js";

const run = promisify(execFile);
const repoRoot = process.cwd();
const env = { ...process.env, FORELEAD_RUN_SOURCE: "" };

async function compiled(
  ...args: string[]
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(
      process.execPath,
      [join(repoRoot, "bin/forelead.js"), ...args],
      { cwd: repoRoot, env, timeout: 30_000 },
    );
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return {
      code: typeof e.code === "number" ? e.code : -1,
      stdout: e.stdout ?? "",
      stderr: e.stderr ?? "",
    };
  }
}

/** `forelead --version`'s lines as a record: version, commit, built, node. */
function parseVersion(stdout: string): Record<string, string> {
  const [first, ...rest] = stdout.trim().split("\n");
  const version = /^forelead (\S+)$/.exec(first ?? "")?.[1];
  return {
    version: version ?? "",
    ...Object.fromEntries(
      rest.map((l) => [l.slice(0, l.indexOf(":")), l.slice(l.indexOf(":") + 1).trim()]),
    ),
  };
}

describe("the compiled forelead command", () => {
  it("npm run build leaves dist/cli/main.js, and the compiled --help lists every command group", async () => {
    expect(existsSync(join(repoRoot, "dist/cli/main.js"))).toBe(true);
    const help = await compiled("--help");
    expect(help.code, help.stderr).toBe(0);
    // Not the fallback: that one says so on stderr.
    expect(help.stderr).toBe("");
    const listed = [...help.stdout.matchAll(/^ {2}(\S+)(?: \[\w+\])?/gm)].map((m) => m[1]);
    for (const group of commandGroups) expect(listed, help.stdout).toContain(group.name);
  });

  it(
    "--version, on the top level and on a subcommand, and `forelead version " +
      "--json` print the build facts status reports",
    async () => {
      const expected = readBuildInfo();
      const top = await compiled("--version");
      expect(top.code, top.stderr).toBe(0);
      expect(parseVersion(top.stdout)).toEqual({
        version: expected.version,
        commit: expected.commit,
        built: expected.buildDate || "unknown",
        node: process.version,
      });

      // A subcommand's own --version wins over its required flags (jobs list needs --server
      // otherwise).
      const sub = await compiled("jobs", "list", "--version");
      expect(sub.code, sub.stderr).toBe(0);
      expect(sub.stdout).toBe(top.stdout);

      const json = await compiled("version", "--json");
      expect(json.code, json.stderr).toBe(0);
      expect(JSON.parse(json.stdout)).toEqual({ ...expected, node: process.version });
    },
  );

  it("a group's own help comes from its loaded module; an unknown command is refused with the usage hint", async () => {
    const jobs = await compiled("help", "jobs");
    expect(jobs.code, jobs.stderr).toBe(0);
    expect(jobs.stdout).toMatch(/^Usage: forelead jobs/m);
    expect(jobs.stdout).toMatch(/^ {2}list \[options\]/m);

    const unknown = await compiled("nosuch");
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain("unknown command 'nosuch'");
  });
});

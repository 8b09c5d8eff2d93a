import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

/** Which build this process runs: what `GET /v1/admin/status` and `forelead --version` report. */
export interface BuildInfo {
  /** package.json's version. */
  readonly version: string;
  /** `git rev-parse HEAD` of the checkout, else FORELEAD_COMMIT, else "unknown". */
  readonly commit: string;
  /** FORELEAD_BUILD_DATE, else the commit's date (RFC 3339), else "". */
  readonly buildDate: string;
}

/**
 * Set by the build (scripts/build.ts, esbuild's `define`) to what readBuildInfo() said when the
 * compiled command was made; not defined when the TypeScript sources run (tests, tsx).
 */
declare const FORELEAD_BUILD_STAMP: BuildInfo | undefined;

let cached: BuildInfo | undefined;

/** The build info, read once per process: the build's stamp, or (sources) readBuildInfo(). */
export function buildInfo(): BuildInfo {
  cached ??= typeof FORELEAD_BUILD_STAMP === "object" ? FORELEAD_BUILD_STAMP : readBuildInfo();
  return cached;
}

/** The build info of the checkout these sources are in (git runs at most twice). */
export function readBuildInfo(): BuildInfo {
  const repoRoot = fileURLToPath(new URL("../..", import.meta.url));
  return {
    version: (
      JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
        version: string;
      }
    ).version,
    commit: git(repoRoot, "rev-parse", "HEAD") ?? process.env.FORELEAD_COMMIT ?? "unknown",
    buildDate:
      process.env.FORELEAD_BUILD_DATE ?? git(repoRoot, "show", "-s", "--format=%cI", "HEAD") ?? "",
  };
}

/**
 * One git query in the checkout; undefined when git or the checkout is not there (an installed
 * package).
 */
function git(repoRoot: string, ...args: string[]): string | undefined {
  try {
    return (
      execFileSync("git", args, {
        cwd: repoRoot,
        encoding: "utf8",
        stdio: ["ignore", "pipe", "ignore"],
        timeout: 5_000,
      }).trim() || undefined
    );
  } catch {
    return undefined;
  }
}

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

const repoRoot = fileURLToPath(new URL("../..", import.meta.url));
let cached: BuildInfo | undefined;

/** The build info, read once per process (git runs at most twice, at the first call). */
export function buildInfo(): BuildInfo {
  cached ??= {
    version: (JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }).version,
    commit: git("rev-parse", "HEAD") ?? process.env.FORELEAD_COMMIT ?? "unknown",
    buildDate: process.env.FORELEAD_BUILD_DATE ?? git("show", "-s", "--format=%cI", "HEAD") ?? "",
  };
  return cached;
}

/** One git query in the checkout; undefined when git or the checkout is not there (an installed package). */
function git(...args: string[]): string | undefined {
  try {
    return execFileSync("git", args, { cwd: repoRoot, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"], timeout: 5_000 }).trim() || undefined;
  } catch {
    return undefined;
  }
}

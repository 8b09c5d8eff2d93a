import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";

/**
 * The dashboard's browser tests. They run after every other file, never beside one: chromium
 * fails its in-flight requests with net::ERR_NETWORK_CHANGED whenever a network interface comes or
 * goes, and the Docker suites (conformance's docker executor, the docker runner) add and remove a
 * container's veth interface with every job. Beside them a page's fetch or module import failed
 * ("Failed to fetch"), and so did CI at 7bbbb37 (2026-12-03).
 */
const browserTests = ["test/integration/dashboard-*.test.ts"];

export default defineConfig({
  test: {
    // At least two files at a time, also on a 2-core machine (vitest's default there is one): the
    // suites mostly wait on servers, child processes and timers. Measured on 2 cores (2026-12-02),
    // the embedded suite: one file at a time 912 s of wall time, the CPU ~20 % busy; two at a time
    // 529 s, the CPU ~78 % busy; the Postgres suite 285 s. Three were not tried: at two the CPU is
    // mostly busy, and some suites are timing-sensitive (runner restarts, dashboards, lease expiry).
    maxWorkers: Math.max(2, availableParallelism() - 1),
    setupFiles: ["test/support/setup.ts"],
    // Servers, databases and certificates are real: give them room.
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: "forks",
    // dist/ is built from the sources under test before the suites run, so a spawned
    // bin/forelead.js runs the compiled command, as users do, and is never stale.
    globalSetup: ["test/support/build-cli.ts"],
    // Groups run one after another, lowest first; the files of a group two at a time.
    projects: [
      // (Not `exclude`: a project's own exclude would drop the --exclude of the command line.)
      {
        extends: true,
        test: {
          name: "suites",
          include: ["test/unit/**/*.test.ts", "test/integration/!(dashboard-)*.test.ts"],
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: { name: "browser", include: browserTests, sequence: { groupOrder: 1 } },
      },
    ],
  },
});

import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    setupFiles: ["test/support/setup.ts"],
    // Servers, databases and certificates are real: give them room.
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: "forks",
    // At least two files at a time, also on a 2-core machine (vitest's default there is one): the
    // suites mostly wait on servers, child processes and timers. Measured on 2 cores (2026-12-02),
    // the embedded suite: one file at a time 912 s of wall time, the CPU ~20 % busy; two at a time
    // 529 s, the CPU ~78 % busy; the Postgres suite 285 s. Three were not tried: at two the CPU is
    // mostly busy, and some suites are timing-sensitive (runner restarts, dashboards, lease expiry).
    maxWorkers: Math.max(2, availableParallelism() - 1),
    // dist/ is built from the sources under test before the suites run, so a spawned
    // bin/forelead.js runs the compiled command, as users do, and is never stale.
    globalSetup: ["test/support/build-cli.ts"],
  },
});

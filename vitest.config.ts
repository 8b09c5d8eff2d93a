import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    setupFiles: ["test/support/setup.ts"],
    // Servers, databases and certificates are real: give them room.
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: "forks",
    // dist/ is built from the sources under test before the suites run, so a spawned
    // bin/forelead.js runs the compiled command, as users do, and is never stale.
    globalSetup: ["test/support/build-cli.ts"],
  },
});

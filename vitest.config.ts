import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    setupFiles: ["test/support/setup.ts"],
    // Servers, databases and certificates are real: give them room.
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: "forks",
    // A spawned bin/forelead.js runs the TypeScript sources under test, not a dist/ build that may
    // be stale (test/integration/cli-build.test.ts builds and runs the compiled command itself).
    env: { FORELEAD_RUN_SOURCE: "1" },
  },
});

import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    setupFiles: ["test/support/setup.ts"],
    // Servers, databases and certificates are real: give them room.
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: "forks",
  },
});

// vitest globalSetup: builds dist/ (`npm run build`: scripts/build.ts) from the sources under test
// once, before any suite runs, so every spawned bin/forelead.js runs the compiled command a user
// runs — never a stale build — and starts in a fraction of the time the TypeScript sources take.
// Each project of vitest.config.ts runs its global setup; the first one of a run builds.
import { execFile } from "node:child_process";
import { promisify } from "node:util";

const built = "FORELEAD_TEST_DIST_BUILT";

export default async function setup(): Promise<void> {
  if (process.env[built] === String(process.pid)) return;
  await promisify(execFile)(process.execPath, ["--import", "tsx", "scripts/build.ts"], {
    cwd: process.cwd(),
    timeout: 120_000,
  });
  process.env[built] = String(process.pid);
}

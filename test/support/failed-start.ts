/**
 * Run as its own process by control-plane-lifecycle.test.ts:
 * `node --import tsx failed-start.ts PORT DATABASE KIND`. Starts a test
 * control plane on PORT (already taken, so the start fails), then one on
 * port 0 over the same database, and closes it. Prints one JSON line and
 * returns without process.exit: the process ends on its own only if neither
 * start left a handle open.
 */
import "reflect-metadata";
import { startTestControlPlane } from "./control-plane.js";
import type { TestDatabase } from "./database.js";
import { createTestPki } from "./pki.js";

const [port, location, kind] = process.argv.slice(2) as [string, string, TestDatabase["kind"]];
const database: TestDatabase = { location, kind, drop: async () => {} };
const pki = await createTestPki();
let failedStart: string | undefined;
try {
  await (await startTestControlPlane({ port: Number(port), pki, database })).close();
} catch (err) {
  failedStart = (err as Error).message;
}
const second = await startTestControlPlane({ pki, database });
await second.close();
console.log(JSON.stringify({ failedStart, secondStartUrl: second.url }));

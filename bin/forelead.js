#!/usr/bin/env node
// Entry point of the `forelead` command: runs the compiled command in dist/ (`npm run build`,
// which `npm ci` runs through `prepare`). The TypeScript sources run instead (through tsx's
// loader, compiled at every start: slower) when FORELEAD_RUN_SOURCE=1 or when dist/ is missing.
// The tests build dist/ from the sources under test before they run (test/support/build-cli.ts).
import { existsSync } from "node:fs";
import module from "node:module";

const compiled = new URL("../dist/cli/main.js", import.meta.url);
const fromSource = process.env.FORELEAD_RUN_SOURCE === "1" || !existsSync(compiled);
if (fromSource && process.env.FORELEAD_RUN_SOURCE !== "1") {
  process.stderr.write("forelead: dist/ is not built (run `npm run build`); running the TypeScript sources, which starts slower\n");
}
// Node 22.1 and later keep the compiled code of the modules in a cache (os.tmpdir()/node-compile-cache,
// or NODE_COMPILE_CACHE): later starts skip compiling them. Node 20 has no such cache.
if (!fromSource) module.enableCompileCache?.();
const { main } = fromSource
  ? await import("tsx/esm/api").then(({ register }) => (register(), import("../src/cli/main.ts")))
  : await import(compiled.href);
await main(process.argv);

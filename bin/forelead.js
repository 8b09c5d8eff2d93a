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
// `npx forelead ...` (npm exec) runs this through `sh -c`, and npm forwards SIGTERM and SIGINT to
// that shell only; the shell dies of it without passing it on, and this process would run on as an
// orphan. So under npm exec, the parent going away counts as SIGTERM: this process signals itself
// once, and each command stops as it does on SIGTERM (a runner drains). Supervisors should start
// this file (or the installed `forelead`) directly, so that both signals reach it (docs/runner.md).
if (process.env.npm_command === "exec") {
  const parent = process.ppid;
  const watch = setInterval(() => {
    if (process.ppid === parent) return;
    clearInterval(watch);
    process.kill(process.pid, "SIGTERM");
  }, 250);
  watch.unref();
}
const { main } = fromSource
  ? await import("tsx/esm/api").then(({ register }) => (register(), import("../src/cli/main.ts")))
  : await import(compiled.href);
await main(process.argv);

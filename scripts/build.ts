// `npm run build` (run by `npm ci` and `npm install` through `prepare`): compiles the `forelead`
// command into dist/ with esbuild, so bin/forelead.js starts compiled JavaScript instead of
// compiling TypeScript at every start. ES modules with code splitting: every command group that
// src/cli/main.ts imports lazily is a chunk of its own, loaded only when that group runs.
// Packages stay external (node_modules is read at run time); gen/ and src/ are bundled.
// The build facts (version, commit, date: src/server/build-info.ts) are stamped in.
import { existsSync } from "node:fs";
import { copyFile, rm } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import type * as Esbuild from "esbuild";
import { readBuildInfo } from "../src/server/build-info.js";

const root = fileURLToPath(new URL("..", import.meta.url));
const outdir = `${root}dist`;

/** Left in node_modules (see the build's comment). */
const externalPackages = [
  "@electric-sql/pglite",
  "pg",
  "pg-native",
  "dockerode",
  "ssh2",
  "cpu-features",
  "esbuild",
  "tsx",
];

let esbuild: typeof Esbuild;
try {
  esbuild = await import("esbuild");
} catch {
  // An install without devDependencies (npm ci --omit=dev): keep what a full install built.
  if (existsSync(`${outdir}/cli/main.js`))
    console.error("forelead build: esbuild is not installed; keeping the dist/ already built");
  else
    console.error(
      "forelead build: esbuild is not installed (an install without " +
        "devDependencies), dist/ not built: bin/forelead.js will run the " +
        "TypeScript sources, which starts slower. Build with the devDependencies " +
        "installed, then `npm prune --omit=dev`.",
    );
  process.exit(0);
}

const started = performance.now();
await rm(outdir, { recursive: true, force: true });
const result = await esbuild.build({
  absWorkingDir: root,
  entryPoints: { "cli/main": "src/cli/main.ts" },
  outdir,
  bundle: true,
  splitting: true,
  format: "esm",
  platform: "node",
  target: "node20",
  // Packages are bundled too: resolving and reading ~400 files of node_modules was a third of
  // `forelead serve`'s start. Kept external: the ones that read files beside themselves at run
  // time (PGlite's WebAssembly and data bundle) or carry native or optional parts (pg, dockerode
  // and its ssh2), and esbuild itself. CommonJS packages in an ES module bundle need `require`:
  // the banner makes one.
  external: externalPackages,
  banner: {
    js:
      "import { createRequire as __forelead_createRequire } from " +
      '"node:module"; const require = ' +
      "__forelead_createRequire(import.meta.url);",
  },
  chunkNames: "chunks/[name]-[hash]",
  sourcemap: "linked",
  define: { FORELEAD_BUILD_STAMP: JSON.stringify(readBuildInfo()) },
  logLevel: "warning",
  metafile: true,
});
const files = Object.keys(result.metafile.outputs).filter((f) => f.endsWith(".js")).length;
const web = await buildDashboard(esbuild);
console.error(
  `forelead build: dist/ (${files} files; dashboard ${web}) in ${Math.round(performance.now() - started)} ms`,
);

/**
 * The dashboard's web app (src/dashboard/web/, preact + TSX) for the browser: dist/dashboard/
 * index.html, favicon.svg, app.js and app.css, minified, not hashed (chart.js is a
 * chunk-<hash>.js of its own, loaded when a chart draws) (the dashboard serves them with
 * Cache-Control: no-cache; src/dashboard/server/assets.ts finds them). Returns their sizes.
 */
async function buildDashboard(build: typeof Esbuild): Promise<string> {
  const out = `${outdir}/dashboard`;
  const web = await build.build({
    absWorkingDir: root,
    entryPoints: { app: "src/dashboard/web/main.tsx" },
    outdir: out,
    bundle: true,
    splitting: true,
    chunkNames: "chunk-[hash]",
    format: "esm",
    platform: "browser",
    target: ["chrome115", "firefox115", "safari16"],
    jsx: "automatic",
    jsxImportSource: "preact",
    minify: true,
    legalComments: "none",
    define: { "process.env.NODE_ENV": '"production"' },
    logLevel: "warning",
    metafile: true,
  });
  for (const file of ["index.html", "favicon.svg"])
    await copyFile(`${root}src/dashboard/web/${file}`, `${out}/${file}`);
  return Object.entries(web.metafile.outputs)
    .map(
      ([name, o]) => `${name.slice(name.lastIndexOf("/") + 1)} ${(o.bytes / 1024).toFixed(0)} kB`,
    )
    .join(", ");
}

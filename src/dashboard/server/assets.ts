import { existsSync, readFileSync } from "node:fs";
import { readdir, readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** One built file of the web app, held in memory (the whole app is a few hundred kB). */
export interface Asset {
  readonly body: Buffer;
  readonly contentType: string;
}

const contentTypes: Readonly<Record<string, string>> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".map": "application/json",
  ".png": "image/png",
  ".svg": "image/svg+xml",
};

/**
 * The directory of the built web app: dist/dashboard/ of the package this
 * module belongs to, found by walking up from the module to the directory
 * whose package.json is forelead's. The same from dist/ (the built command)
 * and from src/ (FORELEAD_RUN_SOURCE=1, the tests): the assets are always the
 * ones `npm run build` (scripts/build.ts, run by `npm ci` and by the tests'
 * globalSetup) wrote; the command never builds them itself.
 */
export function defaultAssetsDir(from: string = fileURLToPath(import.meta.url)): string {
  let dir = dirname(from);
  for (;;) {
    const pkg = join(dir, "package.json");
    if (
      existsSync(pkg) &&
      (JSON.parse(readFileSync(pkg, "utf8")) as { name?: string }).name === "forelead"
    )
      return join(dir, "dist", "dashboard");
    const up = dirname(dir);
    if (up === dir) throw new Error(`cannot find forelead's package.json above ${from}`);
    dir = up;
  }
}

/**
 * Reads every file of `dir` (by its URL path, "/app.js"); a missing build is an error saying how to
 * make it.
 */
export async function loadAssets(dir: string): Promise<ReadonlyMap<string, Asset>> {
  if (!existsSync(join(dir, "index.html")))
    throw new Error(
      `the dashboard's pages are not built: ${join(dir, "index.html")} is ` +
        `missing; run \`npm run build\` (npm ci runs it)`,
    );
  const assets = new Map<string, Asset>();
  for (const name of await readdir(dir)) {
    const ext = /\.[a-z]+$/.exec(name)?.[0] ?? "";
    const contentType = contentTypes[ext];
    if (contentType) assets.set(`/${name}`, { body: await readFile(join(dir, name)), contentType });
  }
  return assets;
}

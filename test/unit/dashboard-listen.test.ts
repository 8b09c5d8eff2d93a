import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { defaultAssetsDir, loadAssets } from "../../src/dashboard/server/assets.js";
import { checkListen, isLoopback, parseListen } from "../../src/dashboard/server/listen.js";

describe("dashboard --listen", () => {
  it("parses HOST:PORT and [IPv6]:PORT, and names the flag for anything else", () => {
    expect(parseListen("127.0.0.1:8080")).toEqual({ host: "127.0.0.1", port: 8080 });
    expect(parseListen("[::1]:0")).toEqual({ host: "::1", port: 0 });
    expect(parseListen("localhost:9000")).toEqual({ host: "localhost", port: 9000 });
    for (const bad of ["8080", ":8080", "127.0.0.1", "127.0.0.1:99999", "::1:8080", "host:port"])
      expect(() => parseListen(bad), bad).toThrow(
        `--listen ${JSON.stringify(bad)} is not HOST:PORT`,
      );
  });

  it("loopback is 127.0.0.0/8, ::1 and localhost; anything else needs --allow-remote", () => {
    for (const host of ["127.0.0.1", "127.1.2.3", "::1", "localhost"])
      expect(isLoopback(host), host).toBe(true);
    for (const host of [
      "0.0.0.0",
      "::",
      "10.0.0.5",
      "192.168.1.2",
      "example.com",
      "127.example.com",
    ])
      expect(isLoopback(host), host).toBe(false);
    expect(() => checkListen({ host: "0.0.0.0", port: 8080 }, false)).toThrow(
      "--listen 0.0.0.0:8080 is not a loopback address",
    );
    expect(() => checkListen({ host: "0.0.0.0", port: 8080 }, true)).not.toThrow();
  });
});

describe("dashboard assets", () => {
  it("are dist/dashboard of the package, and a missing build says how to make it", async () => {
    expect(defaultAssetsDir()).toBe(join(process.cwd(), "dist", "dashboard"));
    const empty = await mkdtemp(join(tmpdir(), "forelead-assets-"));
    try {
      await expect(loadAssets(empty)).rejects.toThrow(
        `the dashboard's pages are not built: ${join(empty, "index.html")} is missing; run \`npm run build\``,
      );
    } finally {
      await rm(empty, { recursive: true });
    }
  });
});

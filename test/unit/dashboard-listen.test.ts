import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { defaultAssetsDir, loadAssets } from "../../src/dashboard/server/assets.js";
import {
  checkListen,
  isLoopback,
  parseListen,
  parsePublicHost,
} from "../../src/dashboard/server/listen.js";

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
    const local = { allowRemote: false, publicHosts: [], tls: false, behindTlsProxy: false };
    const at = { host: "0.0.0.0", port: 8080 };
    expect(() => checkListen(at, local)).toThrow("--listen 0.0.0.0:8080 is not a loopback address");
    expect(() => checkListen(at, { ...local, allowRemote: true })).toThrow(
      "--allow-remote needs the names the dashboard is reached by: add --public-host NAME",
    );
    const named = { ...local, allowRemote: true, publicHosts: ["dash.example.com"] };
    expect(() => checkListen(at, named)).toThrow(
      "a dashboard reached from other machines (--allow-remote) must use HTTPS: give " +
        "--tls-cert and --tls-key, or --behind-tls-proxy",
    );
    expect(() => checkListen(at, { ...named, tls: true })).not.toThrow();
    expect(() => checkListen(at, { ...named, behindTlsProxy: true })).not.toThrow();
    // A name on loopback (a TLS proxy on the same host) needs HTTPS too.
    const loop = { host: "127.0.0.1", port: 8080 };
    expect(() => checkListen(loop, { ...local, publicHosts: ["dash.example.com"] })).toThrow(
      "(--public-host) must use HTTPS",
    );
    expect(() => checkListen(loop, local)).not.toThrow();
  });

  it("--public-host takes a DNS name only", () => {
    expect(parsePublicHost("Dash.Example.com")).toBe("dash.example.com");
    for (const bad of ["https://dash.example.com", "dash.example.com:443", "", "a..b", "-x.com"])
      expect(() => parsePublicHost(bad), bad).toThrow("is not a DNS name");
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

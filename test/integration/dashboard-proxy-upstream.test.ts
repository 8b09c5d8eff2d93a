// The dashboard's proxy against a control plane that misbehaves on the wire: a stand-in HTTP/2 +
// TLS server (node:http2, mutual TLS as the control plane's) that resets a call before replying,
// sends a reply faster than the browser reads it, or replies normally. The real control plane never
// resets a call unanswered, so these cases need a server that does; the proxy, the certificates and
// the sockets are the real ones.
import {
  constants,
  createSecureServer,
  type Http2SecureServer,
  type ServerHttp2Stream,
} from "node:http2";
import { request, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Dashboard } from "../../src/dashboard/server/server.js";
import { contentSecurityPolicy } from "../../src/dashboard/server/security.js";
import { eventually } from "../support/actors.js";
import { createTestPki } from "../support/pki.js";
import { signInOverHttp, startTestDashboard, type SessionHeaders } from "../support/dashboard.js";

/** What the stand-in does with a call, by its method name: /api/test.Upstream/<Method>. */
type Behaviour = (stream: ServerHttp2Stream) => void;

/** The test's session with the dashboard (every call needs one). */
let session: SessionHeaders;

const flood = { written: 0, blocked: false, cancelled: false };
const megabyte = Buffer.alloc(1 << 20, 0x61);
const behaviours: Record<string, Behaviour> = {
  Reply: (s) => {
    s.respond({
      ":status": 200,
      "content-type": "application/json",
      "x-upstream": "yes",
      "set-cookie": "a=b",
    });
    s.end('{"ok":true}');
  },
  // A control plane (or something in its place) that sends headers of its own to weaken the page's.
  Weaken: (s) => {
    s.respond({
      ":status": 200,
      "content-type": "application/json",
      "content-security-policy": "default-src *",
      "x-frame-options": "ALLOWALL",
      "x-content-type-options": "sniff",
      "referrer-policy": "unsafe-url",
      "cross-origin-opener-policy": "unsafe-none",
      "cross-origin-resource-policy": "cross-origin",
      "cache-control": "public, max-age=86400",
    });
    s.end("{}");
  },
  ResetNoError: (s) => s.close(constants.NGHTTP2_NO_ERROR),
  ResetInternal: (s) => s.close(constants.NGHTTP2_INTERNAL_ERROR),
  // Writes up to 64 MiB, a megabyte at a time, for as long as the proxy keeps taking it.
  Flood: (s) => {
    s.respond({ ":status": 200, "content-type": "application/connect+json" });
    s.on("close", () => (flood.cancelled = s.rstCode === constants.NGHTTP2_CANCEL));
    const more = () => {
      while (flood.written < 64 << 20 && !s.destroyed) {
        flood.written += megabyte.length;
        if (!s.write(megabyte)) {
          flood.blocked = true;
          s.once("drain", more);
          return;
        }
      }
      if (!s.destroyed) s.end();
    };
    more();
  },
};

/**
 * One POST through the dashboard, from its own origin; `read: false` leaves the reply's body
 * unread.
 */
function post(
  dashboard: Dashboard,
  method: string,
  read = true,
): Promise<{ res: IncomingMessage; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      new URL(`/api/test.Upstream/${method}`, dashboard.url),
      {
        method: "POST",
        headers: { "content-type": "application/json", origin: dashboard.url, ...session },
      },
      (res) => {
        if (!read) {
          resolve({ res, text: "" });
          return;
        }
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (text += c));
        res.on("end", () => resolve({ res, text }));
      },
    );
    req.on("error", reject);
    req.end("{}");
  });
}

describe("dashboard proxy, against a control plane that misbehaves", () => {
  let upstream: Http2SecureServer;
  let dashboard: Dashboard;
  beforeAll(async () => {
    const pki = await createTestPki();
    const operator = await pki.service("test-admin");
    upstream = createSecureServer({
      key: pki.server.keyPem,
      cert: pki.server.certPem,
      ca: pki.ca.certPem,
      requestCert: true,
      rejectUnauthorized: true,
      minVersion: "TLSv1.3",
    });
    upstream.on("stream", (stream, headers) => {
      stream.resume();
      stream.on("error", () => {}); // a reset the stand-in sends itself
      const method = String(headers[":path"]).split("/").pop()!;
      (behaviours[method] ?? ((s) => s.respond({ ":status": 404 }, { endStream: true })))(stream);
    });
    await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
    const { port } = upstream.address() as AddressInfo;
    dashboard = await startTestDashboard({
      listen: { host: "127.0.0.1", port: 0 },
      endpoint: {
        baseUrl: `https://127.0.0.1:${port}`,
        ca: pki.ca.certPem,
        cert: operator.certPem,
        key: operator.keyPem,
      },
    });
    session = await signInOverHttp(dashboard);
  });
  afterAll(async () => {
    await dashboard?.close();
    await new Promise((resolve) => upstream?.close(resolve));
  });

  it("passes a reply's status, headers and body on, without the hop's own headers", async () => {
    const { res, text } = await post(dashboard, "Reply");
    expect(res.statusCode).toBe(200);
    expect(res.headers["content-type"]).toBe("application/json");
    expect(res.headers["x-upstream"]).toBe("yes");
    expect(res.headers["set-cookie"]).toBeUndefined();
    expect(res.headers["cache-control"]).toBe("no-store");
    expect(text).toBe('{"ok":true}');
  });

  it("an upstream header never replaces one of the dashboard's security headers", async () => {
    const { res } = await post(dashboard, "Weaken");
    expect(res.statusCode).toBe(200);
    expect(res.headers["content-security-policy"]).toBe(contentSecurityPolicy);
    expect(res.headers["x-frame-options"]).toBe("DENY");
    expect(res.headers["x-content-type-options"]).toBe("nosniff");
    expect(res.headers["referrer-policy"]).toBe("no-referrer");
    expect(res.headers["cross-origin-opener-policy"]).toBe("same-origin");
    expect(res.headers["cross-origin-resource-policy"]).toBe("same-origin");
    expect(res.headers["cache-control"]).toBe("no-store");
  });

  it("a call reset before any reply is a 502 saying so, never an empty 200", async () => {
    for (const [method, code] of [
      ["ResetNoError", "code 0"],
      ["ResetInternal", "INTERNAL_ERROR"],
    ] as const) {
      const { res, text } = await post(dashboard, method);
      expect(res.statusCode, `${method}: ${text}`).toBe(502);
      expect(res.headers["content-type"]).toBe("application/json");
      const body = JSON.parse(text) as { code: string; message: string };
      expect(body.code).toBe("unavailable");
      expect(body.message, method).toContain(code);
    }
  });

  it(
    "reads the reply at the browser's pace: a browser that stops reading " +
      "stops the control plane's writes; one that goes away cancels the call",
    async () => {
      const { res } = await post(dashboard, "Flood", false);
      expect(res.statusCode).toBe(200);
      await eventually(
        "the stand-in's writes to block",
        async () => flood.blocked || undefined,
        10_000,
      );
      // Let every buffer on the way fill: what got through is bounded by them, not by the 64 MiB on
      // offer.
      await new Promise((r) => setTimeout(r, 500));
      expect(flood.written).toBeLessThanOrEqual(16 << 20);
      res.destroy();
      await eventually(
        "the call to be cancelled upstream",
        async () => flood.cancelled || undefined,
        10_000,
      );
    },
  );
});

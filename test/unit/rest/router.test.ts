// The REST router on a real HTTP/2 server (h2c on 127.0.0.1): refusals before
// the body, the byte bound, and the end of a stream whose body was not read.
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { Code, ConnectError, createContextValues, createMethodImplSpec } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RunnerService } from "../../../gen/forelead/runner/v1/runner_pb.js";
import { createRestRouter } from "../../../src/api/rest/index.js";
import { routeTable } from "../../../src/api/routes.js";

const entries = routeTable([RunnerService]);
const entry = (name: string) => entries.find((e) => e.method.name === name)!;
const bindings = [
  {
    entry: entry("Clock"),
    spec: createMethodImplSpec(RunnerService.method.clock, () => ({ apiVersion: "v1" })),
  },
  {
    entry: entry("Logs"),
    spec: createMethodImplSpec(RunnerService.method.logs, async (reqs) => {
      for await (const _ of reqs); // read every line
      return {};
    }),
  },
  {
    // Refuses at once, before reading any of the body.
    entry: entry("PutUpload"),
    spec: createMethodImplSpec(RunnerService.method.putUpload, async () => {
      throw new ConnectError("no such upload", Code.NotFound);
    }),
  },
];

let server: http2.Http2Server;
let client: http2.ClientHttp2Session;

beforeAll(async () => {
  server = http2.createServer(
    createRestRouter({ bindings, contextValues: () => createContextValues(), maxBodyBytes: 64 }),
  );
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  client = http2.connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
});

afterAll(async () => {
  client.close();
  await new Promise((resolve) => server.close(resolve));
});

interface Reply {
  status: number;
  headers: http2.IncomingHttpHeaders;
  json: { code?: string; message?: string; apiVersion?: string };
  rstCode: number;
}

/**
 * One request; `body` is sent whole, or (a function) written by the caller, who may never end it.
 */
function request(
  method: string,
  path: string,
  body?: string | ((stream: http2.ClientHttp2Stream) => void),
  headers: http2.OutgoingHttpHeaders = {},
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const stream = client.request({ ":method": method, ":path": path, ...headers });
    let status = 0;
    let replyHeaders: http2.IncomingHttpHeaders = {};
    let text = "";
    stream.on("response", (h) => {
      status = Number(h[":status"]);
      replyHeaders = h;
    });
    stream.setEncoding("utf8");
    stream.on("data", (chunk: string) => (text += chunk));
    stream.on("error", reject);
    stream.on("close", () =>
      resolve({
        status,
        headers: replyHeaders,
        json: text ? JSON.parse(text) : {},
        rstCode: stream.rstCode ?? -1,
      }),
    );
    if (typeof body === "function") body(stream);
    else stream.end(body);
  });
}

describe("the REST router over HTTP/2", () => {
  it("serves a GET route", async () => {
    const reply = await request("GET", "/v1/runner/clock");
    expect(reply.status).toBe(200);
    expect(reply.json.apiVersion).toBe("v1");
  });

  it("answers a path served with another method 405, with Allow, before reading the body", async () => {
    const reply = await request("DELETE", "/v1/runner/clock");
    expect(reply.status).toBe(405);
    expect(reply.headers["allow"]).toBe("GET");
    expect(reply.json).toEqual({
      code: "unimplemented",
      message: "DELETE /v1/runner/clock is not served; use GET",
    });
  });

  it("answers an unknown path 404", async () => {
    const reply = await request("GET", "/v1/runner/nothing");
    expect(reply.status).toBe(404);
    expect(reply.json).toEqual({
      code: "not_found",
      message: "no route GET /v1/runner/nothing; docs/routes.md lists the routes",
    });
  });

  it("answers an NDJSON body over the bound 413 resource_exhausted, naming the line that crossed it", async () => {
    const line = `${JSON.stringify({ sequence: "1" })}\n`; // 17 bytes: the fourth line crosses 64
    const reply = await request("POST", "/v1/runner/logs", line.repeat(6), {
      "content-type": "application/x-ndjson",
    });
    expect(reply.status).toBe(413);
    expect(reply.json).toEqual({
      code: "resource_exhausted",
      message: "line 4 takes the request body over 64 bytes; send it in a new request",
    });
  });

  it(
    "ends a stream whose body the handler refused unread with RST_STREAM " +
      "NO_ERROR, so a client that keeps sending is not left hanging",
    async () => {
      const reply = await request(
        "PUT",
        "/v1/runner/uploads/u1",
        (stream) => stream.write(Buffer.alloc(32 * 1024)),
        { "content-type": "application/octet-stream" },
      );
      expect(reply.status).toBe(404);
      expect(reply.json.message).toBe("no such upload");
      expect(reply.rstCode).toBe(http2.constants.NGHTTP2_NO_ERROR);
    },
  );
});

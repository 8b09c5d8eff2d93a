// NDJSON request bodies: one message per line, numbered from 1, bounded by bytes.
import { isMessage } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { LogsRequestSchema } from "../../../gen/forelead/runner/v1/runner_pb.js";
import { ndjsonLineOf, ndjsonMessages } from "../../../src/api/rest/ndjson-body.js";

async function* chunksOf(...parts: Array<string | Buffer>): AsyncGenerator<Buffer> {
  for (const p of parts) yield Buffer.isBuffer(p) ? p : Buffer.from(p);
}

/** Reads every message; the messages handed over before an error, and the error. */
async function readAll(chunks: AsyncIterable<Buffer>, maxBytes = 1024) {
  const got: Array<{ sequence: bigint; line: number | undefined }> = [];
  try {
    for await (const m of ndjsonMessages(chunks, LogsRequestSchema, maxBytes)) {
      if (!isMessage(m, LogsRequestSchema)) throw new Error("not a LogsRequest");
      got.push({ sequence: m.sequence, line: ndjsonLineOf(m) });
    }
    return { got, error: undefined };
  } catch (err) {
    if (!(err instanceof ConnectError)) throw err;
    return { got, error: err };
  }
}

const line = (sequence: number) => `${JSON.stringify({ sequence: String(sequence) })}\n`;

describe("NDJSON request bodies", () => {
  it("number lines from 1, counting blank lines, so a refusal names the line as the client counts it", async () => {
    const { got, error } = await readAll(chunksOf(line(1), "\n", "  \r\n", line(2).replace("\n", "\r\n"), JSON.stringify({ sequence: "3" })));
    expect(error).toBeUndefined();
    expect(got).toEqual([
      { sequence: 1n, line: 1 },
      { sequence: 2n, line: 4 },
      { sequence: 3n, line: 5 },
    ]);
  });

  it("join a line split across chunks, a multi-byte character included", async () => {
    const text = Buffer.from(`${JSON.stringify({ sequence: "7", data: "é" })}\n`);
    const cut = text.indexOf(Buffer.from("é")) + 1; // inside the two bytes of é
    const { got } = await readAll(chunksOf(text.subarray(0, 5), text.subarray(5, cut), text.subarray(cut)));
    expect(got).toEqual([{ sequence: 7n, line: 1 }]);
  });

  it("accept a body of exactly the bound and refuse the line that crosses it, after handing over the lines before", async () => {
    const body = line(1) + line(2);
    expect((await readAll(chunksOf(body), Buffer.byteLength(body))).error).toBeUndefined();
    const { got, error } = await readAll(chunksOf(body + line(3)), Buffer.byteLength(body) + 1);
    expect(got.map((g) => g.sequence)).toEqual([1n, 2n]);
    expect(error?.code).toBe(Code.ResourceExhausted);
    expect(error?.rawMessage).toBe(`line 3 takes the request body over ${Buffer.byteLength(body) + 1} bytes; send it in a new request`);
  });

  it("refuse a line that is still unfinished when it crosses the bound, without waiting for its newline", async () => {
    async function* endless(): AsyncGenerator<Buffer> {
      yield Buffer.from(line(1));
      for (;;) yield Buffer.from('{"data":"' + "x".repeat(100));
    }
    const { got, error } = await readAll(endless(), 512);
    expect(got.map((g) => g.line)).toEqual([1]);
    expect(error?.code).toBe(Code.ResourceExhausted);
    expect(error?.rawMessage).toMatch(/^line 2 takes the request body over 512 bytes/);
  });

  it("refuse a line that is not JSON or not an object, naming the line and never quoting it", async () => {
    const bad = await readAll(chunksOf(line(1), '{"leaseToken": "s3cret-token", oops}\n'));
    expect(bad.got).toHaveLength(1);
    expect(bad.error?.rawMessage).toMatch(/^line 2 is not valid JSON: /);
    expect(bad.error?.rawMessage).not.toContain("s3cret");
    expect((await readAll(chunksOf("[1]\n"))).error?.rawMessage).toBe("line 1 must be a JSON object");
  });

  it("refuse a field of the wrong type by its JSON name", async () => {
    const { error } = await readAll(chunksOf('{"leaseToken": 5}\n'));
    expect(error?.rawMessage).toMatch(/^line 1: field "leaseToken": /);
  });
});

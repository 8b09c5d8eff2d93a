// NDJSON request bodies: one message per line, numbered from 1, bounded by bytes.
import { isMessage } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { LogsRequestSchema } from "../../../gen/forelead/runner/v1/runner_pb.js";
import { ndjsonMessages } from "../../../src/api/rest/ndjson-body.js";
import { transportFacts } from "../../../src/protocol/transport-facts.js";

async function* chunksOf(...parts: Array<string | Buffer>): AsyncGenerator<Buffer> {
  for (const p of parts) yield Buffer.isBuffer(p) ? p : Buffer.from(p);
}

/** Reads every message; the messages handed over before an error, and the error. */
async function readAll(chunks: AsyncIterable<Buffer>, maxBytes = 1024) {
  const got: Array<{ sequence: bigint; line: number | undefined }> = [];
  try {
    for await (const m of ndjsonMessages(chunks, LogsRequestSchema, maxBytes)) {
      if (!isMessage(m, LogsRequestSchema)) throw new Error("not a LogsRequest");
      got.push({ sequence: m.sequence, line: transportFacts(m).line });
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
    const { got, error } = await readAll(
      chunksOf(
        line(1),
        "\n",
        "  \r\n",
        line(2).replace("\n", "\r\n"),
        JSON.stringify({ sequence: "3" }),
      ),
    );
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
    const { got } = await readAll(
      chunksOf(text.subarray(0, 5), text.subarray(5, cut), text.subarray(cut)),
    );
    expect(got).toEqual([{ sequence: 7n, line: 1 }]);
  });

  it(
    "accept a body of exactly the bound and refuse the line that crosses it, " +
      "after handing over the lines before",
    async () => {
      const body = line(1) + line(2);
      expect((await readAll(chunksOf(body), Buffer.byteLength(body))).error).toBeUndefined();
      const { got, error } = await readAll(chunksOf(body + line(3)), Buffer.byteLength(body) + 1);
      expect(got.map((g) => g.sequence)).toEqual([1n, 2n]);
      expect(error?.code).toBe(Code.ResourceExhausted);
      expect(error?.rawMessage).toBe(
        `line 3 takes the request body over ${Buffer.byteLength(body) + 1} bytes; send it in a new request`,
      );
    },
  );

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
    expect((await readAll(chunksOf("[1]\n"))).error?.rawMessage).toBe(
      "line 1 must be a JSON object",
    );
  });

  it("refuse a field of the wrong type by its JSON name", async () => {
    const { error } = await readAll(chunksOf('{"leaseToken": 5}\n'));
    expect(error?.rawMessage).toMatch(/^line 1: field "leaseToken": /);
  });
});

// A chunk's whole lines are checked as one text when they can be (ndjson-body.ts, readLines); these
// send several lines in one chunk, so a refusal must still name its own line and hand over the ones
// before.
describe("NDJSON request bodies, many lines to a chunk", () => {
  const body = (...lines: string[]) => Buffer.from(lines.join(""));

  it("read every line of one chunk, with CRLF and blank lines, numbered as the client counts them", async () => {
    const { got, error } = await readAll(
      chunksOf(body(line(1), "\r\n", line(2).replace("\n", "\r\n"), "   \n", line(3))),
    );
    expect(error).toBeUndefined();
    expect(got).toEqual([
      { sequence: 1n, line: 1 },
      { sequence: 2n, line: 3 },
      { sequence: 3n, line: 5 },
    ]);
  });

  it("refuse invalid UTF-8 in the third line of a chunk, naming it, after the two before", async () => {
    const bad = Buffer.concat([
      Buffer.from('{"sequence": "3", "data": "a'),
      Buffer.from([0xc3, 0x28]),
      Buffer.from('"}\n'),
    ]);
    const { got, error } = await readAll(
      chunksOf(Buffer.concat([body(line(1), line(2)), bad, body(line(4))])),
    );
    expect(got.map((g) => g.line)).toEqual([1, 2]);
    expect(error?.rawMessage).toMatch(/^line 3: field "data" is not valid UTF-8/);
  });

  it("refuse an integer past 2^53 in the second line of a chunk, quoting it, after the first", async () => {
    const { got, error } = await readAll(
      chunksOf(body(line(1), '{"sequence": "2", "data": {"n": 9007199254740993}}\n', line(3))),
    );
    expect(got.map((g) => g.line)).toEqual([1]);
    expect(error?.rawMessage).toMatch(
      /^line 2: field "data.n": the number 9007199254740993 is past 2\^53 - 1/,
    );
  });

  it("take a 16-digit integer that is within 2^53 in a chunk of several lines", async () => {
    const { got, error } = await readAll(
      chunksOf(body(line(1), '{"sequence": "2", "data": {"n": 1234567890123456}}\n', line(3))),
    );
    expect(error).toBeUndefined();
    expect(got.map((g) => g.line)).toEqual([1, 2, 3]);
  });

  it("refuse the line of a chunk that crosses the bound, after the lines before it", async () => {
    const two = line(1) + line(2);
    const { got, error } = await readAll(
      chunksOf(body(line(1), line(2), line(3), line(4))),
      Buffer.byteLength(two) + 3,
    );
    expect(got.map((g) => g.sequence)).toEqual([1n, 2n]);
    expect(error?.rawMessage).toBe(
      `line 3 takes the request body over ${Buffer.byteLength(two) + 3} bytes; send it in a new request`,
    );
  });

  it("refuse a line of a chunk that is not JSON or not an object, naming it", async () => {
    expect(
      (await readAll(chunksOf(body(line(1), '{"leaseToken": "s3cret-token", oops}\n', line(3)))))
        .error?.rawMessage,
    ).toMatch(/^line 2 is not valid JSON: /);
    const notObject = await readAll(chunksOf(body(line(1), line(2), "[1]\n")));
    expect(notObject.got).toHaveLength(2);
    expect(notObject.error?.rawMessage).toBe("line 3 must be a JSON object");
  });

  it("join the line an earlier chunk began with the whole lines of the next", async () => {
    const text = body(line(1), line(2), line(3), line(4));
    const cut = Buffer.byteLength(line(1)) + 5; // inside line 2
    const { got, error } = await readAll(chunksOf(text.subarray(0, cut), text.subarray(cut)));
    expect(error).toBeUndefined();
    expect(got).toEqual([1, 2, 3, 4].map((n) => ({ sequence: BigInt(n), line: n })));
  });
});

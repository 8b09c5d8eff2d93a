import "reflect-metadata";
import { describe, expect, it } from "vitest";
import { leasedJob as lease } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { readEntries } from "../support/streams.js";

// NDJSON stream lines are read by a flat decoder (src/protocol/json/flat.ts) that takes only
// lines it is sure of and leaves every other line to the proto3 JSON decode and the text rules.
// These lines sit in the middle of a request, between two plain ones: each is stored, or refused,
// exactly as before that decoder (the expectations were taken from the code before it), and
// what is stored and what the reply says match: the lines before it stored, none after it.

const cp = useControlPlane();
const { admin } = cp;
let n = 0;
const leasedJob = () => lease(cp, admin, "r1", `sl${++n}`);
const lastAccepted = "forelead-last-accepted-sequence";

type Msg = (sequence: number, data: unknown) => Record<string, unknown>;
/** A line the flat decoder leaves to protobuf-es, and what becomes of it. */
interface Case {
  readonly name: string;
  readonly line: (msg: Msg, seq: number, token: string, jobId: string) => unknown;
  /**
   * Stored with this data, or refused with this status and message (before "; last accepted ...").
   */
  readonly stored?: unknown;
  readonly refused?: { readonly status: number; readonly message: (seq: number) => string };
}

const deep = (depth: number): unknown =>
  depth === 0 ? { text: "deep" } : { text: "x", inner: deep(depth - 1) };

const cases: Case[] = [
  {
    name: "proto field names",
    line: (m, s, token, jobId) => ({
      api_version: "v1",
      runner_id: "r1",
      job_id: jobId,
      lease_token: token,
      sequence: s,
      data: "by proto names\n",
    }),
    stored: "by proto names\n",
  },
  {
    name: "a sequence sent as a string",
    line: (m, s) => ({ ...m(s, "string sequence\n"), sequence: String(s) }),
    stored: "string sequence\n",
  },
  {
    name: "an unknown field",
    line: (m, s) => ({ ...m(s, "with extra\n"), extra: { any: 1 } }),
    stored: "with extra\n",
  },
  {
    name: "data nested past the flat decoder's depth",
    line: (m, s) => m(s, deep(40)),
    stored: deep(40),
  },
  {
    name: "a __proto__ key in data",
    line: (m, s) =>
      `{"apiVersion":"v1","runnerId":"r1","jobId":` +
      `${JSON.stringify(m(s, "").jobId)},"leaseToken":` +
      `${JSON.stringify(m(s, "").leaseToken)},"sequence":` +
      `${s},"data":{"text":"p\\n","__proto__":{"a":1}}}`,
    stored: { text: "p\n" },
  },
  {
    name: "a CRLF line end",
    line: (m, s) => `${JSON.stringify(m(s, "crlf\n"))}\r`,
    stored: "crlf\n",
  },
  {
    name: "text outside the BMP",
    line: (m, s) => m(s, { stream: "stdout", text: "emoji \u{1F600}\n" }),
    stored: { stream: "stdout", text: "emoji \u{1F600}\n" },
  },
  {
    name: "NUL in the text",
    line: (m, s) => m(s, { stream: "stdout", text: "a\u0000b" }),
    refused: {
      status: 400,
      message: () =>
        `line 2: field "data.text" contains NUL (U+0000) at character 2; text ` +
        `cannot hold NUL: remove it (send binary data base64-encoded)`,
    },
  },
  {
    name: "an unpaired surrogate escape in a key",
    line: (m, s) => JSON.stringify(m(s, { text: "t", k: 1 })).replace('"k"', '"\\ud800"'),
    refused: {
      status: 400,
      message: () =>
        `line 2: field "data key" is not valid UTF-8 text (invalid bytes, or an ` +
        `unpaired surrogate escape); send text as UTF-8`,
    },
  },
  {
    name: "an unpaired surrogate escape in jobId",
    line: (m, s) => JSON.stringify({ ...m(s, "x\n"), jobId: "\ud800" }),
    refused: { status: 400, message: () => `line 2: field "jobId": expected string: invalid UTF8` },
  },
  {
    name: "a number too large for a double in data",
    line: (m, s) => JSON.stringify(m(s, { text: "t", n: 7 })).replace('"n":7', '"n":1e400'),
    refused: {
      status: 400,
      message: () => `line 2: field "data.n" is not a finite number; JSON has no NaN or Infinity`,
    },
  },
  {
    name: "a fractional sequence",
    line: (m, s) => ({ ...m(s, "x\n"), sequence: s + 0.5 }),
    refused: {
      status: 400,
      message: (s) => `line 2: field "sequence": expected bigint (int64): ${s + 0.5} out of range`,
    },
  },
  {
    name: "a sequence of the wrong type",
    line: (m, s) => ({ ...m(s, "x\n"), sequence: true }),
    refused: {
      status: 400,
      message: () => `line 2: field "sequence": expected bigint (int64), got true`,
    },
  },
  {
    name: "a jobId of the wrong type",
    line: (m, s) => ({ ...m(s, "x\n"), jobId: 7 }),
    refused: { status: 400, message: () => `line 2: field "jobId": expected string, got 7` },
  },
  {
    name: "a runnerId that is not an id",
    line: (m, s) => ({ ...m(s, "x\n"), runnerId: "no such/id" }),
    refused: {
      status: 400,
      message: () =>
        `runnerId "no such/id" is not a valid id (a path segment contains the ` +
        `character U+0020; only A-Z, a-z, 0-9, '.', '-' and '_' are allowed); an ` +
        `id is 1 to 128 characters of A-Z a-z 0-9 . _ - and not "." or ".."`,
    },
  },
  {
    name: "data null",
    line: (m, s) => m(s, null),
    refused: {
      status: 400,
      message: () =>
        `line 2: data is required: a log message's data is a text chunk or ` +
        `{"stream": "stdout"|"stderr", "text": "..."}`,
    },
  },
  {
    name: "a null field",
    line: (m, s) => ({ ...m(s, "null apiVersion\n"), apiVersion: null }),
    refused: {
      status: 400,
      message: (s) =>
        `line 2 (sequence ${s}): apiVersion is required; this control plane speaks "v1"`,
    },
  },
];

describe(`NDJSON lines the flat decoder leaves to proto3 JSON (${databaseKind})`, () => {
  it("each, between two plain lines, is stored or refused as before; what is stored matches the reply", async () => {
    const { runner, jobId, token, msg } = await leasedJob();
    let last = 0;
    const expected: unknown[] = [];
    for (const c of cases) {
      const first = last + 1;
      const reply = await runner.rest.ndjson("/v1/runner/logs", [
        msg(first, `before ${c.name}\n`),
        c.line(msg, first + 1, token, jobId),
        msg(first + 2, `after ${c.name}\n`),
      ]);
      if (c.stored !== undefined) {
        expect(reply.status, `${c.name}: ${reply.text}`).toBe(204);
        expected.push(`before ${c.name}\n`, c.stored, `after ${c.name}\n`);
        last += 3;
      } else {
        expect({
          name: c.name,
          status: reply.status,
          message: reply.json.message,
          header: reply.headers[lastAccepted],
        }).toEqual({
          name: c.name,
          status: c.refused!.status,
          message: `${c.refused!.message(first + 1)}; last accepted logs sequence for this lease is ${first}`,
          header: String(first),
        });
        expected.push(`before ${c.name}\n`);
        last += 1;
      }
    }
    const stored = await readEntries(admin, jobId, "logs");
    expect(stored.map((e) => Number(e.sequence))).toEqual(
      Array.from({ length: last }, (_, i) => i + 1),
    );
    expect(stored.map((e) => e.data)).toEqual(expected);
    await runner.close();
  });
});

// JSON request bodies: one object, and a refusal that never quotes the body back.
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { readJsonBody } from "../../../src/api/rest/json-body.js";
import { parseJsonObject } from "../../../src/api/rest/json-text.js";

async function* chunksOf(...parts: string[]): AsyncGenerator<Buffer> {
  for (const p of parts) yield Buffer.from(p);
}

function refusal(fn: () => unknown): ConnectError {
  try {
    fn();
  } catch (err) {
    if (err instanceof ConnectError) return err;
    throw err;
  }
  throw new Error("no refusal");
}

describe("the JSON of a request body", () => {
  it.each([
    ['{"leaseToken": "s3cret-token-value", }'],
    ['{"leaseToken": "s3cret-token-value" "x": 1}'],
    ['{"leaseToken": s3cret-token-value}'],
    ['{"leaseToken": "s3cret-token-value"'],
  ])(
    "a syntax error names the reason without V8's excerpt of the input (which could hold a lease token): %s",
    (text) => {
      const err = refusal(() => parseJsonObject(text, "the request body"));
      expect(err.code).toBe(Code.InvalidArgument);
      expect(err.rawMessage).toMatch(/^the request body is not valid JSON: \S/);
      expect(err.rawMessage).not.toContain("s3cret");
    },
  );

  it.each([["[]"], ["null"], ["3"], ['"text"']])("must be an object, not %s", (text) => {
    expect(refusal(() => parseJsonObject(text, "line 2")).rawMessage).toBe(
      "line 2 must be a JSON object",
    );
  });

  it("is gathered up to the bound: exactly the bound is read, one byte more is resource_exhausted", async () => {
    const body = '{"jobId":"j1"}';
    await expect(
      readJsonBody(chunksOf(body.slice(0, 5), body.slice(5)), body.length),
    ).resolves.toEqual({ jobId: "j1" });
    const over = await readJsonBody(chunksOf(body), body.length - 1).catch((err: unknown) => err);
    expect(over).toBeInstanceOf(ConnectError);
    expect((over as ConnectError).code).toBe(Code.ResourceExhausted);
    expect((over as ConnectError).rawMessage).toBe(
      `the request body is over ${body.length - 1} bytes; send a smaller body`,
    );
  });

  it("is the empty object when the body is empty or blank", async () => {
    await expect(readJsonBody(chunksOf(), 10)).resolves.toEqual({});
    await expect(readJsonBody(chunksOf(" \n"), 10)).resolves.toEqual({});
  });
});

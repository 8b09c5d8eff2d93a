// The REST status of each Connect code: Connect's mapping, except 413 for resource_exhausted.
import { Code, ConnectError } from "@connectrpc/connect";
import { codeToHttpStatus } from "@connectrpc/connect/protocol-connect";
import { describe, expect, it } from "vitest";
import { httpStatusOf } from "../../../src/api/rest/http-status.js";

const codes = Object.values(Code).filter((c): c is Code => typeof c === "number");

describe("REST statuses", () => {
  it("are Connect's for every code but resource_exhausted", () => {
    for (const code of codes.filter((c) => c !== Code.ResourceExhausted))
      expect(httpStatusOf(new ConnectError("x", code)), Code[code]).toBe(codeToHttpStatus(code));
  });

  it(
    "answer resource_exhausted with 413, not 429: a size over a bound fails " +
      "again however long the client waits",
    () => {
      expect(
        httpStatusOf(new ConnectError("the bundle is over the cap", Code.ResourceExhausted)),
      ).toBe(413);
    },
  );
});

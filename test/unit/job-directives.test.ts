import { describe, expect, it } from "vitest";
import { parseDirective, splitDirective } from "../../src/protocol/job-directives.js";
import { parseJobEvent } from "../../src/protocol/job-events.js";
import { parseResult } from "../../src/protocol/job-result.js";

// The frozen grammar of docs/job-contract.md: what parses, and what stays an ordinary log line.
describe("job directives", () => {
  it("progress is a percent (0-100, decimals, optional %) or done/total with 0 <= done <= total and total > 0", () => {
    expect(parseDirective("::forelead::progress 42")).toEqual({
      name: "progress",
      progress: { percent: 42 },
    });
    expect(parseDirective("::forelead::progress 12.5%")).toEqual({
      name: "progress",
      progress: { percent: 12.5 },
    });
    expect(parseDirective("::forelead::progress 0")).toEqual({
      name: "progress",
      progress: { percent: 0 },
    });
    expect(parseDirective("::forelead::progress 3/10")).toEqual({
      name: "progress",
      progress: { done: 3, total: 10 },
    });
    expect(parseDirective("::forelead::progress   7/7  ")).toEqual({
      name: "progress",
      progress: { done: 7, total: 7 },
    });
    for (const bad of [
      "101",
      "-1",
      "1e2",
      "4/3",
      "1/0",
      "3/",
      "abc",
      "",
      "50 percent",
      "9999999999/9999999999",
    ])
      expect(parseDirective(`::forelead::progress ${bad}`), bad).toBeUndefined();
  });

  it("result is a JSON object; error is any non-empty text, cut at 4096 characters", () => {
    expect(parseDirective('::forelead::result {"a":[1,2]}')).toEqual({
      name: "result",
      result: { a: [1, 2] },
    });
    for (const bad of ["[1]", "1", "null", '"x"', "{broken", ""])
      expect(parseDirective(`::forelead::result ${bad}`), bad).toBeUndefined();
    expect(parseDirective("::forelead::error make: *** [test] Error 2")).toEqual({
      name: "error",
      message: "make: *** [test] Error 2",
    });
    expect(
      (parseDirective(`::forelead::error ${"x".repeat(5000)}`) as { message: string }).message,
    ).toHaveLength(4096);
    expect(parseDirective("::forelead::error")).toBeUndefined();
    expect(parseDirective('::forelead::input {"id":"q1","prompt":"Go?"}')).toEqual({
      name: "input",
      request: { id: "q1", prompt: "Go?" },
    });
    for (const bad of ["[1]", "1", "null", '"x"', "{broken", ""])
      expect(parseDirective(`::forelead::input ${bad}`), bad).toBeUndefined();
  });

  it(
    "unknown names, a prefix not at the start, and odd names are ordinary " +
      "lines; splitDirective still reads an unknown name for directives " +
      "defined elsewhere",
    () => {
      for (const line of [
        "::forelead::bogus 1",
        " ::forelead::progress 5",
        "::forelead::Progress 5",
        "::forelead::",
        "progress 5",
        "::forelead::toString x",
        "::forelead::constructor x",
      ])
        expect(parseDirective(line), line).toBeUndefined();
      expect(splitDirective('::forelead::input {"id":"q1"}')).toEqual({
        name: "input",
        argument: '{"id":"q1"}',
      });
      expect(splitDirective("::forelead::input")).toEqual({ name: "input", argument: "" });
      expect(splitDirective("::forelead::IN put")).toBeUndefined();
    },
  );
});

describe("job events and results", () => {
  it("an event is an object with a non-empty string type outside the reserved prefixes", () => {
    expect(parseJobEvent('{"type":"test.passed","n":1}')).toEqual({
      event: { type: "test.passed", n: 1 },
    });
    for (const [line, problem] of [
      ["nope", /is not JSON/],
      ["[1]", /is not a JSON object/],
      ['{"type":""}', /has no "type" string/],
      ['{"n":1}', /has no "type" string/],
      ['{"type":"job.exited"}', /the prefix "job\." is reserved/],
      ['{"type":"resource.sample"}', /the prefix "resource\." is reserved/],
      ['{"type":"runner.event_dropped"}', /the prefix "runner\." is reserved/],
    ] as const)
      expect((parseJobEvent(line) as { problem: string }).problem, line).toMatch(problem);
  });

  it("a result is a JSON object of at most 1 MiB", () => {
    expect(parseResult('{"ok":true}')).toEqual({ result: { ok: true } });
    expect((parseResult("[]") as { problem: string }).problem).toBe(
      'is an array, not a JSON object; write an object such as {"passed": 12}',
    );
    expect((parseResult("null") as { problem: string }).problem).toMatch(
      /^is null, not a JSON object/,
    );
    expect((parseResult(`{"x":"${"a".repeat(1024 * 1024)}"}`) as { problem: string }).problem).toBe(
      "is 1048584 bytes of JSON; a result is at most 1048576 bytes (1 MiB)",
    );
  });
});

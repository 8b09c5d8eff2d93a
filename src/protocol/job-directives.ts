import { parseResult, type JobResult } from "./job-result.js";

/**
 * Directives: lines a job prints on stdout to tell the runner something
 * (docs/job-contract.md, "Directives"). The grammar is frozen:
 *
 *     line      = "::forelead::" name [ " " argument ]
 *     name      = 1*( "a"-"z" / "-" )
 *     progress  = percent / done "/" total   ; percent: 0-100, decimals allowed; done, total: 0 <= done <= total, total > 0
 *     result    = a JSON object (the rest of the line)
 *     error     = any text, the failure message of a failed job (at most 4096 characters)
 *     input     = a JSON object (the rest of the line): an input request {id, prompt, schema, expiresInSeconds}
 *
 * The prefix must start the line; the name ends at the first space (one
 * space separates the argument, which runs to the end of the line and is
 * trimmed). A line with an unknown name, or a known name with an argument
 * that does not parse, is not a directive: it is an ordinary log line, and
 * the runner does nothing with it. Every line, directive or not, stays in
 * the job's log.
 *
 * New directives are added to `directiveParsers` (one entry each), never by
 * changing the meaning of a line that parses today.
 */
const directivePrefix = "::forelead::";

/** Most characters of an error directive's message that are kept. */
const maxErrorMessageChars = 4096;

/** How far a job is: a percent, or done of total. */
export type Progress =
  { readonly percent: number } | { readonly done: number; readonly total: number };

/** A parsed directive. */
export type Directive =
  | { readonly name: "progress"; readonly progress: Progress }
  | { readonly name: "result"; readonly result: JobResult }
  | { readonly name: "error"; readonly message: string }
  /**
   * The request as the job wrote it; its rules (src/protocol/input-request.ts) are checked where it
   * is used, as the file's are.
   */
  | { readonly name: "input"; readonly request: Readonly<Record<string, unknown>> };

/** A directive's name and its argument, before the argument is parsed. */
export interface DirectiveLine {
  readonly name: string;
  /** The text after the first space, trimmed; "" when there is none. */
  readonly argument: string;
}

/**
 * The name and argument of a line that has the directive form, or
 * undefined. The one place the line syntax is read: a directive defined
 * outside this module (e.g. suspend's `input`) splits with this and parses
 * its own argument.
 */
export function splitDirective(line: string): DirectiveLine | undefined {
  if (!line.startsWith(directivePrefix)) return undefined;
  const rest = line.slice(directivePrefix.length);
  const space = rest.indexOf(" ");
  const name = space === -1 ? rest : rest.slice(0, space);
  if (!/^[a-z-]+$/.test(name)) return undefined;
  return { name, argument: space === -1 ? "" : rest.slice(space + 1).trim() };
}

/** Largest done or total count (int32, as the job view's JobProgress carries it). */
export const maxProgressCount = 2 ** 31 - 1;

/**
 * Each directive's argument parser: the directive, or undefined when the argument does not parse.
 */
const directiveParsers: {
  readonly [name: string]: (argument: string) => Directive | undefined;
} = {
  progress(argument) {
    const count = /^(\d{1,10})\/(\d{1,10})$/.exec(argument);
    if (count) {
      const done = Number(count[1]);
      const total = Number(count[2]);
      return total > 0 && done <= total && total <= maxProgressCount
        ? { name: "progress", progress: { done, total } }
        : undefined;
    }
    if (!/^\d{1,3}(\.\d{1,6})?%?$/.test(argument)) return undefined;
    const percent = Number(argument.replace(/%$/, ""));
    return percent <= 100 ? { name: "progress", progress: { percent } } : undefined;
  },
  result(argument) {
    const parsed = parseResult(argument);
    return "result" in parsed ? { name: "result", result: parsed.result } : undefined;
  },
  error(argument) {
    return argument
      ? { name: "error", message: argument.slice(0, maxErrorMessageChars) }
      : undefined;
  },
  input(argument) {
    let value: unknown;
    try {
      value = JSON.parse(argument);
    } catch {
      return undefined;
    }
    return typeof value === "object" && value !== null && !Array.isArray(value)
      ? { name: "input", request: value as Record<string, unknown> }
      : undefined;
  },
};

/** The directive `line` holds, or undefined when it is an ordinary log line. */
export function parseDirective(line: string): Directive | undefined {
  const split = splitDirective(line);
  if (!split || !Object.hasOwn(directiveParsers, split.name)) return undefined;
  return directiveParsers[split.name]!(split.argument);
}

/**
 * The rules of a job's result (docs/job-contract.md), applied by the runner
 * to /output/result.json and `::forelead::result` lines and by the control
 * plane to the completion's `result`: one home, so both refuse the same.
 */

/** Most bytes of a result's JSON text: 1 MiB. */
export const maxResultBytes = 1024 * 1024;

/** The error code a job fails with when its result breaks these rules. */
export const invalidResultCode = "invalid_result";

/** A result: a JSON object. */
export type JobResult = { readonly [key: string]: unknown };

/**
 * Why `value` (parsed from `bytes` bytes of JSON text) cannot be a result,
 * or undefined when it can: it must be a JSON object (not an array, string,
 * number or null) of at most maxResultBytes.
 */
export function resultProblem(value: unknown, bytes: number): string | undefined {
  if (bytes > maxResultBytes)
    return `is ${bytes} bytes of JSON; a result is at most ${maxResultBytes} bytes (1 MiB)`;
  if (value === null || typeof value !== "object" || Array.isArray(value))
    return `is ${describe(value)}, not a JSON object; write an object such as {"passed": 12}`;
  return undefined;
}

/**
 * Parses a result from its JSON text; the problem names what is wrong (not JSON, not an object, too
 * big).
 */
export function parseResult(
  text: string,
): { readonly result: JobResult } | { readonly problem: string } {
  const bytes = Buffer.byteLength(text, "utf8");
  if (bytes > maxResultBytes) return { problem: resultProblem(undefined, bytes)! };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return { problem: `is not JSON (${(err as Error).message})` };
  }
  const problem = resultProblem(value, bytes);
  return problem ? { problem } : { result: value as JobResult };
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return `a ${typeof value}`;
}

import { Code, ConnectError } from "@connectrpc/connect";
import { segmentProblem } from "./spiffe.js";

/** Longest runner or workspace id. */
export const maxSegmentIdLength = 128;

/**
 * Why `value` cannot be a runner or workspace id, or undefined when it can.
 * An id becomes one segment of a SPIFFE ID
 * (`/runners/<runner-id>/workspaces/<workspace-id>`), so it passes the same
 * rule the certificate policy parses with (segmentProblem: no "." or "..",
 * only A-Z a-z 0-9 . - _), and is at most 128 characters.
 */
export function segmentIdProblem(value: string): string | undefined {
  if (value.length > maxSegmentIdLength)
    return `it is longer than ${maxSegmentIdLength} characters`;
  return segmentProblem(value);
}

/**
 * Returns `value` when it is a valid runner or workspace id; otherwise throws invalid_argument
 * naming `field`.
 */
export function checkSegmentId(field: string, value: string): string {
  const problem = segmentIdProblem(value);
  if (problem) throw segmentIdError(field, value, problem);
  return value;
}

/**
 * The refusal of an id that breaks the rule: what was sent, the rule it broke, and what an id may
 * be.
 */
export function segmentIdError(field: string, value: string, problem: string): ConnectError {
  return new ConnectError(
    `${field} ${JSON.stringify(value.slice(0, 80))} is not a valid id ` +
      `(${problem}); an id is 1 to ${maxSegmentIdLength} characters of A-Z a-z ` +
      `0-9 . _ - and not "." or ".."`,
    Code.InvalidArgument,
  );
}

import { Code, ConnectError } from "@connectrpc/connect";

const stalled = new WeakSet<Error>();

/**
 * The error that ends a request whose body made no progress for `ms`:
 * deadline_exceeded on Connect and gRPC, 408 on REST (isBodyStalled). An
 * NDJSON stream request keeps what arrived before it, like any refusal.
 */
export function bodyStalledError(ms: number): ConnectError {
  const err = new ConnectError(
    `the request body made no progress for ${ms / 1000} s; send the body without pauses, or the rest in a new request`,
    Code.DeadlineExceeded,
  );
  stalled.add(err);
  return err;
}

/** Whether `err`, or an error it was made from (its causes), is a stalled body. */
export function isBodyStalled(err: unknown): boolean {
  for (let e = err, depth = 0; e instanceof Error && depth < 8; e = e.cause, depth++)
    if (stalled.has(e)) return true;
  return false;
}

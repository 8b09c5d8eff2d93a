import { Code, ConnectError } from "@connectrpc/connect";

const throttled = new WeakSet<Error>();

/**
 * A refusal that asks the client to come back later, not to shrink what it sent: resource_exhausted
 * on Connect and gRPC, 429 on REST (isThrottled), where resource_exhausted is otherwise 413 (a size
 * over a bound).
 */
export function throttledError(message: string): ConnectError {
  const err = new ConnectError(message, Code.ResourceExhausted);
  throttled.add(err);
  return err;
}

/** Whether `err`, or an error it was made from (its causes), is a throttled refusal. */
export function isThrottled(err: unknown): boolean {
  for (let e = err, depth = 0; e instanceof Error && depth < 8; e = e.cause, depth++)
    if (throttled.has(e)) return true;
  return false;
}

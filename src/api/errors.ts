import { Code, ConnectError } from "@connectrpc/connect";
import { isDatabaseUnreachable } from "../store/unreachable.js";

/** Seconds a client is told to wait (Retry-After) before retrying while the database is away. */
export const databaseRetryAfterSeconds = 1;

/**
 * Maps anything a handler threw to a ConnectError. The database being
 * unreachable is 503 unavailable with Retry-After (a header on every surface),
 * unlogged: the store's health tracker logs the outage once, not once per
 * request. Other errors that are not ConnectErrors are bugs or platform
 * failures: their text may hold internals, so the client gets an id to quote
 * and the operator's log gets the details.
 */
export function toConnectError(err: unknown, where: string): ConnectError {
  if (err instanceof ConnectError) return err;
  if (isDatabaseUnreachable(err)) {
    return new ConnectError("the database is unreachable; retry", Code.Unavailable, { "retry-after": String(databaseRetryAfterSeconds) });
  }
  const incident = Math.random().toString(36).slice(2, 10);
  console.error(`error ${incident} in ${where}:`, err);
  return new ConnectError(`internal error ${incident}; the control plane's log has the details`, Code.Internal);
}

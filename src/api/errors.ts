import { Code, ConnectError } from "@connectrpc/connect";
import { DatabasePoolBusyError, isDatabaseUnreachable } from "../store/unreachable.js";

/** Seconds a client is told to wait (Retry-After) before retrying while the database is away. */
const databaseRetryAfterSeconds = 1;

/**
 * What Node raises when the client went away mid-request (closed or reset
 * its stream, or dropped the connection): not a bug, so not logged. The
 * listener counts these clients (ControlPlane.connections.prematureCloses).
 */
const clientGoneCodes = new Set([
  "ERR_STREAM_PREMATURE_CLOSE",
  "ERR_HTTP2_STREAM_ERROR",
  "ERR_HTTP2_INVALID_STREAM",
  "ERR_STREAM_DESTROYED",
  "ECONNRESET",
  "EPIPE",
  "ABORT_ERR",
]);

/**
 * Maps anything a handler threw to a ConnectError. The database being
 * unreachable is 503 unavailable with Retry-After (a header on every surface),
 * unlogged: the store's health tracker logs the outage once, not once per
 * request. Other errors that are not ConnectErrors are bugs or platform
 * failures: their text may hold internals, so the client gets an id to quote
 * and the operator's log gets the details. A client that went away is
 * canceled, without a log line.
 */
export function toConnectError(err: unknown, where: string): ConnectError {
  if (err instanceof ConnectError) return err;
  // Before clientGone: both know ECONNRESET, and a reset database connection must be a 503, not a
  // cancel (a client that is gone never reads either answer).
  if (err instanceof DatabasePoolBusyError) {
    return new ConnectError(
      `${err.message}: the control plane is overloaded or holding long ` +
        `transactions; retry (its operator: check forelead status's pool and the ` +
        `database's slow queries)`,
      Code.Unavailable,
      { "retry-after": String(databaseRetryAfterSeconds) },
    );
  }
  if (isDatabaseUnreachable(err)) {
    return new ConnectError("the database is unreachable; retry", Code.Unavailable, {
      "retry-after": String(databaseRetryAfterSeconds),
    });
  }
  if (clientGone(err)) return new ConnectError("the client closed the request", Code.Canceled);
  const incident = Math.random().toString(36).slice(2, 10);
  console.error(`error ${incident} in ${where}:`, err);
  return new ConnectError(
    `internal error ${incident}; the control plane's log has the details`,
    Code.Internal,
  );
}

function clientGone(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return typeof code === "string" && clientGoneCodes.has(code);
}

import { Code, ConnectError } from "@connectrpc/connect";
import { codeToHttpStatus, codeToString } from "@connectrpc/connect/protocol-connect";

const payloadTooLargeErrors = new WeakSet<ConnectError>();

/**
 * A body over its byte bound: resource_exhausted, which REST answers with 413
 * (Connect's mapping would say 429, which means "slow down", not "too big").
 */
export function payloadTooLarge(message: string): ConnectError {
  const err = new ConnectError(message, Code.ResourceExhausted);
  payloadTooLargeErrors.add(err);
  return err;
}

/**
 * The HTTP status of an error on the REST surface: Connect's mapping, 413
 * for oversized bodies, also when a handler rethrew one with more context
 * (as its cause, keeping the code).
 */
export function httpStatusOf(err: ConnectError): number {
  for (let e: unknown = err; e instanceof ConnectError && e.code === err.code; e = e.cause) {
    if (payloadTooLargeErrors.has(e)) return 413;
  }
  return codeToHttpStatus(err.code);
}

/** The REST error body: the Connect error shape {code, message}. */
export function errorBody(err: ConnectError): { code: string; message: string } {
  return { code: codeToString(err.code), message: err.rawMessage };
}

/**
 * Maps anything a handler threw to a ConnectError. Errors that are not
 * ConnectErrors are bugs or platform failures: their text may hold internals,
 * so the client gets an id to quote and the operator's log gets the details.
 */
export function toConnectError(err: unknown, where: string): ConnectError {
  if (err instanceof ConnectError) return err;
  const incident = Math.random().toString(36).slice(2, 10);
  console.error(`error ${incident} in ${where}:`, err);
  return new ConnectError(`internal error ${incident}; the control plane's log has the details`, Code.Internal);
}

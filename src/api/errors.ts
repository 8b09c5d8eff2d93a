import { Code, ConnectError } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";

/**
 * The HTTP status of each Connect code on the REST surface: Connect's own
 * mapping, except that resource_exhausted is 413. Forelead raises
 * resource_exhausted only for a size over a bound (a body, a bundle, an
 * artifact, the open uploads of a lease), and 429 would tell a client to slow
 * down and retry the same request, which fails the same way again.
 */
const httpStatus: Readonly<Record<Code, number>> = {
  [Code.Canceled]: 499,
  [Code.Unknown]: 500,
  [Code.InvalidArgument]: 400,
  [Code.DeadlineExceeded]: 504,
  [Code.NotFound]: 404,
  [Code.AlreadyExists]: 409,
  [Code.PermissionDenied]: 403,
  [Code.ResourceExhausted]: 413,
  [Code.FailedPrecondition]: 400,
  [Code.Aborted]: 409,
  [Code.OutOfRange]: 400,
  [Code.Unimplemented]: 501,
  [Code.Internal]: 500,
  [Code.Unavailable]: 503,
  [Code.DataLoss]: 500,
  [Code.Unauthenticated]: 401,
};

/** The HTTP status of an error on the REST surface (see httpStatus). */
export function httpStatusOf(err: ConnectError): number {
  return httpStatus[err.code] ?? 500;
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

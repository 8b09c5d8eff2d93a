import { Code, type ConnectError } from "@connectrpc/connect";
import { isBodyStalled } from "../body-stall.js";
import { isThrottled } from "../../protocol/throttled.js";

/**
 * The HTTP status of each Connect code on the REST surface: Connect's own
 * mapping, except that resource_exhausted is 413. Forelead raises
 * resource_exhausted only for a size over a bound (a body, a bundle, an
 * artifact, the open uploads of a lease), and 429 would tell a client to slow
 * down and retry the same request, which fails the same way again. The
 * Connect and gRPC surfaces send the code itself.
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

/**
 * The HTTP status of an error on the REST surface (see httpStatus); a body that stalled is 408
 * Request Timeout, a throttled refusal (a full concurrency group) 429 Too Many Requests.
 */
export function httpStatusOf(err: ConnectError): number {
  if (isBodyStalled(err)) return 408;
  if (isThrottled(err)) return 429;
  return httpStatus[err.code] ?? 500;
}

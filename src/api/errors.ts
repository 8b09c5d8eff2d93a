import { Code, ConnectError } from "@connectrpc/connect";

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

import { Code, ConnectError, type Client } from "@connectrpc/connect";
import type { Lease } from "../../../gen/forelead/runner/v1/job_pb.js";
import type { RunnerService } from "../../../gen/forelead/runner/v1/runner_pb.js";
import { checkoutBase, CheckoutRefused } from "./checkout.js";
import { CheckoutError, type CheckoutStep } from "./checkout-step.js";

/**
 * The agent's checkout step over the runner protocol: the lease's base
 * bundle is fetched and verified against its baseTree (src/runner/checkout/checkout.ts)
 * and checked out into the job's workspace directory.
 */
export function protocolCheckout(
  client: () => Promise<Client<typeof RunnerService>>,
): CheckoutStep {
  return {
    async checkout(lease: Lease, leaseToken: string, dir: string, signal: AbortSignal) {
      const job = lease.job!;
      try {
        await checkoutBase(
          { jobId: job.id, leaseToken, baseCommit: job.baseCommit, baseTree: job.baseTree },
          { client: await client(), dir, signal },
        );
      } catch (err) {
        throw checkoutErrorOf(err);
      }
    },
  };
}

/**
 * A refusal (the code does not match the lease) is final; anything else may work on another
 * attempt.
 */
function checkoutErrorOf(err: unknown): CheckoutError {
  if (err instanceof CheckoutRefused)
    return new CheckoutError("checkout_refused", err.message, false);
  const message = `the job's code could not be checked out: ${(err as Error).message}`;
  if (
    err instanceof ConnectError &&
    [Code.InvalidArgument, Code.FailedPrecondition, Code.PermissionDenied].includes(err.code)
  ) {
    return new CheckoutError("checkout_failed", message, false);
  }
  return new CheckoutError("checkout_failed", message, true);
}

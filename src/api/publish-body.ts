import { Code, ConnectError } from "@connectrpc/connect";
import type { AgentPublishRequest } from "../../gen/forelead/runner/v1/runner_pb.js";

/**
 * Splits a publish request stream into its first message (the lease fields)
 * and the bundle's bytes, bounded to `maxBytes` (resource_exhausted past it: the
 * bundle is refused whole, never cut). Later messages may repeat the lease fields but
 * not change them.
 */
export async function publishChunks(
  reqs: AsyncIterable<AgentPublishRequest>,
  maxBytes: number,
): Promise<{ first: AgentPublishRequest; chunks: AsyncIterable<Uint8Array> }> {
  const it = reqs[Symbol.asyncIterator]();
  const head = await it.next();
  if (head.done)
    throw new ConnectError(
      "the request holds no message; send apiVersion, jobId, leaseToken and the bundle",
      Code.InvalidArgument,
    );
  const first = head.value;
  async function* chunks(): AsyncGenerator<Uint8Array> {
    let total = 0;
    for (let r: IteratorResult<AgentPublishRequest> = head; !r.done; r = await it.next()) {
      const m = r.value;
      if (
        (m.jobId && m.jobId !== first.jobId) ||
        (m.leaseToken && m.leaseToken !== first.leaseToken)
      ) {
        throw new ConnectError(
          "every message of one publish must name the same jobId and leaseToken as the first",
          Code.InvalidArgument,
        );
      }
      total += m.data.length;
      if (total > maxBytes)
        throw new ConnectError(
          `the bundle is over the ${maxBytes}-byte cap on bundles; it was refused whole`,
          Code.ResourceExhausted,
        );
      if (m.data.length > 0) yield m.data;
    }
  }
  return { first, chunks: chunks() };
}

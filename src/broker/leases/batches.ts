import type { Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import { settleEach } from "./batcher.js";
import type { JobSnapshot } from "../jobs/snapshot.js";
import type { LeaseHolder } from "./check.js";
import { checkCompletion, type CheckedCompletion, type CompletionInput } from "./completion.js";
import type { LeaseView } from "./views.js";
import type { BrokerObserver } from "../observer.js";
import { claimJob, claimLeases } from "./claim.js";
import type { SecretBox } from "../../secrets/box.js";
import { completeJob, completeJobInTransaction, settleLeases } from "./complete.js";
import type { SettleHook } from "../pipelines/settle-hook.js";

// Claims and completions that arrive together are served by one statement:
// each commit waits for a WAL flush, and one flush (and one round trip per
// statement) for many requests is what lets the broker pass the rate of
// separate commits (docs/performance.md). A batch of one takes the
// single-request path (claimJob, completeJob), so an idle control plane
// behaves exactly as before; anything a batch cannot settle on its happy
// path goes through the single-request path too, after the batch commits.

/**
 * Claims for each holder: one call of claimLeases for the lot, or claimJob
 * one by one, in arrival order, if that call fails (a runner in it is not
 * registered, or a deadlock), so each request gets its own answer or error
 * and a runner's free slots still go to its earliest requests.
 */
export async function claimBatch(
  db: Kysely<Database>,
  holders: readonly LeaseHolder[],
  leaseSeconds: number,
  box?: SecretBox,
): Promise<Array<PromiseSettledResult<LeaseView | undefined>>> {
  if (holders.length > 1) {
    try {
      return (await claimLeases(db, holders, leaseSeconds, box)).map((value) => ({
        status: "fulfilled",
        value,
      }));
    } catch {
      // Rolled back whole: nothing was claimed.
    }
  }
  const results: Array<PromiseSettledResult<LeaseView | undefined>> = [];
  for (const h of holders)
    results.push(...(await settleEach([h], (one) => claimJob(db, one, leaseSeconds, box))));
  return results;
}

/**
 * Each input checked (checkCompletion): the valid ones with their index, and a result slot per
 * input, a refusal's already filled.
 */
function checkEach<O>(inputs: readonly CompletionInput[]): {
  results: Array<PromiseSettledResult<O> | undefined>;
  valid: Array<{ index: number; input: CompletionInput; checked: CheckedCompletion }>;
} {
  const results: Array<PromiseSettledResult<O> | undefined> = inputs.map(() => undefined);
  const valid: Array<{ index: number; input: CompletionInput; checked: CheckedCompletion }> = [];
  inputs.forEach((input, index) => {
    try {
      valid.push({ index, input, checked: checkCompletion(input) });
    } catch (reason) {
      results[index] = { status: "rejected", reason };
    }
  });
  return { results, valid };
}

/**
 * Completes each input: checks first, one statement for the valid ones, completeJobInTransaction
 * for whatever that left.
 */
export async function completeBatch(
  db: Kysely<Database>,
  inputs: readonly CompletionInput[],
  observer?: BrokerObserver,
  hook?: SettleHook,
): Promise<Array<PromiseSettledResult<JobSnapshot>>> {
  if (inputs.length === 1)
    return settleEach(inputs, (input) => completeJob(db, input, observer, hook));
  const { results, valid } = checkEach<JobSnapshot>(inputs);
  let replies: Array<JobSnapshot | undefined> = valid.map(() => undefined);
  let tried = false;
  if (valid.length > 1) {
    try {
      replies = await settleLeases(db, valid, observer, hook);
      tried = true;
    } catch {
      // Rolled back (a deadlock between batches, say): each is completed alone below.
    }
  }
  valid.forEach((v, i) => {
    const reply = replies[i];
    if (reply) results[v.index] = { status: "fulfilled", value: reply };
  });
  const rest = valid.filter((v) => !results[v.index]);
  const settled = await settleEach(rest, (v) =>
    tried
      ? completeJobInTransaction(db, v.input, v.checked, observer, hook)
      : completeJob(db, v.input, observer, hook),
  );
  rest.forEach((v, i) => (results[v.index] = settled[i]));
  return results as Array<PromiseSettledResult<JobSnapshot>>;
}

/**
 * What completeAndClaimBatch answers for one completion: its settled job, and the lease claimed
 * with it.
 */
export interface SettledAndClaimed {
  readonly job: JobSnapshot;
  /**
   * Leased in the completion's transaction; none when none was free or the completion took the slow
   * path (the caller then claims as Claim does).
   */
  readonly lease?: LeaseView;
}

/**
 * Completions that also claim the runner's next lease (CompleteRequest.next): settleLeases for the
 * lot (one statement, its own commit), then claimLeases (forelead_claim, one statement, its own
 * commit) for the runners whose completion it settled, so the claim sees their slots free; the
 * replies go out after both. Two statements outside a transaction, not one transaction: no BEGIN,
 * COMMIT or set_config round trips, and both go out as prepared statements (watched-pool.ts names
 * none inside a transaction): 1.2× the jobs/s of the one-transaction form (docs/performance.md,
 * "Fewer round trips per job"). A claim that leases nothing commits without waiting for the WAL
 * flush (forelead_claim), which now cannot reach the completion's commit. Anything the settle
 * does not settle (a repeat, a refusal) and a failure of it (nothing settled) go through
 * completeBatch, with no lease; a failure of the claim (a runner retired meanwhile, a deadlock)
 * leaves the settled completions answered with no lease, and the caller claims as Claim does.
 */
export async function completeAndClaimBatch(
  db: Kysely<Database>,
  inputs: readonly CompletionInput[],
  leaseSeconds: number,
  box?: SecretBox,
  observer?: BrokerObserver,
  hook?: SettleHook,
): Promise<Array<PromiseSettledResult<SettledAndClaimed>>> {
  const { results, valid } = checkEach<SettledAndClaimed>(inputs);
  let replies: Array<JobSnapshot | undefined> = [];
  try {
    replies = await settleLeases(db, valid, observer, hook);
  } catch {
    // One statement (or the hook's transaction), rolled back: nothing was settled; each is
    // completed alone below.
  }
  const settledOnes = valid.flatMap((v, i) => (replies[i] ? [{ v, job: replies[i] }] : []));
  for (const { v, job } of settledOnes) results[v.index] = { status: "fulfilled", value: { job } };
  if (settledOnes.length) {
    try {
      const leases = await claimLeases(
        db,
        settledOnes.map(({ v }) => v.input),
        leaseSeconds,
        box,
      );
      settledOnes.forEach(
        ({ v, job }, i) =>
          (results[v.index] = {
            status: "fulfilled",
            value: { job, lease: leases[i] },
          }),
      );
    } catch {
      // Nothing was claimed (one statement); the completions stand, answered with no lease.
    }
  }
  const rest = valid.filter((v) => !results[v.index]);
  const settled = await completeBatch(
    db,
    rest.map((v) => v.input),
    observer,
    hook,
  );
  rest.forEach((v, i) => {
    const r = settled[i]!;
    results[v.index] =
      r.status === "fulfilled" ? { status: "fulfilled", value: { job: r.value } } : r;
  });
  return results as Array<PromiseSettledResult<SettledAndClaimed>>;
}

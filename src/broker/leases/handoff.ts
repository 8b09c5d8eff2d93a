import type { Kysely } from "kysely";
import type { Database } from "../../store/schema.js";
import type { SecretBox } from "../../secrets/box.js";
import { hashLeaseToken, newLeaseToken } from "../ids.js";
import type { EnqueueInput } from "../jobs/rules.js";
import type { HandedRow, HandoffTarget } from "../jobs/enqueue.js";
import type { LeaseHolder } from "./check.js";
import type { LeaseView } from "./views.js";
import { leaseViews } from "./claim.js";
import type { Reservation, Wakeups } from "./wakeups.js";

/**
 * The direct handoff: an enqueue that finds a claim waiting on this replica
 * in the job's workspace leases a job to that claim's runner in the
 * enqueue's own statement (jobs.ts handoffStatement, forelead_handoff), and
 * the waiting claim answers with that lease. Without it a job reaches a
 * waiting runner through the enqueue's commit, its NOTIFY, a wake on each
 * replica and a claim statement with its own commit; with it, through one
 * statement. What the lease rules decide stays in forelead_claim: it may
 * lease the new job, an older job the runner is owed first, or none (labels,
 * requirements, slots, a pause), and then the new job is announced as
 * before. Other replicas learn of the job only by its NOTIFY, and never of a
 * job handed off: it is running when they can first see it.
 *
 * Not for a job with secrets (its secret rows are written after the job's
 * own, in a transaction: it keeps the NOTIFY path), nor for one not due yet
 * (runAt, delaySeconds). Measured in docs/performance.md, section 2.
 */
export interface Handoff {
  /**
   * Reserves a waiting claim (wakeups.ts) and names its runner for the enqueue's statement;
   * undefined when none waits. Called just before the statement.
   */
  readonly target: () => HandoffTarget | undefined;
  /**
   * Hands the reserved claim the lease the statement made (`handed`), or lets it wait on when it
   * made none.
   */
  deliver(handed: HandedRow | undefined): Promise<void>;
  /**
   * Ends a reservation that was not delivered (the statement failed): the claim waits on as it
   * would have.
   */
  cancel(): void;
}

/** The handoff of one enqueue, or undefined when `input` cannot be handed off. */
export function handoffFor(
  db: Kysely<Database>,
  wakeups: Wakeups<LeaseHolder, LeaseView>,
  input: EnqueueInput,
  leaseSeconds: number,
  box?: SecretBox,
): Handoff | undefined {
  if (input.runAt || input.delaySeconds) return undefined;
  let reservation: Reservation<LeaseHolder, LeaseView> | undefined;
  let token = "";
  let tokenHashHex = "";
  return {
    target() {
      reservation = wakeups.reserve(input.workspaceId);
      if (!reservation) return undefined;
      token = newLeaseToken();
      tokenHashHex = hashLeaseToken(token).toString("hex");
      return { runnerId: reservation.holder.runnerId, tokenHashHex, leaseSeconds };
    },
    async deliver(handed) {
      if (!reservation) return;
      // Should reading the lease fail, the enqueue's `cancel` still ends the reservation.
      const [lease] = handed ? await leaseViews(db, [handed], [token], [tokenHashHex], box) : [];
      reservation.deliver(lease);
    },
    cancel() {
      reservation?.deliver(undefined);
    },
  };
}

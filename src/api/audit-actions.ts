import { ConnectError, createContextKey, type HandlerContext } from "@connectrpc/connect";

/** One administrative action's outcome, as a handler reports it. */
export interface ActionEntry {
  /** e.g. "job.enqueue", "runner.retire", "grant.create", "grant.use", "certificate.issue". */
  readonly action: string;
  /** What was acted on, e.g. "job <id> in workspace w1". Never a secret. */
  readonly target: string;
  readonly decision: "allow" | "deny";
  readonly reason: string;
  /** Whom the record is about when the caller has no certificate (an enrolling runner). */
  readonly spiffeId?: string;
}

/** Records actions with the request's facts (route, peer, certificate), which the guard knows. */
export interface ActionAuditor {
  record(entry: ActionEntry): void;
}

/** Set by the guard on every admitted request. */
export const actionAuditorKey = createContextKey<ActionAuditor | undefined>(undefined, {
  description: "action auditor",
});

/** What a successful action says about itself. */
export interface ActionOutcome {
  readonly reason: string;
  /** Replaces the target given up front, e.g. once the job id is known. */
  readonly target?: string;
  readonly spiffeId?: string;
}

/**
 * Runs an administrative action and records it in the audit trail: allowed
 * with `describe(result)` when it succeeds, denied with the error's message
 * when it throws. Error messages are written for the caller and never carry a
 * secret, so they are safe to keep; an internal error is recorded without its
 * text.
 */
export async function audited<T>(
  ctx: HandlerContext,
  action: string,
  target: string,
  run: () => Promise<T>,
  describe: (result: T) => ActionOutcome,
  whoOnFailure?: string,
): Promise<T> {
  const auditor = ctx.values.get(actionAuditorKey);
  if (!auditor) throw new Error(`${ctx.method.name}: no action auditor (the route is not guarded)`);
  let result: T;
  try {
    result = await run();
  } catch (err) {
    const reason =
      err instanceof ConnectError
        ? err.rawMessage
        : "internal error; the control plane's log has the details";
    auditor.record({
      action,
      target,
      decision: "deny",
      reason,
      spiffeId: whoOnFailure,
    });
    throw err;
  }
  const outcome = describe(result);
  auditor.record({
    action,
    target: outcome.target ?? target,
    decision: "allow",
    reason: outcome.reason,
    spiffeId: outcome.spiffeId,
  });
  return result;
}

/** Records an action that already happened (e.g. the second of two an enrollment makes). */
export function recordAction(ctx: HandlerContext, entry: ActionEntry): void {
  const auditor = ctx.values.get(actionAuditorKey);
  if (!auditor) throw new Error(`${ctx.method.name}: no action auditor (the route is not guarded)`);
  auditor.record(entry);
}

import type { Endpoint } from "../../cli/connection.js";
import { connectSessionService } from "./delegate.js";

/** A sign-in the dashboard refused by itself, without the token, code or state presented. */
export interface SignInRefusal {
  readonly method: "token" | "sso";
  /** Why, as the browser was told. */
  readonly reason: string;
  readonly clientAddress: string;
}

/**
 * Reports refused sign-ins to the control plane's audit trail (SessionService.ReportSignInRefusal,
 * one deny record of action session.sign_in each), best effort: `report` never waits and never
 * throws, and a control plane that cannot be told costs a line on stderr, not the refusal.
 */
export interface RefusalReports {
  report(refusal: SignInRefusal): void;
  close(): void;
}

/** Refusals reported one by one per second; the rest of that second is one summary. */
const perSecond = 5;
const windowMs = 1000;

/**
 * The reporter over `endpoint` (the operator's certificate, or the delegate's with single
 * sign-on). At most {@link perSecond} refusals a second are reported one by one; beyond that they
 * are counted and reported as one summary when the second ends, so a flood of bad sign-ins
 * cannot fill the audit table.
 */
export function createRefusalReports(
  endpoint: Endpoint,
  log: (line: string) => void,
): RefusalReports {
  const { client, close } = connectSessionService(endpoint);
  let windowStart = 0;
  let sent = 0;
  let held: { count: number; addresses: Set<string>; methods: Set<string> } | undefined;
  let timer: NodeJS.Timeout | undefined;
  let closed = false;
  const send = (refusal: SignInRefusal) => {
    if (closed) return;
    client
      .reportSignInRefusal({ apiVersion: "v1", ...refusal })
      .catch((err: unknown) =>
        log(
          `forelead dashboard: could not record a refused sign-in in the control plane's audit ` +
            `trail: ${err instanceof Error ? err.message : String(err)}`,
        ),
      );
  };
  const flush = () => {
    timer = undefined;
    const summary = held;
    held = undefined;
    if (!summary) return;
    const addresses = [...summary.addresses];
    const first = addresses[0] ?? "unknown";
    send({
      method: summary.methods.has("sso") ? "sso" : "token",
      reason: `${summary.count} more sign-ins were refused within a second (${[
        ...summary.methods,
      ].join(
        " and ",
      )}), beyond the ${perSecond} reported one by one; the dashboard's stderr has each`,
      clientAddress: (addresses.length > 1
        ? `${first} and ${addresses.length - 1} more`
        : first
      ).slice(0, 64),
    });
  };
  return {
    report(refusal) {
      const now = Date.now();
      if (now - windowStart >= windowMs && !held) {
        windowStart = now;
        sent = 0;
      }
      if (sent < perSecond) {
        sent++;
        send({ ...refusal, reason: refusal.reason.slice(0, 512) });
        return;
      }
      held ??= { count: 0, addresses: new Set(), methods: new Set() };
      held.count++;
      held.addresses.add(refusal.clientAddress);
      held.methods.add(refusal.method);
      if (!timer) {
        timer = setTimeout(flush, Math.max(0, windowStart + windowMs - now));
        timer.unref();
      }
    },
    close() {
      if (timer) clearTimeout(timer);
      flush();
      closed = true;
      close();
    },
  };
}

import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Command, Option } from "commander";
import type { AuditRecord } from "../../gen/forelead/admin/v1/admin_pb.js";
import { timeFlag } from "./admin-flags.js";
import { openAdminClient, withAdminClientOptions, type AdminClientFlags } from "./connection.js";
import { integerIn } from "./options.js";

interface AuditFlags extends AdminClientFlags {
  since?: Date;
  until?: Date;
  identity?: string;
  decision?: string;
  kind?: string;
  limit: number;
  json?: boolean;
}

/** `forelead audit`: the audit trail, newest first. */
export function auditCommand(): Command {
  return withAdminClientOptions(
    new Command("audit")
      .option(
        "--since <time>",
        "from this time (RFC 3339) or this long ago (1h, 30m)",
        timeFlag("--since"),
      )
      .option("--until <time>", "before this time (RFC 3339) or this long ago", timeFlag("--until"))
      .option("--identity <spiffe-id>", "only records of this SPIFFE ID")
      .addOption(
        new Option("--decision <decision>", "only allowed or only denied").choices([
          "allow",
          "deny",
        ]),
      )
      .addOption(
        new Option(
          "--kind <kind>",
          "only per-request decisions, only administrative actions, or notable: " +
            "actions and refusals (not the routine allows)",
        ).choices(["decision", "action", "notable"]),
      )
      .addOption(
        new Option("--limit <n>", "at most this many records")
          .default(100)
          .argParser(integerIn("--limit", 1, 100_000)),
      )
      .option("--json", "one JSON record per line"),
  ).action(async (flags: AuditFlags) => {
    const { admin, close } = await openAdminClient(flags);
    try {
      let left = flags.limit;
      let pageToken = "";
      do {
        const page = await admin.listAuditRecords({
          since: flags.since ? timestampFromDate(flags.since) : undefined,
          until: flags.until ? timestampFromDate(flags.until) : undefined,
          spiffeId: flags.identity ?? "",
          decision: flags.decision ?? "",
          kind: flags.kind ?? "",
          pageSize: Math.min(left, 1000),
          pageToken,
        });
        for (const r of page.records.slice(0, left))
          console.log(flags.json ? JSON.stringify(plain(r)) : line(r));
        left -= page.records.length;
        pageToken = page.nextPageToken;
      } while (pageToken && left > 0);
    } finally {
      close();
    }
  });
}

function plain(r: AuditRecord): Record<string, unknown> {
  return {
    id: r.id,
    at: r.at ? timestampDate(r.at).toISOString() : undefined,
    kind: r.kind,
    route: r.route,
    decision: r.decision,
    reason: r.reason,
    spiffeId: r.spiffeId || undefined,
    certificateSerial: r.certificateSerial || undefined,
    certificateSha256: r.certificateSha256 || undefined,
    certificateNotAfter: r.certificateNotAfter
      ? timestampDate(r.certificateNotAfter).toISOString()
      : undefined,
    remoteAddress: r.remoteAddress || undefined,
    delegate: r.delegate || undefined,
    personClaim: r.personClaim || undefined,
    action: r.action || undefined,
    target: r.target || undefined,
    count: r.count || 1,
    firstAt: r.firstAt ? timestampDate(r.firstAt).toISOString() : undefined,
    lastAt: r.lastAt ? timestampDate(r.lastAt).toISOString() : undefined,
  };
}

/** One record on one line: time, decision, what, who (with certificate serial), from where, why. */
function line(r: AuditRecord): string {
  const at = r.at ? timestampDate(r.at).toISOString() : "-";
  const what = r.kind === "action" ? `${r.action} ${r.target}` : r.route;
  const serial = r.certificateSerial ? ` (serial ${r.certificateSerial})` : "";
  const who = !r.spiffeId
    ? "(no certificate)"
    : r.delegate
      ? `${r.spiffeId} ("${r.personClaim}") through ${r.delegate}${serial}`
      : `${r.spiffeId}${serial}`;
  const repeated =
    r.count > 1
      ? ` (${r.count} times to ${r.lastAt ? timestampDate(r.lastAt).toISOString() : "-"})`
      : "";
  return (
    `${at}${repeated} ${r.decision.padEnd(5)} ${what} by ` +
    `${who}${r.remoteAddress ? ` from ${r.remoteAddress}` : ""}: ${r.reason}`
  );
}

import { timestampDate } from "@bufbuild/protobuf/wkt";
import { Command, Option } from "commander";
import { formatDuration } from "../identity/certificate-policy.js";
import { secondsFlag } from "./admin-flags.js";
import { openAdminClient, withAdminClientOptions, type AdminClientFlags } from "./connection.js";

interface CertsFlags extends AdminClientFlags {
  workspace?: string;
  runnerId?: string;
  all?: boolean;
  expiringWithin: number;
}

const flagged: Record<string, string> = {
  expiring_soon: "EXPIRING SOON",
  renewal_overdue: "FAILED TO RENEW",
  expired: "EXPIRED",
};

/**
 * `forelead certs`: issued runner certificates, flagging those expiring soon and runners that
 * failed to renew.
 */
export function certsCommand(): Command {
  return withAdminClientOptions(
    new Command("certs")
      .option("--workspace <id>", "only this workspace")
      .option("--runner-id <id>", "only this runner id")
      .option("--all", "every certificate, not only the newest per runner")
      .addOption(
        new Option("--expiring-within <duration>", "what counts as expiring soon")
          .default(7200, "2h")
          .argParser(secondsFlag("--expiring-within")),
      ),
  ).action(async (flags: CertsFlags) => {
    const { admin, close } = await openAdminClient(flags);
    try {
      const { certificates } = await admin.listCertificates({
        workspaceId: flags.workspace ?? "",
        runnerId: flags.runnerId ?? "",
        all: flags.all ?? false,
        expiringWithinSeconds: flags.expiringWithin,
      });
      const now = Date.now();
      const counts = new Map<string, number>();
      for (const c of certificates) {
        const notAfter = c.notAfter ? timestampDate(c.notAfter) : new Date(0);
        const left = notAfter.getTime() - now;
        const when =
          left > 0
            ? `expires ${notAfter.toISOString()} (in ${formatDuration(left)})`
            : `expired ${notAfter.toISOString()}`;
        counts.set(c.status, (counts.get(c.status) ?? 0) + 1);
        console.log(
          `${(flagged[c.status] ?? c.status).padEnd(15)} ${c.spiffeId} serial ` +
            `${c.serial} ${when}, issued via ${c.issuedVia}`,
        );
      }
      const summary = Object.keys(flagged).map(
        (s) => `${counts.get(s) ?? 0} ${flagged[s]!.toLowerCase()}`,
      );
      console.log(`${certificates.length} certificate(s): ${summary.join(", ")}`);
    } finally {
      close();
    }
  });
}

import { Command } from "commander";
import { StatusService } from "../../gen/forelead/admin/v1/status_pb.js";
import {
  resolveConnection,
  serviceClientFromFlags,
  withAdminClientOptions,
  type AdminClientFlags,
} from "./connection.js";
import { ClientCertificateError } from "./connection-tls.js";

/** One row of the doctor's table, as the route and `serve --check` give it. */
export interface CheckRow {
  readonly name: string;
  readonly status: string;
  readonly detail: string;
  readonly hint: string;
}

interface DoctorFlags extends AdminClientFlags {
  json?: boolean;
}

/**
 * `forelead doctor`: the control plane's named checks (GET /v1/admin/doctor), exit 1 when one
 * fails.
 */
export function doctorCommand(
  write: (text: string) => void = (t) => process.stdout.write(t),
): Command {
  return withAdminClientOptions(
    new Command("doctor").option("--json", "print the checks as JSON"),
  ).action(async (flags: DoctorFlags) => {
    let checks: CheckRow[];
    try {
      const client = await serviceClientFromFlags(flags, StatusService);
      checks = (await client.runDoctor({})).checks;
    } catch (err) {
      // The control plane cannot be asked: this side's certificate, or the control plane itself
      // (down, or its certificate refused), is the one failure to report.
      checks = [
        err instanceof ClientCertificateError
          ? {
              name: "client certificate",
              status: "fail",
              detail: err.message,
              hint: "the control plane was not asked: fix this side's certificate first",
            }
          : {
              name: "control plane",
              status: "fail",
              detail: `${await serverOf(flags)} cannot be asked: ${(err as Error).message}`,
              hint:
                "check that forelead serve runs there and that its certificate is valid " +
                "(forelead serve --check on its machine)",
            },
      ];
    }
    reportChecks(checks, flags.json ?? false, write);
  });
}

/** The server the command asked, as every command resolves it (flag, env, config file, default). */
async function serverOf(flags: AdminClientFlags): Promise<string> {
  try {
    return (await resolveConnection(flags)).settings.server.value;
  } catch {
    return flags.server ?? "the control plane";
  }
}

/**
 * Prints `checks` as the table (or JSON) and sets exit code 1 when one failed: doctor and serve
 * --check both end here.
 */
export function reportChecks(
  checks: readonly CheckRow[],
  json: boolean,
  write: (text: string) => void,
): void {
  write(
    json
      ? `${JSON.stringify({ checks: checks.map(({ name, status, detail, hint }) => ({ name, status, detail, hint })) }, null, 2)}\n`
      : formatChecks(checks),
  );
  if (checks.some((c) => c.status === "fail")) process.exitCode = 1;
}

/**
 * The doctor's table: one line per check (status, name, detail), its hint under it when not ok,
 * then a summary.
 */
export function formatChecks(checks: readonly CheckRow[]): string {
  const lines = formatTable(
    checks.flatMap((c) => [
      [c.status.toUpperCase(), c.name, c.detail],
      ...(c.hint && c.status !== "ok" ? [["", "", `hint: ${c.hint}`]] : []),
    ]),
  );
  const count = (s: string) => checks.filter((c) => c.status === s).length;
  lines.push(
    `${count("ok")} ok, ${count("warn")} warn, ${count("fail")} ` +
      `fail${count("skip") ? `, ${count("skip")} skipped` : ""}`,
  );
  return lines.join("\n") + "\n";
}

/**
 * The CLI's one table: every column but the last padded to its widest cell, two spaces apart; one
 * line per row.
 */
export function formatTable(rows: readonly (readonly string[])[]): string[] {
  const widths: number[] = [];
  for (const row of rows)
    row.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, cell.length)));
  return rows.map((row) =>
    row
      .map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
      .join("  ")
      .trimEnd(),
  );
}

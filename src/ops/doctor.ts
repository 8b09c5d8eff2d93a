import { createPrivateKey, randomBytes, X509Certificate } from "node:crypto";
import { open, statfs, unlink } from "node:fs/promises";
import { join } from "node:path";
import { sql, type Kysely } from "kysely";
import type { ArtifactStore } from "../artifacts/store.js";
import type { AuditSink } from "../identity/audit.js";
import { pendingMigrations, unknownMigrations } from "../store/database.js";
import type { Database } from "../store/schema.js";
import { readDatabaseFacts } from "./status.js";
import type { RetentionReport } from "./retention.js";
import { retentionRules } from "./retention-kinds.js";
import { formatDuration } from "../identity/certificate-policy.js";

/** How a check came out; "skip" when it does not apply here. */
type CheckStatus = "ok" | "warn" | "fail" | "skip";

/** One named check with what was found and, unless ok, what to do. */
export interface DoctorCheck {
  readonly name: string;
  readonly status: CheckStatus;
  readonly detail: string;
  readonly hint: string;
}

/**
 * What the checks look at; each part absent is a check skipped (or failed, where it must be there).
 */
export interface DoctorSubject {
  /** The serving certificate (possibly followed by its chain) and its key, PEM. */
  readonly server?: { readonly certPem: string; readonly keyPem: string };
  /** The issuing CA, PEM; absent when this control plane issues no certificates. */
  readonly issuer?: { readonly certPem: string; readonly keyPem: string };
  /** The database, or why it could not be opened. */
  readonly database: { readonly db: Kysely<Database> } | { readonly error: string };
  /**
   * Pending migrations are a failure on a running server; `forelead serve --check` expects serve to
   * apply them.
   */
  readonly pendingMigrations: "warn" | "fail";
  /** Whether the LISTEN connection is up; absent when nothing listens yet (--check). */
  readonly listenConnected?: () => boolean;
  readonly artifacts?: ArtifactStore;
  readonly audit?: AuditSink;
  /** This replica's prunes per kind of record; absent when nothing prunes yet (--check). */
  readonly retention?: () => RetentionReport[];
}

/** Certificates ending within this long are a warning. */
const expiryWarnMs = 7 * 24 * 3600 * 1000;
/**
 * Clock skew against the database: a warning past 1 s, a failure past 30 s (leases are 30 s by
 * default).
 */
const skewWarnMs = 1_000;
const skewFailMs = 30_000;
/** Free space of a file artifact store: a warning under 10 %, a failure under 1 %. */
const freeWarn = 0.1;
const freeFail = 0.01;

/**
 * Runs every check, in a fixed order, each one on its own: one that throws
 * is a failure naming the error, never the end of the report. The one list
 * `GET /v1/admin/doctor`, `forelead doctor` and `forelead serve --check` show.
 */
export async function runDoctor(subject: DoctorSubject): Promise<DoctorCheck[]> {
  const db = "db" in subject.database ? subject.database.db : undefined;
  const facts = db ? await readDatabaseFacts(db) : undefined;
  const dbError = "error" in subject.database ? subject.database.error : facts?.error;
  const checks: Array<
    [string, () => Promise<Omit<DoctorCheck, "name">> | Omit<DoctorCheck, "name">]
  > = [
    [
      "server certificate",
      () =>
        subject.server
          ? certificateCheck(subject.server, "the server certificate", "--tls-cert and --tls-key")
          : skip("no server certificate given"),
    ],
    [
      "issuer",
      () =>
        subject.issuer
          ? certificateCheck(
              subject.issuer,
              "the issuer certificate",
              "--issuer-cert and --issuer-key",
            )
          : skip("no issuing CA: enrollment and renewal are refused"),
    ],
    [
      "database",
      () =>
        facts?.reachable
          ? ok(`reachable, round trip ${facts.roundTripMs.toFixed(1)} ms`)
          : fail(
              `unreachable: ${dbError}`,
              "check --database and that the server is running and accepts connections",
            ),
    ],
    [
      "migrations",
      () =>
        facts?.reachable
          ? migrationCheck(facts.applied, subject.pendingMigrations)
          : skip("the database is unreachable"),
    ],
    [
      "clock skew",
      () => (facts?.reachable ? skewCheck(facts.skewMs) : skip("the database is unreachable")),
    ],
    [
      "artifacts store",
      () =>
        subject.artifacts
          ? artifactsCheck(subject.artifacts, db)
          : skip("artifacts go to a temporary directory made at start"),
    ],
    ["LISTEN", () => listenCheck(subject.listenConnected)],
    [
      "event backlog",
      () => (db && facts?.reachable ? eventBacklogCheck(db) : skip("the database is unreachable")),
    ],
    [
      "audit backlog",
      () => (subject.audit ? auditCheck(subject.audit) : skip("checked by the running server")),
    ],
    [
      "retention",
      () =>
        subject.retention
          ? retentionCheck(subject.retention())
          : skip("checked by the running server"),
    ],
  ];
  const results: DoctorCheck[] = [];
  for (const [name, check] of checks) {
    try {
      results.push({ name, ...(await check()) });
    } catch (err) {
      results.push({
        name,
        status: "fail",
        detail: `the check failed: ${(err as Error).message}`,
        hint: "see the message",
      });
    }
  }
  return results;
}

/** The worst status of `checks`: fail, then warn, else ok (skips count as ok). */
export function worstStatus(checks: readonly DoctorCheck[]): "ok" | "warn" | "fail" {
  if (checks.some((c) => c.status === "fail")) return "fail";
  return checks.some((c) => c.status === "warn") ? "warn" : "ok";
}

const ok = (detail: string) => ({ status: "ok" as const, detail, hint: "" });
const skip = (detail: string) => ({ status: "skip" as const, detail, hint: "" });
const warn = (detail: string, hint: string) => ({ status: "warn" as const, detail, hint });
const fail = (detail: string, hint: string) => ({ status: "fail" as const, detail, hint });

/**
 * The leaf, its key and its chain (each certificate signed by the next), and how long the leaf has
 * left.
 */
function certificateCheck(
  pems: { readonly certPem: string; readonly keyPem: string },
  what: string,
  flags: string,
) {
  const blocks =
    pems.certPem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  if (blocks.length === 0)
    return fail(`${what} file holds no PEM certificate`, `give a PEM certificate in ${flags}`);
  const chain = blocks.map((b) => new X509Certificate(b));
  const leaf = chain[0]!;
  if (!leaf.checkPrivateKey(createPrivateKey(pems.keyPem)))
    return fail(
      `the key does not belong to ${what} (${leaf.subject.replace(/\n/g, ", ")})`,
      `give the key that was issued with the certificate (${flags})`,
    );
  for (let i = 0; i + 1 < chain.length; i++) {
    if (!chain[i]!.checkIssued(chain[i + 1]!) || !chain[i]!.verify(chain[i + 1]!.publicKey)) {
      return fail(
        `certificate ${i + 1} of ${what} file is not signed by certificate ${i + 2}`,
        "order the file leaf first, then each issuer",
      );
    }
  }
  const notAfter = new Date(leaf.validTo);
  const notBefore = new Date(leaf.validFrom);
  const left = notAfter.getTime() - Date.now();
  const detail =
    `${leaf.subject.replace(/\n/g, ", ")}, valid until ` +
    `${notAfter.toISOString()}${chain.length > 1 ? `, chain of ${chain.length}` : ""}`;
  if (left <= 0)
    return fail(
      `${what} expired at ${notAfter.toISOString()} (${leaf.subject.replace(/\n/g, ", ")})`,
      `renew it and replace the files of ${flags}; the server reloads them on SIGHUP`,
    );
  if (notBefore.getTime() > Date.now())
    return fail(
      `${what} is not valid before ${notBefore.toISOString()}`,
      "check this machine's clock, or reissue it",
    );
  if (left < expiryWarnMs)
    return warn(
      `${detail}: ends in ${(left / 3600_000).toFixed(1)} h`,
      `renew it within ${Math.floor(left / 86_400_000)} days (${flags})`,
    );
  return ok(detail);
}

function migrationCheck(applied: readonly string[], pendingIs: "warn" | "fail") {
  const pending = pendingMigrations(applied);
  const unknown = unknownMigrations(applied);
  if (unknown.length > 0)
    return warn(
      `the database has migrations this build does not know: ${unknown.join(", ")}`,
      "a newer build migrated it: upgrade this replica",
    );
  if (pending.length > 0) {
    const detail = `${pending.length} pending: ${pending.join(", ")}`;
    return pendingIs === "fail"
      ? fail(detail, "restart forelead serve: it migrates at start")
      : warn(detail, "forelead serve applies them when it starts");
  }
  return ok(`at ${applied.at(-1)} (${applied.length} applied)`);
}

function skewCheck(skewMs: number) {
  const detail =
    `the database's clock is ${Math.abs(skewMs).toFixed(0)} ms ` +
    `${skewMs >= 0 ? "ahead of" : "behind"} this machine's`;
  const hint =
    "run NTP (chrony, systemd-timesyncd) on both machines: lease expiry is in the database's clock";
  if (Math.abs(skewMs) > skewFailMs) return fail(detail, hint);
  if (Math.abs(skewMs) > skewWarnMs) return warn(detail, hint);
  return ok(detail);
}

/**
 * Files: a probe file written, fsynced and removed, and the filesystem's free space. Postgres: a
 * probe row inserted and deleted.
 */
async function artifactsCheck(store: ArtifactStore, db: Kysely<Database> | undefined) {
  if (store.kind === "postgres") {
    if (!db) return skip("the database is unreachable");
    const digest = `doctor-probe-${randomBytes(8).toString("hex")}`;
    await db.transaction().execute(async (trx) => {
      await trx.insertInto("artifact_blobs").values({ digest, size: 0 }).execute();
      await trx.deleteFrom("artifact_blobs").where("digest", "=", digest).execute();
    });
    return ok(`${store.description}: a probe row was written`);
  }
  const probe = join(store.dir, `.doctor-probe-${randomBytes(8).toString("hex")}`);
  try {
    const file = await open(probe, "wx", 0o600);
    try {
      await file.writeFile(randomBytes(4096));
      await file.sync();
    } finally {
      await file.close();
    }
  } catch (err) {
    return fail(
      `cannot write to ${store.dir}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
      "free space there, or fix its permissions (--artifacts-dir)",
    );
  } finally {
    await unlink(probe).catch(() => {});
  }
  const fs = await statfs(store.dir);
  const free = fs.blocks > 0 ? fs.bavail / fs.blocks : 1;
  const detail =
    `${store.dir} writable, ${(free * 100).toFixed(1)} % free ` +
    `(${formatBytes(fs.bavail * fs.bsize)} of ` +
    `${formatBytes(fs.blocks * fs.bsize)})`;
  const hint = "free space there or move --artifacts-dir: uploads fail when it is full";
  if (free < freeFail) return fail(detail, hint);
  if (free < freeWarn) return warn(detail, hint);
  return ok(detail);
}

function listenCheck(connected: (() => boolean) | undefined) {
  if (!connected) return skip("nothing listens before the server starts");
  return connected()
    ? ok("connected")
    : fail(
        "the LISTEN connection is down: idle claims wake late",
        "it reconnects by itself; check the database's reachability and max_connections",
      );
}

/**
 * Each kind's retention and what this replica pruned of it since it started; a kind whose last
 * prune failed is a warning naming the error.
 */
function retentionCheck(reports: readonly RetentionReport[]) {
  const line = (r: RetentionReport) =>
    `${r.kind} ${formatDuration(r.retentionMs)}: ${r.pruned} pruned` +
    (r.reclaimedBytes !== undefined ? ` (${formatBytes(r.reclaimedBytes)})` : "") +
    (r.lastRunAt ? `, last run ${r.lastRunAt.toISOString()}` : ", not run yet");
  const failed = reports.filter((r) => r.lastError);
  if (failed.length > 0)
    return warn(
      failed.map((r) => `${retentionRules[r.kind].flag}: ${r.lastError}`).join("; ") +
        `; ${reports.map(line).join("; ")}`,
      "the next run tries again; check the database's log for what stopped the prune",
    );
  return ok(reports.map(line).join("; "));
}

async function eventBacklogCheck(db: Kysely<Database>) {
  const { rows } = await sql<{
    rows: number | null;
  }>`select (select reltuples::int8 from pg_class where oid = to_regclass('events')) as rows`.execute(
    db,
  );
  const count = rows[0]?.rows;
  if (count === null || count === undefined) return skip("this build keeps no event table");
  return ok(`about ${Math.max(0, count)} events kept`);
}

/**
 * The audit trail's backlog and the spool: its path, holder, what waits in it and what was set
 * aside.
 */
function auditCheck(audit: AuditSink) {
  const b = audit.backlog();
  const spool = `spool ${b.spoolPath} held by ${b.spoolHolder}`;
  const refusal = audit.unavailable();
  if (refusal)
    return fail(
      `${refusal} (${spool})`,
      "free space for the audit spool (--audit-spool) and make the database reachable",
    );
  const waiting = b.inMemory + b.spooled;
  const backlog =
    b.spooled > 0
      ? `${b.spooled} records spooled ` +
        `(${formatBytes(b.spoolBytes)})` +
        `${b.oldestUnwritten ? `, the oldest from ${b.oldestUnwritten.toISOString()}` : ""}`
      : waiting === 0
        ? "every record is in the database"
        : `${waiting} records waiting for the next write`;
  if (b.spoolUnreadable)
    return warn(
      `${backlog}; cannot read the spool (${b.spoolUnreadable}); ${spool}`,
      "make the spool file readable by this process; its records are written once it is",
    );
  if (b.quarantined > 0)
    return warn(
      `${backlog}; ${b.quarantined} lines set aside in ${b.quarantinePath} (not whole audit records); ${spool}`,
      "read them, keep what an auditor needs, then remove the file: they are not in the audit trail",
    );
  if (b.spooled > 0)
    return warn(
      `${backlog}; ${spool}`,
      "they are written once the database takes them; check the database",
    );
  return ok(`${backlog}; ${spool}`);
}

function formatBytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

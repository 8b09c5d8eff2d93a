import type { AuditSink } from "../../identity/audit.js";
import { pendingMigrations, type Store } from "../../store/database.js";
import { readDatabaseFacts, type DatabaseFacts } from "../../ops/status.js";

/** One condition of readiness, as /readyz reports it. */
export interface ReadinessCheck {
  readonly name: "database" | "migrations" | "listen" | "auditSpool";
  readonly ok: boolean;
  /** What was found, for an operator: a round trip, a migration level, what is wrong. */
  readonly message: string;
}

/** How long the database check waits for `select 1` before it calls the database unreachable. */
const databaseTimeoutMs = 2_000;

/**
 * Whether this control plane can serve: the database answers (checked now,
 * with a round trip, so a stopped server shows at once, not only after a
 * request failed), every migration this build knows has run, the LISTEN
 * connection is up (else idle claims are not woken), and audit records can be
 * stored (else every request is refused, src/identity/audit.ts).
 */
export async function checkReadiness(store: Store, audit: AuditSink): Promise<ReadinessCheck[]> {
  return [...(await checkDatabase(store)), checkListen(store), checkAudit(audit)];
}

/**
 * The database's round trip and migrations, read once (src/ops/status.ts), bounded by
 * databaseTimeoutMs.
 */
async function checkDatabase(store: Store): Promise<[ReadinessCheck, ReadinessCheck]> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<DatabaseFacts>((resolve) => {
    timer = setTimeout(
      () =>
        resolve({
          reachable: false,
          roundTripMs: databaseTimeoutMs,
          migration: "",
          applied: [],
          skewMs: 0,
          error: `no answer within ${databaseTimeoutMs} ms`,
        }),
      databaseTimeoutMs,
    );
  });
  const facts = await Promise.race([readDatabaseFacts(store.db), timeout]).finally(() =>
    clearTimeout(timer),
  );
  if (!facts.reachable) {
    return [
      {
        name: "database",
        ok: false,
        message: `the ${store.kind} database is unreachable: ${facts.error ?? "no answer"}`,
      },
      {
        name: "migrations",
        ok: false,
        message: "cannot be read while the database is unreachable",
      },
    ];
  }
  const database: ReadinessCheck = {
    name: "database",
    ok: true,
    message: `${store.kind} database reachable (round trip ${facts.roundTripMs.toFixed(1)} ms)`,
  };
  const pending = pendingMigrations(facts.applied);
  if (pending.length === 0) return [database, { name: "migrations", ok: true, message: "current" }];
  return [
    database,
    {
      name: "migrations",
      ok: false,
      message: `${pending.length} not run: ${pending.join(", ")}; restart forelead serve to run them`,
    },
  ];
}

function checkListen(store: Store): ReadinessCheck {
  if (store.listening) return { name: "listen", ok: true, message: "the LISTEN connection is up" };
  return {
    name: "listen",
    ok: false,
    message:
      "the LISTEN connection is down (reconnecting); waiting claims are not woken by new jobs",
  };
}

function checkAudit(audit: AuditSink): ReadinessCheck {
  const refusal = audit.unavailable();
  if (refusal) return { name: "auditSpool", ok: false, message: refusal };
  const { spooled, spoolBytes } = audit.backlog();
  return {
    name: "auditSpool",
    ok: true,
    message:
      spooled > 0
        ? `writable (${spooled} records, ${spoolBytes} bytes wait for the database)`
        : "writable",
  };
}

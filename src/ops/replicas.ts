import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
import { sql, type Kysely } from "kysely";
import type { DatabaseHealth } from "../store/health.js";
import type { Database } from "../store/schema.js";

/** How often a replica moves its last_seen_at. */
const heartbeatIntervalMs = 5_000;
/** A replica is live while seen within this many heartbeats. */
const liveHeartbeats = 3;
/** Rows not seen for this long are deleted by any replica's heartbeat (a replica that died). */
const pruneAfterSeconds = 3600;

/**
 * The SQL predicate "this replicas row is live": seen within three heartbeats, in the database's
 * clock.
 */
export const liveReplica = sql<boolean>`last_seen_at > now() - make_interval(secs
  => ${(heartbeatIntervalMs * liveHeartbeats) / 1000})`;

/** This process's row in the replicas table, kept fresh until close(). */
export interface ReplicaHeartbeat {
  readonly id: string;
  readonly startedAt: Date;
  /** Stops the heartbeat and deletes the row (a clean stop). */
  close(): Promise<void>;
}

/**
 * Inserts this replica's row and upserts it every heartbeatIntervalMs (so a
 * row lost to a restore or a prune comes back), pruning rows of replicas
 * gone for an hour. A beat that fails is reported to `health` and retried
 * at the next one; it never stops the heartbeat.
 */
export async function startReplicaHeartbeat(
  db: Kysely<Database>,
  health: DatabaseHealth,
  version: string,
): Promise<ReplicaHeartbeat> {
  const id = randomUUID();
  const row = { id, host: hostname(), pid: process.pid, version };
  /**
   * Upserts the row (a row lost to a restore or a prune comes back) and prunes the dead; returns
   * the row's start.
   */
  const beat = async () => {
    const { started_at } = await db
      .insertInto("replicas")
      .values(row)
      .onConflict((oc) => oc.column("id").doUpdateSet({ last_seen_at: sql`now()` }))
      .returning("started_at")
      .executeTakeFirstOrThrow();
    await db
      .deleteFrom("replicas")
      .where(sql<boolean>`last_seen_at < now() - make_interval(secs => ${pruneAfterSeconds})`)
      .execute();
    return started_at;
  };
  const startedAt = await beat();
  // One beat at a time: while the database hangs, beats are skipped rather than queued.
  let running: Promise<unknown> | undefined;
  const timer = setInterval(() => {
    running ??= beat()
      .catch((err: unknown) => {
        if (!health.failed("the replica heartbeat", err))
          console.error(`forelead: the replica heartbeat failed: ${(err as Error).message}`);
      })
      .finally(() => (running = undefined));
  }, heartbeatIntervalMs);
  timer.unref();
  return {
    id,
    startedAt,
    async close() {
      clearInterval(timer);
      await running;
      // A database already gone keeps the row: it stops being live and is pruned later.
      await db
        .deleteFrom("replicas")
        .where("id", "=", id)
        .execute()
        .catch((err: unknown) => health.failed("deleting the replica row", err));
    },
  };
}

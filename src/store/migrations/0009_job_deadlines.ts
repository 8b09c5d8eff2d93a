import { sql, type Kysely } from "kysely";

/**
 * Job deadlines enforced by the control plane: a lease ended by the expiry
 * sweep because its job ran past its timeout plus the grace ends with reason
 * timed_out, so a later call under it is told exactly that (lease-check.ts).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`alter table leases drop constraint leases_end_reason_check`.execute(db);
  await sql`alter table leases add constraint leases_end_reason_check check (end_reason in ('released', 'expired', 'settled', 'requeued', 'timed_out'))`.execute(
    db,
  );
}

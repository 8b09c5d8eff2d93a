import { sql, type Kysely } from "kysely";

/**
 * What operators see of runners and attempts must be true: runners.version (what the runner said at
 * register), runners.draining_at (set while it says it drains), jobs.cancelled_by (who asked for
 * the cancel, for the attempt it ended), forelead_runner_state, the one definition of a runner's
 * state, and enrollment_grants.replace: only a grant that says so enrolls an identity still in use.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`alter table runners add column version text not null default '',
    add column draining_at timestamptz`.execute(db);
  await sql`alter table jobs add column cancelled_by text`.execute(db);
  await sql`alter table enrollment_grants add column replace boolean not null default false`.execute(
    db,
  );
  for (const statement of Object.values(functions)) await sql.raw(statement).execute(db);
}

/**
 * Frozen copies of the functions' source files (src/store/sql/functions) as they are at this
 * migration, written by `npm run migration:new`: never edited.
 */
export const functions: Readonly<Record<string, string>> = {
  forelead_runner_state: `create or replace function forelead_runner_state(
  p_retired_at timestamptz, p_last_seen_at timestamptz, p_draining_at timestamptz,
  p_paused_at timestamptz, p_live_leases int, p_offline_seconds int)
returns text
language sql stable
as $$
select case
  when p_retired_at is not null then 'retired'
  when p_last_seen_at <= now() - make_interval(secs => p_offline_seconds) then 'offline'
  when p_draining_at is not null then 'draining'
  when not forelead_runner_unpaused(p_paused_at) then 'paused'
  when p_live_leases > 0 then 'busy'
  else 'idle'
end
$$;
`,
};

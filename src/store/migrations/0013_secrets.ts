import { sql, type Kysely } from "kysely";

/**
 * Secrets at rest (src/secrets): job secrets as sealed rows (AES-256-GCM,
 * bound to their job and name), erased when the job settles; the names on
 * the job row, so views list them and the claim knows, without a join,
 * whether to fetch any; a repository's credential sealed (the plain column
 * is emptied at start once the key is known); and one sealed check value
 * per key id, so a start with the wrong key is refused instead of losing
 * every secret.
 *
 * The erase is a trigger, so every statement that settles a job (complete,
 * expire, release of a cancelled job, cancel of a queued one, a failed pin,
 * and any written later) erases in its own transaction without restating
 * it. Its WHEN clause keeps it free for jobs without secrets.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`alter table jobs add column secret_names text[] not null default '{}', add column secret_file_names text[] not null default '{}'`.execute(
    db,
  );
  await sql`
    create table job_secrets (
      job_id uuid not null references jobs (id) on delete cascade,
      kind text not null check (kind in ('env', 'file')),
      name text not null,
      sealed bytea not null,
      primary key (job_id, kind, name)
    )`.execute(db);
  await sql`alter table repositories add column credential_sealed bytea`.execute(db);
  await sql`
    create table secrets_keys (
      key_id smallint primary key,
      sealed bytea not null,
      created_at timestamptz not null default now()
    )`.execute(db);
  await sql`
    create function forelead_erase_job_secrets() returns trigger language plpgsql as $$
    begin
      delete from job_secrets where job_id = new.id;
      return null;
    end
    $$`.execute(db);
  await sql`
    create trigger jobs_erase_secrets after update of state on jobs
    for each row
    when (new.state in ('succeeded', 'failed', 'cancelled') and (cardinality(new.secret_names) > 0 or cardinality(new.secret_file_names) > 0))
    execute function forelead_erase_job_secrets()`.execute(db);
}

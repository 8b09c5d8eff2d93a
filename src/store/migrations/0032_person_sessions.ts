import { sql, type Kysely } from "kysely";

/**
 * person_sessions: a person signed in by single sign-on, for whom one delegate (the dashboard's
 * certificate) may act until the session expires or ends. Only the SHA-256 of the session
 * credential is stored, so the table alone lets nobody act as anyone. The person's groups are
 * kept as the ID token listed them, since group roles are applied on every call. Audit records
 * of such calls name the delegate and the person's claim beside the person's SPIFFE ID.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table person_sessions (
      id uuid primary key,
      credential_sha256 bytea not null unique,
      person text not null,
      person_claim text not null,
      person_groups text[] not null default '{}',
      delegate text not null,
      created_at timestamptz not null default now(),
      expires_at timestamptz not null,
      ended_at timestamptz
    )
  `.execute(db);
  await sql`create index person_sessions_expires_at on person_sessions (expires_at)`.execute(db);
  // A call a delegate makes for a person: spiffe_id names the person, these the delegate and the
  // identity claim the person signed in with.
  await sql`alter table audit_records add column delegate text, add column person_claim text`.execute(
    db,
  );
}

/**
 * Frozen copies of the functions' source files (src/store/sql/functions) as they are at this
 * migration, written by `npm run migration:new`: never edited.
 */
export const functions: Readonly<Record<string, string>> = {};

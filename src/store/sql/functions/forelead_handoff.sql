-- The claim an enqueue makes for a runner waiting on its replica, in the
-- enqueue's own statement (src/broker/leases/handoff.ts): forelead_claim for one
-- request, with two differences an enqueue needs.
-- * A claim that leases nothing turns synchronous_commit off for its
--   transaction; inside an enqueue it must not (the new job is in that
--   transaction and is acknowledged after its commit), so the setting is put
--   back as it was before the call.
-- * A runner that is not registered (retired while its claim waited) gets no
--   lease instead of the error that would fail the enqueue. A retirement racing
--   the call still raises FL001; the caller then enqueues without the handoff.
create or replace function forelead_handoff(p_workspace_id text, p_runner_id text, p_token_hash_hex text, p_lease_seconds int)
returns setof jobs
language plpgsql volatile
as $$
declare
  commit_mode text := current_setting('synchronous_commit');
begin
  if not exists (select 1 from runners where workspace_id = p_workspace_id and runner_id = p_runner_id and retired_at is null) then
    return;
  end if;
  return query select * from forelead_claim(array[p_workspace_id], array[p_runner_id], array[p_token_hash_hex], p_lease_seconds);
  perform set_config('synchronous_commit', commit_mode, true);
end
$$;

-- A runner's state, the one definition every view reads (runners list, status, metrics, the pool's
-- free slots, the dashboard, enrollment's "live"): retired, else offline when not heard from
-- (register, claim, renew, inventory move runners.last_seen_at) for p_offline_seconds, else
-- draining (it said so at register), paused (forelead_runner_unpaused), busy (live leases) or idle.
-- Silence wins over live leases: a runner that stopped renewing is gone even while its lease has
-- not expired yet. Only idle and busy runners have free slots.
create or replace function forelead_runner_state(
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

-- A rate limit's starts (rate_limits.starts) with one more at `p_at`, in order, keeping those
-- within two windows of the newest: all that forelead_rate_limit_room can count, since it refuses
-- a start older than a window before the newest. At most about twice the limit's p_max entries.
create or replace function forelead_rate_limit_started(
  p_starts timestamptz[], p_window_seconds int, p_at timestamptz
)
returns timestamptz[]
language sql stable
as $$
select array(
  select e from unnest(p_starts || p_at) e
  where e > greatest(p_at, (select max(x) from unnest(p_starts) x))
    - make_interval(secs => 2 * p_window_seconds)
  order by e)
$$;

-- When a job held by a rate limit (forelead_rate_limit_room false at `p_at`) may start: the
-- p_max-th newest start within the window before p_at, plus the window. Starts after p_at (a
-- claim in flight) are left out, so it is the earliest time the limit can have room again.
create or replace function forelead_rate_limit_next(
  p_starts timestamptz[], p_max int, p_window_seconds int, p_at timestamptz
)
returns timestamptz
language sql stable
as $$
select coalesce(
  (select e + make_interval(secs => p_window_seconds) from unnest(p_starts) e
    where e > p_at - make_interval(secs => p_window_seconds) and e <= p_at
    order by e desc offset greatest(p_max, 1) - 1 limit 1),
  p_at)
$$;

-- Whether a job naming a rate limit may start at `p_at` (a lease's issued_at: the transaction's
-- now()), given the limit's recent starts `p_starts` (rate_limits.starts), at most `p_max` per
-- `p_window_seconds`: fewer than p_max starts lie within one window of p_at, on either side (a
-- claim that began earlier may commit later, so starts are not always in order), and p_at is not
-- older than a window before the newest start (older starts may be trimmed away; see
-- forelead_rate_limit_started). So no window of p_window_seconds, placed anywhere, holds more
-- than p_max lease start times. The one home of the rule: forelead_claim takes a start with it,
-- broker/jobs/waiting.ts explains a held job with it and forelead_rate_limit_next.
create or replace function forelead_rate_limit_room(
  p_starts timestamptz[], p_max int, p_window_seconds int, p_at timestamptz
)
returns boolean
language sql stable
as $$
select coalesce(p_at > max(e) - make_interval(secs => p_window_seconds), true)
  and count(*) filter (where e > p_at - make_interval(secs => p_window_seconds)
    and e < p_at + make_interval(secs => p_window_seconds)) < p_max
from unnest(p_starts) e
$$;

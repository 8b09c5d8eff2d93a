-- Trigger jobs_fair_tag (before insert on jobs, for each row with a fairness_key): gives the job
-- its share tag, the order forelead_claim serves a workspace's keyed jobs in at equal priority.
-- Weighted fair queueing, self-clocked: a key's next tag is its last tag, or the workspace's clock
-- (forelead_fair_clock) when that is later, plus 1 / its weight (fairness_keys, default 1). Over
-- any run of claims a key of weight w is served w times as often as a key of weight 1 while both
-- have jobs queued, and a key's own jobs keep their order. The key's row is locked by the upsert,
-- so enqueues of one key, on any replica, take their tags one after another. A weight set later
-- applies to the jobs enqueued after it.
create or replace function forelead_fair_tag()
returns trigger
language plpgsql volatile
as $$
begin
  insert into fairness_keys as f (workspace_id, fairness_key, last_tag)
  values (new.workspace_id, new.fairness_key,
    (select c.at from forelead_fair_clock(new.workspace_id) c) + 1)
  on conflict (workspace_id, fairness_key) do update
    set last_tag = greatest(f.last_tag, excluded.last_tag - 1) + 1.0 / f.weight
  returning f.last_tag into new.fair_tag;
  return new;
end
$$;

-- Trigger jobs_settled_wakes_followers (after update of state on jobs, when the
-- job settles): NOTIFY forelead_streams 'settled:<job id>'. Every path that
-- settles a job (complete, cancel, release, expiry) goes through that update, so
-- stream followers wake without the broker knowing about streams.
create or replace function forelead_stream_job_settled()
returns trigger
language plpgsql volatile
as $$
begin
  perform pg_notify('forelead_streams', 'settled:' || new.id::text);
  return null;
end $$;

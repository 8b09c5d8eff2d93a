-- Claim clause "labels": every label of the job is one of the runner's. broker/jobs/waiting.ts asks
-- it to report "missing_labels".
create or replace function forelead_labels_match(p_job_labels text[], p_runner_labels text[])
returns boolean
language sql immutable
as $$
select p_job_labels <@ p_runner_labels
$$;

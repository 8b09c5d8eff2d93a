-- Claim clause "slot free": a runner holding p_held leases (its live leases, forelead_live_leases,
-- and in forelead_claim the picks of the call not yet written) has a free slot of its p_slots.
-- broker/jobs/waiting.ts asks it to report "all_busy".
create or replace function forelead_slot_free(p_held int, p_slots int)
returns boolean
language sql immutable
as $$
select p_held < p_slots
$$;

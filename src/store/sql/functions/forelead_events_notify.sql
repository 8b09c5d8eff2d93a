-- Trigger events_notify (after insert on events, for each statement): one
-- payload-less NOTIFY forelead_events per statement that wrote an event, so
-- followers on every replica read on at commit. A statement trigger fires for an
-- insert of no rows too (a claim that leased nothing): the transition table
-- `inserted` tells them apart.
create or replace function forelead_events_notify()
returns trigger
language plpgsql volatile
as $$
begin
  if exists (select 1 from inserted) then
    perform pg_notify('forelead_events', '');
  end if;
  return null;
end
$$;

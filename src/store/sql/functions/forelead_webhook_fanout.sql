-- Trigger webhook_fanout (after insert on events, for each statement): a
-- webhook delivery for each new event and each enabled subscription that wants
-- it, in the transaction that writes the event, so an event that commits has its
-- deliveries and a rolled-back one has none. A subscription wants an event of
-- its workspace (or any, when it names none) whose type it lists, by name, by
-- family (`job.*`) or as `*`. The delivery copies the event's columns: event
-- retention never takes a pending delivery's body. The snapshot taken here lists
-- the transactions in flight, among them any holding a lower event id that may
-- commit later: the delivery waits for them (deliveries.ts), so a subscription's
-- deliveries go out in event id order.
create or replace function forelead_webhook_fanout()
returns trigger
language plpgsql volatile
as $$
begin
  insert into webhook_deliveries
    (subscription_id, event_id, event_type, event_at, workspace_id, runner_id, job_id, data,
      event_snapshot)
  select s.id, e.id, e.type, e.at, e.workspace_id, e.runner_id, e.job_id, e.data,
    pg_current_snapshot()
  from inserted e
  join webhook_subscriptions s on s.enabled
    and (s.workspace_id is null or s.workspace_id = e.workspace_id)
    and (e.type = any(s.events) or split_part(e.type, '.', 1) || '.*' = any(s.events)
      or '*' = any(s.events));
  return null;
end
$$;

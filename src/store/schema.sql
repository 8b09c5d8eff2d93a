-- The current schema: what the migrations (src/store/migrations) make, dumped by
-- `npm run schema` (scripts/schema.ts) from a freshly migrated database. Generated: do not edit;
-- CI fails when it differs from a fresh dump. The functions' readable sources are
-- src/store/sql/functions/*.sql.

--
-- Name: jobs; Type: TABLE; Schema: public
--

CREATE TABLE public.jobs (
    id uuid NOT NULL,
    workspace_id text NOT NULL,
    labels text[] NOT NULL,
    kind text NOT NULL,
    repository text,
    target_branch text,
    base_commit text,
    base_tree text,
    spec jsonb NOT NULL,
    state text NOT NULL,
    priority integer NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    max_attempts integer NOT NULL,
    idempotency_key text,
    request_sha256 text NOT NULL,
    runner_id text,
    lease_id bigint,
    lease_token_sha256 bytea,
    lease_expires_at timestamp with time zone,
    cancel_requested boolean DEFAULT false NOT NULL,
    exit_code integer,
    error jsonb,
    failure_reason text,
    failure_message text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    settled_at timestamp with time zone,
    published_commit text,
    published_branch text,
    published_at timestamp with time zone,
    artifacts jsonb,
    secret_names text[] DEFAULT '{}'::text[] NOT NULL,
    secret_file_names text[] DEFAULT '{}'::text[] NOT NULL,
    enqueued_by text,
    claimable_at timestamp with time zone DEFAULT now() NOT NULL,
    concurrency_key text,
    concurrency_limit integer,
    backoff_initial_seconds double precision,
    backoff_multiplier double precision,
    backoff_max_seconds double precision,
    req_architecture text,
    req_os text,
    req_execution_kind text,
    req_features text[] DEFAULT '{}'::text[] NOT NULL,
    retry_of uuid,
    retried_by uuid,
    result jsonb,
    progress jsonb,
    input_lease_id bigint,
    cancelled_by text,
    id_token_audiences text[],
    fairness_key text,
    fair_tag double precision,
    display_name text,
    rate_limit text,
    CONSTRAINT jobs_state_check CHECK ((state = ANY (ARRAY['queued'::text, 'running'::text, 'waiting_input'::text, 'succeeded'::text, 'failed'::text, 'cancelled'::text])))
);

--
-- Name: forelead_claim(text[], text[], text[], integer); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_claim(p_workspace_ids text[], p_runner_ids text[], p_token_hashes_hex text[], p_lease_seconds integer) RETURNS SETOF public.jobs
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    SET enable_sort TO 'off'
    AS $$
declare
  i int;
  n int := coalesce(array_length(p_runner_ids, 1), 0);
  runner runners%rowtype;
  held runners[] := '{}';
  cand record;
  excluded text[];
  group_keys text[];
  group_counts int[];
  -- Whether this call has waited for a group lock or a rate limit's row (see Deadlocks).
  waited boolean := false;
  limited text[];
  contended text[] := '{}';
  leased int := 0;
  got int;
  -- Jobs picked and not yet written, with the request that picked each: written as one set.
  picked uuid[] := '{}';
  picked_for int[] := '{}';
  picked_attempts int[] := '{}';
  picked_by_runner int;
begin
  -- Every runner's row first, in the caller's order (see Deadlocks above).
  for i in 1 .. n loop
    update runners set last_seen_at = now()
    where workspace_id = p_workspace_ids[i] and runner_id = p_runner_ids[i] and retired_at is null
    returning * into runner;
    if not found then
      raise exception using errcode = 'FL001',
        message = format('runner "%s" is not registered in workspace "%s"; POST /v1/runner/register first',
          p_runner_ids[i], p_workspace_ids[i]);
    end if;
    held := held || runner;
  end loop;
  for i in 1 .. n loop
    runner := held[i];
    -- Paused (the runner, or its workspace) or draining: no new lease; its live leases go on.
    continue when not forelead_runner_unpaused(runner.paused_at) or runner.draining_at is not null
      or not (select w.unpaused from forelead_workspace_unpaused(p_workspace_ids[i]) w);
    excluded := '{}';
    limited := '{}';
    -- The workspace's running groups, counted once per request (not per candidate row).
    select coalesce(array_agg(g.concurrency_key), '{}'), coalesce(array_agg(g.running), '{}')
    into group_keys, group_counts
    from forelead_running_groups(p_workspace_ids[i]) g;
    -- This runner's picks of earlier requests in this call count against its slots, as its leases.
    select count(*) into picked_by_runner from unnest(picked_for) k
    where p_workspace_ids[k] = p_workspace_ids[i] and p_runner_ids[k] = p_runner_ids[i];
    loop
      select j.id, j.attempts, j.concurrency_key, j.concurrency_limit, j.rate_limit
      into cand from jobs j
      where j.workspace_id = p_workspace_ids[i] and j.state = 'queued'
        and forelead_job_due(j.claimable_at)
        and forelead_labels_match(j.labels, runner.labels)
        and forelead_meets_requirements(
          j.req_architecture, j.req_os, j.req_execution_kind, j.req_features,
          runner.architecture, runner.os, runner.execution_kinds, runner.features)
        and forelead_group_has_room(j.concurrency_key, j.concurrency_limit,
          coalesce(group_counts[array_position(group_keys, j.concurrency_key)], 0))
        and (j.concurrency_key is null or not j.concurrency_key = any(excluded))
        and (j.rate_limit is null or not j.rate_limit = any(limited))
        and not j.id = any(picked)
        and forelead_slot_free(
          (select l.n from forelead_live_leases(p_workspace_ids[i], p_runner_ids[i]) l)
            + picked_by_runner,
          runner.slots)
      order by j.priority desc, j.fair_tag nulls first, j.created_at, j.id
      limit 1
      for update of j skip locked;
      exit when not found;
      if cand.concurrency_key is not null then
        -- A job of a concurrency group: what was picked so far is written first, so that the
        -- group's count below (a new statement) sees every lease of this call too.
        if cardinality(picked) > 0 then
          return query select * from forelead_claim_write(p_workspace_ids, p_runner_ids,
            p_token_hashes_hex, p_lease_seconds, picked, picked_for, picked_attempts);
          get diagnostics got = row_count;
          leased := leased + got;
          picked := '{}'; picked_for := '{}'; picked_attempts := '{}'; picked_by_runner := 0;
        end if;
        if not waited then
          perform pg_advisory_xact_lock(
            hashtextextended(p_workspace_ids[i] || chr(31) || cand.concurrency_key, 0));
          waited := true;
        elsif not pg_try_advisory_xact_lock(
            hashtextextended(p_workspace_ids[i] || chr(31) || cand.concurrency_key, 0)) then
          excluded := excluded || cand.concurrency_key;
          contended := contended || p_workspace_ids[i];
          continue;
        end if;
        -- A new statement, a new snapshot: every lease of the group committed before the lock.
        if not forelead_group_has_room(cand.concurrency_key, cand.concurrency_limit,
            forelead_group_running(p_workspace_ids[i], cand.concurrency_key)) then
          excluded := excluded || cand.concurrency_key;
          continue;
        end if;
      end if;
      exit when cand.rate_limit is null;
      -- A job naming a rate limit: its row is locked by the update (waited for only as the
      -- call's first lock), which takes the start when the limit has room at now().
      if waited and not exists (select 1 from rate_limits r where r.name = cand.rate_limit
          for no key update skip locked) then
        limited := limited || cand.rate_limit;
        contended := contended || p_workspace_ids[i];
        continue;
      end if;
      waited := true;
      update rate_limits r
      set starts = forelead_rate_limit_started(r.starts, r.window_seconds, now())
      where r.name = cand.rate_limit
        and forelead_rate_limit_room(r.starts, r.max_starts, r.window_seconds, now());
      exit when found;
      limited := limited || cand.rate_limit;
    end loop;
    continue when cand.id is null;
    picked := picked || cand.id;
    picked_for := picked_for || i;
    picked_attempts := picked_attempts || cand.attempts;
  end loop;
  if cardinality(picked) > 0 then
    return query select * from forelead_claim_write(p_workspace_ids, p_runner_ids,
      p_token_hashes_hex, p_lease_seconds, picked, picked_for, picked_attempts);
    get diagnostics got = row_count;
    leased := leased + got;
  end if;
  -- A group skipped because another claim held its lock: wake the workspace at our commit.
  perform pg_notify('forelead_jobs', w) from (select distinct unnest(contended) as w) c;
  if leased = 0 and cardinality(contended) = 0 then
    perform set_config('synchronous_commit', 'off', true);
  end if;
end
$$;

--
-- Name: forelead_claim_write(text[], text[], text[], integer, uuid[], integer[], integer[]); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_claim_write(p_workspace_ids text[], p_runner_ids text[], p_token_hashes_hex text[], p_lease_seconds integer, p_jobs uuid[], p_for integer[], p_attempts integer[]) RETURNS SETOF public.jobs
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    SET enable_sort TO 'off'
    AS $$
    begin
      return query
        with lease as (
          insert into leases (token_sha256, job_id, workspace_id, runner_id, attempt, expires_at)
          select decode(p_token_hashes_hex[k.i], 'hex'), k.job_id, p_workspace_ids[k.i], p_runner_ids[k.i], k.attempts + 1, now() + make_interval(secs => p_lease_seconds)
          from unnest(p_jobs, p_for, p_attempts) as k(job_id, i, attempts)
          returning id, job_id, runner_id, token_sha256, attempt, expires_at
        ), leased_job as (
          update jobs j set
            state = 'running', attempts = lease.attempt, runner_id = lease.runner_id, lease_id = lease.id,
            lease_token_sha256 = lease.token_sha256, lease_expires_at = lease.expires_at, updated_at = now()
          from lease where j.id = lease.job_id
          returning j.*
        ), event as (
          insert into events (type, workspace_id, runner_id, job_id, data)
          select 'job.leased', l.workspace_id, l.runner_id, l.id, jsonb_build_object('attempt', l.attempts)
          from leased_job l
        )
        select * from leased_job;
    end
    $$;

--
-- Name: forelead_erase_job_secrets(); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_erase_job_secrets() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
    begin
      delete from job_secrets where job_id = new.id;
      return null;
    end
    $$;

--
-- Name: forelead_events_notify(); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_events_notify() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
    begin
      if exists (select 1 from inserted) then
        perform pg_notify('forelead_events', '');
      end if;
      return null;
    end
    $$;

--
-- Name: forelead_fair_clock(text); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_fair_clock(p_workspace_id text) RETURNS TABLE(at double precision)
    LANGUAGE sql STABLE
    AS $$
select coalesce(
  (select max(j.fair_tag) from jobs j
    where j.workspace_id = p_workspace_id and j.state = 'running' and j.fair_tag is not null),
  (select min(j.fair_tag) from jobs j
    where j.workspace_id = p_workspace_id and j.state = 'queued' and j.fair_tag is not null),
  0)
$$;

--
-- Name: forelead_fair_tag(); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_fair_tag() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: forelead_group_has_room(text, integer, integer); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_group_has_room(p_key text, p_limit integer, p_running integer) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
select p_key is null or p_running < p_limit
$$;

--
-- Name: forelead_group_running(text, text); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_group_running(p_workspace_id text, p_key text) RETURNS integer
    LANGUAGE sql STABLE
    AS $$
      select coalesce((select g.running from forelead_running_groups(p_workspace_id) g where g.concurrency_key = p_key), 0)
    $$;

--
-- Name: forelead_handoff(text, text, text, integer); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_handoff(p_workspace_id text, p_runner_id text, p_token_hash_hex text, p_lease_seconds integer) RETURNS SETOF public.jobs
    LANGUAGE plpgsql
    AS $$
    declare
      commit_mode text := current_setting('synchronous_commit');
    begin
      if not exists (select 1 from runners where workspace_id = p_workspace_id and runner_id = p_runner_id and retired_at is null) then
        return;
      end if;
      return query select * from forelead_claim(array[p_workspace_id], array[p_runner_id], array[p_token_hash_hex], p_lease_seconds);
      perform set_config('synchronous_commit', commit_mode, true);
    end
    $$;

--
-- Name: forelead_is_step_job(uuid); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_is_step_job(p_job_id uuid) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
    begin
      return exists (select 1 from pipeline_steps s where s.job_id = p_job_id);
    end
    $$;

--
-- Name: forelead_job_due(timestamp with time zone); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_job_due(p_claimable_at timestamp with time zone) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
select p_claimable_at <= now()
$$;

--
-- Name: forelead_labels_match(text[], text[]); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_labels_match(p_job_labels text[], p_runner_labels text[]) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
select p_job_labels <@ p_runner_labels
$$;

--
-- Name: forelead_live_leases(text, text); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_live_leases(p_workspace_id text, p_runner_id text) RETURNS TABLE(n integer)
    LANGUAGE sql STABLE
    AS $$
select count(*)::int from leases l
where l.workspace_id = p_workspace_id and l.runner_id = p_runner_id
  and l.ended_at is null and l.expires_at > now()
$$;

--
-- Name: forelead_meets_requirements(text, text, text, text[], text, text, text[], text[]); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_meets_requirements(j_architecture text, j_os text, j_execution_kind text, j_features text[], r_architecture text, r_os text, r_execution_kinds text[], r_features text[]) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
      select (j_architecture is null or j_architecture = r_architecture)
        and (j_os is null or j_os = r_os)
        and (j_execution_kind is null or j_execution_kind = any(r_execution_kinds))
        and j_features <@ r_features
    $$;

--
-- Name: forelead_rate_limit_next(timestamp with time zone[], integer, integer, timestamp with time zone); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_rate_limit_next(p_starts timestamp with time zone[], p_max integer, p_window_seconds integer, p_at timestamp with time zone) RETURNS timestamp with time zone
    LANGUAGE sql STABLE
    AS $$
select coalesce(
  (select e + make_interval(secs => p_window_seconds) from unnest(p_starts) e
    where e > p_at - make_interval(secs => p_window_seconds) and e <= p_at
    order by e desc offset greatest(p_max, 1) - 1 limit 1),
  p_at)
$$;

--
-- Name: forelead_rate_limit_room(timestamp with time zone[], integer, integer, timestamp with time zone); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_rate_limit_room(p_starts timestamp with time zone[], p_max integer, p_window_seconds integer, p_at timestamp with time zone) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
select coalesce(p_at > max(e) - make_interval(secs => p_window_seconds), true)
  and count(*) filter (where e > p_at - make_interval(secs => p_window_seconds)
    and e < p_at + make_interval(secs => p_window_seconds)) < p_max
from unnest(p_starts) e
$$;

--
-- Name: forelead_rate_limit_started(timestamp with time zone[], integer, timestamp with time zone); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_rate_limit_started(p_starts timestamp with time zone[], p_window_seconds integer, p_at timestamp with time zone) RETURNS timestamp with time zone[]
    LANGUAGE sql STABLE
    AS $$
select array(
  select e from unnest(p_starts || p_at) e
  where e > greatest(p_at, (select max(x) from unnest(p_starts) x))
    - make_interval(secs => 2 * p_window_seconds)
  order by e)
$$;

--
-- Name: forelead_runner_state(timestamp with time zone, timestamp with time zone, timestamp with time zone, timestamp with time zone, integer, integer); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_runner_state(p_retired_at timestamp with time zone, p_last_seen_at timestamp with time zone, p_draining_at timestamp with time zone, p_paused_at timestamp with time zone, p_live_leases integer, p_offline_seconds integer) RETURNS text
    LANGUAGE sql STABLE
    AS $$
select case
  when p_retired_at is not null then 'retired'
  when p_last_seen_at <= now() - make_interval(secs => p_offline_seconds) then 'offline'
  when p_draining_at is not null then 'draining'
  when not forelead_runner_unpaused(p_paused_at) then 'paused'
  when p_live_leases > 0 then 'busy'
  else 'idle'
end
$$;

--
-- Name: forelead_runner_unpaused(timestamp with time zone); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_runner_unpaused(p_paused_at timestamp with time zone) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
select p_paused_at is null
$$;

--
-- Name: forelead_running_groups(text); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_running_groups(p_workspace_id text) RETURNS TABLE(concurrency_key text, running integer)
    LANGUAGE sql STABLE
    AS $$
      select concurrency_key, count(*)::int from jobs where workspace_id = p_workspace_id and concurrency_key is not null and state = 'running' group by concurrency_key
    $$;

--
-- Name: forelead_slot_free(integer, integer); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_slot_free(p_held integer, p_slots integer) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
select p_held < p_slots
$$;

--
-- Name: forelead_stream_job_settled(); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_stream_job_settled() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
    begin
      perform pg_notify('forelead_streams', 'settled:' || new.id::text);
      return null;
    end $$;

--
-- Name: forelead_webhook_fanout(); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_webhook_fanout() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: forelead_workspace_unpaused(text); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.forelead_workspace_unpaused(p_workspace_id text) RETURNS TABLE(unpaused boolean)
    LANGUAGE sql STABLE
    AS $$
select not exists (select 1 from workspace_pauses p where p.workspace_id = p_workspace_id)
$$;

--
-- Name: artifact_blob_chunks; Type: TABLE; Schema: public
--

CREATE TABLE public.artifact_blob_chunks (
    digest text NOT NULL,
    byte_offset bigint NOT NULL,
    data bytea NOT NULL,
    CONSTRAINT artifact_blob_chunks_byte_offset_check CHECK ((byte_offset >= 0))
);
ALTER TABLE ONLY public.artifact_blob_chunks ALTER COLUMN data SET STORAGE EXTERNAL;

--
-- Name: artifact_blobs; Type: TABLE; Schema: public
--

CREATE TABLE public.artifact_blobs (
    digest text NOT NULL,
    size bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT artifact_blobs_size_check CHECK ((size >= 0))
);

--
-- Name: audit_records; Type: TABLE; Schema: public
--

CREATE TABLE public.audit_records (
    id bigint NOT NULL,
    at timestamp with time zone NOT NULL,
    route text NOT NULL,
    decision text NOT NULL,
    reason text NOT NULL,
    spiffe_id text,
    certificate_serial text,
    certificate_sha256 text,
    certificate_not_after timestamp with time zone,
    remote_address text,
    kind text DEFAULT 'decision'::text NOT NULL,
    action text,
    target text,
    record_id uuid,
    count integer DEFAULT 1 NOT NULL,
    last_at timestamp with time zone,
    delegate text,
    person_claim text,
    CONSTRAINT audit_records_count_check CHECK ((count >= 1)),
    CONSTRAINT audit_records_decision_check CHECK ((decision = ANY (ARRAY['allow'::text, 'deny'::text]))),
    CONSTRAINT audit_records_kind_check CHECK ((kind = ANY (ARRAY['decision'::text, 'action'::text])))
);

--
-- Name: audit_records_id_seq; Type: SEQUENCE; Schema: public
--

CREATE SEQUENCE public.audit_records_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: audit_records_id_seq; Type: SEQUENCE OWNED BY; Schema: public
--

ALTER SEQUENCE public.audit_records_id_seq OWNED BY public.audit_records.id;

--
-- Name: enrollment_grants; Type: TABLE; Schema: public
--

CREATE TABLE public.enrollment_grants (
    id uuid NOT NULL,
    token_sha256 bytea NOT NULL,
    workspace_id text NOT NULL,
    runner_id text,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    used_at timestamp with time zone,
    used_by_runner text,
    replace boolean DEFAULT false NOT NULL
);

--
-- Name: events; Type: TABLE; Schema: public
--

CREATE TABLE public.events (
    tx xid8 DEFAULT pg_current_xact_id() NOT NULL,
    id bigint NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    type text NOT NULL,
    workspace_id text,
    runner_id text,
    job_id uuid,
    data jsonb DEFAULT '{}'::jsonb NOT NULL
);

--
-- Name: events_id_seq; Type: SEQUENCE; Schema: public
--

ALTER TABLE public.events ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: fairness_keys; Type: TABLE; Schema: public
--

CREATE TABLE public.fairness_keys (
    workspace_id text NOT NULL,
    fairness_key text NOT NULL,
    weight integer DEFAULT 1 NOT NULL,
    last_tag double precision DEFAULT 0 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT fairness_keys_weight_check CHECK ((weight > 0))
);

--
-- Name: inventory_flags; Type: TABLE; Schema: public
--

CREATE TABLE public.inventory_flags (
    id bigint NOT NULL,
    workspace_id text NOT NULL,
    runner_id text NOT NULL,
    problem text NOT NULL,
    job_id uuid NOT NULL,
    kind text,
    name text,
    message text NOT NULL,
    CONSTRAINT inventory_flags_problem_check CHECK ((problem = ANY (ARRAY['job_not_leased_here'::text, 'orphan_of_live_lease'::text, 'lease_without_container'::text])))
);

--
-- Name: inventory_flags_id_seq; Type: SEQUENCE; Schema: public
--

CREATE SEQUENCE public.inventory_flags_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: inventory_flags_id_seq; Type: SEQUENCE OWNED BY; Schema: public
--

ALTER SEQUENCE public.inventory_flags_id_seq OWNED BY public.inventory_flags.id;

--
-- Name: inventory_items; Type: TABLE; Schema: public
--

CREATE TABLE public.inventory_items (
    workspace_id text NOT NULL,
    runner_id text NOT NULL,
    kind text NOT NULL,
    name text NOT NULL,
    job_id uuid NOT NULL,
    state text NOT NULL,
    image text NOT NULL,
    created_at timestamp with time zone,
    cpu double precision NOT NULL,
    memory bigint NOT NULL,
    orphan boolean NOT NULL,
    CONSTRAINT inventory_items_kind_check CHECK ((kind = ANY (ARRAY['container'::text, 'network'::text])))
);

--
-- Name: inventory_reports; Type: TABLE; Schema: public
--

CREATE TABLE public.inventory_reports (
    workspace_id text NOT NULL,
    runner_id text NOT NULL,
    reported_at timestamp with time zone NOT NULL,
    item_count integer NOT NULL
);

--
-- Name: issued_certificates; Type: TABLE; Schema: public
--

CREATE TABLE public.issued_certificates (
    serial text NOT NULL,
    spiffe_id text NOT NULL,
    workspace_id text NOT NULL,
    runner_id text NOT NULL,
    not_before timestamp with time zone NOT NULL,
    not_after timestamp with time zone NOT NULL,
    issued_at timestamp with time zone DEFAULT now() NOT NULL,
    issued_via text NOT NULL,
    sha256 text NOT NULL,
    grant_id uuid,
    CONSTRAINT issued_certificates_issued_via_check CHECK ((issued_via = ANY (ARRAY['enroll'::text, 'renew'::text])))
);

--
-- Name: job_inputs; Type: TABLE; Schema: public
--

CREATE TABLE public.job_inputs (
    lease_id bigint NOT NULL,
    job_id uuid NOT NULL,
    request_id text NOT NULL,
    prompt text NOT NULL,
    schema jsonb NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    checkpoint jsonb NOT NULL,
    suspend_sha256 text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    answer jsonb,
    answered_at timestamp with time zone,
    answered_by text
);

--
-- Name: job_peaks; Type: TABLE; Schema: public
--

CREATE TABLE public.job_peaks (
    job_id uuid NOT NULL,
    peak_cpu_cores double precision NOT NULL,
    peak_memory_bytes bigint NOT NULL,
    samples integer NOT NULL
);

--
-- Name: job_secrets; Type: TABLE; Schema: public
--

CREATE TABLE public.job_secrets (
    job_id uuid NOT NULL,
    kind text NOT NULL,
    name text NOT NULL,
    sealed bytea NOT NULL,
    CONSTRAINT job_secrets_kind_check CHECK ((kind = ANY (ARRAY['env'::text, 'file'::text])))
);

--
-- Name: leases; Type: TABLE; Schema: public
--

CREATE TABLE public.leases (
    id bigint NOT NULL,
    token_sha256 bytea NOT NULL,
    job_id uuid NOT NULL,
    workspace_id text NOT NULL,
    runner_id text NOT NULL,
    attempt integer NOT NULL,
    issued_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    ended_at timestamp with time zone,
    end_reason text,
    completion_id text,
    completion_sha256 text,
    completion_reply jsonb,
    CONSTRAINT leases_end_reason_check CHECK ((end_reason = ANY (ARRAY['released'::text, 'expired'::text, 'settled'::text, 'requeued'::text, 'timed_out'::text, 'suspended'::text])))
);

--
-- Name: leases_id_seq; Type: SEQUENCE; Schema: public
--

CREATE SEQUENCE public.leases_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: leases_id_seq; Type: SEQUENCE OWNED BY; Schema: public
--

ALTER SEQUENCE public.leases_id_seq OWNED BY public.leases.id;

--
-- Name: person_sessions; Type: TABLE; Schema: public
--

CREATE TABLE public.person_sessions (
    id uuid NOT NULL,
    credential_sha256 bytea NOT NULL,
    person text NOT NULL,
    person_claim text NOT NULL,
    person_groups text[] DEFAULT '{}'::text[] NOT NULL,
    delegate text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    ended_at timestamp with time zone
);

--
-- Name: pipeline_step_secrets; Type: TABLE; Schema: public
--

CREATE TABLE public.pipeline_step_secrets (
    pipeline_id uuid NOT NULL,
    step text NOT NULL,
    kind text NOT NULL,
    name text NOT NULL,
    sealed bytea NOT NULL,
    CONSTRAINT pipeline_step_secrets_kind_check CHECK ((kind = ANY (ARRAY['env'::text, 'file'::text])))
);

--
-- Name: pipeline_steps; Type: TABLE; Schema: public
--

CREATE TABLE public.pipeline_steps (
    pipeline_id uuid NOT NULL,
    name text NOT NULL,
    ord integer NOT NULL,
    needs text[] DEFAULT '{}'::text[] NOT NULL,
    allow_failure boolean DEFAULT false NOT NULL,
    inputs jsonb DEFAULT '[]'::jsonb NOT NULL,
    request jsonb NOT NULL,
    state text NOT NULL,
    job_id uuid,
    attempts integer DEFAULT 0 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT pipeline_steps_state_check CHECK ((state = ANY (ARRAY['pending'::text, 'queued'::text, 'running'::text, 'succeeded'::text, 'failed'::text, 'skipped'::text, 'cancelled'::text])))
);

--
-- Name: pipelines; Type: TABLE; Schema: public
--

CREATE TABLE public.pipelines (
    id uuid NOT NULL,
    workspace_id text NOT NULL,
    name text NOT NULL,
    idempotency_key text,
    request_sha256 text NOT NULL,
    state text NOT NULL,
    cancel_requested boolean DEFAULT false NOT NULL,
    enqueued_by text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    settled_at timestamp with time zone,
    CONSTRAINT pipelines_state_check CHECK ((state = ANY (ARRAY['queued'::text, 'running'::text, 'succeeded'::text, 'failed'::text, 'cancelled'::text])))
);

--
-- Name: rate_limits; Type: TABLE; Schema: public
--

CREATE TABLE public.rate_limits (
    name text NOT NULL,
    max_starts integer NOT NULL,
    window_seconds integer NOT NULL,
    starts timestamp with time zone[] DEFAULT '{}'::timestamp with time zone[] NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT rate_limits_max_starts_check CHECK ((max_starts > 0)),
    CONSTRAINT rate_limits_window_seconds_check CHECK ((window_seconds = ANY (ARRAY[1, 60])))
);

--
-- Name: reap_orders; Type: TABLE; Schema: public
--

CREATE TABLE public.reap_orders (
    id bigint NOT NULL,
    workspace_id text NOT NULL,
    runner_id text NOT NULL,
    kind text NOT NULL,
    name text NOT NULL,
    job_id uuid NOT NULL,
    ordered_by text NOT NULL,
    ordered_at timestamp with time zone DEFAULT now() NOT NULL,
    state text DEFAULT 'pending'::text NOT NULL,
    settled_at timestamp with time zone,
    CONSTRAINT reap_orders_state_check CHECK ((state = ANY (ARRAY['pending'::text, 'done'::text, 'expired'::text])))
);

--
-- Name: reap_orders_id_seq; Type: SEQUENCE; Schema: public
--

CREATE SEQUENCE public.reap_orders_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: reap_orders_id_seq; Type: SEQUENCE OWNED BY; Schema: public
--

ALTER SEQUENCE public.reap_orders_id_seq OWNED BY public.reap_orders.id;

--
-- Name: replicas; Type: TABLE; Schema: public
--

CREATE TABLE public.replicas (
    id text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    version text NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    last_seen_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: repositories; Type: TABLE; Schema: public
--

CREATE TABLE public.repositories (
    name text NOT NULL,
    url text NOT NULL,
    credential text,
    registered_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    credential_sealed bytea
);

--
-- Name: runner_retirements; Type: TABLE; Schema: public
--

CREATE TABLE public.runner_retirements (
    workspace_id text NOT NULL,
    runner_id text NOT NULL,
    retired_at timestamp with time zone DEFAULT now() NOT NULL,
    retired_by text NOT NULL,
    reason text NOT NULL
);

--
-- Name: runners; Type: TABLE; Schema: public
--

CREATE TABLE public.runners (
    workspace_id text NOT NULL,
    runner_id text NOT NULL,
    slots integer NOT NULL,
    cpu integer NOT NULL,
    memory_bytes bigint NOT NULL,
    architecture text NOT NULL,
    labels text[] NOT NULL,
    clock_offset_ns bigint NOT NULL,
    registered_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    last_seen_at timestamp with time zone DEFAULT now() NOT NULL,
    retired_at timestamp with time zone,
    paused_at timestamp with time zone,
    paused_by text,
    os text DEFAULT ''::text NOT NULL,
    execution_kinds text[] DEFAULT '{}'::text[] NOT NULL,
    features text[] DEFAULT '{}'::text[] NOT NULL,
    max_concurrency integer DEFAULT 0 NOT NULL,
    instance_id text DEFAULT ''::text NOT NULL,
    instance_started_at timestamp with time zone,
    version text DEFAULT ''::text NOT NULL,
    draining_at timestamp with time zone,
    drain_ordered_by text
);

--
-- Name: scaling_groups; Type: TABLE; Schema: public
--

CREATE TABLE public.scaling_groups (
    name text NOT NULL,
    workspace_id text NOT NULL,
    labels text[] NOT NULL,
    architecture text,
    os text,
    execution_kinds text[] DEFAULT '{}'::text[] NOT NULL,
    features text[] DEFAULT '{}'::text[] NOT NULL,
    min_runners integer NOT NULL,
    max_runners integer NOT NULL,
    slots_per_runner integer NOT NULL,
    idle_seconds integer NOT NULL,
    cooldown_seconds integer NOT NULL,
    provider text NOT NULL,
    controller text NOT NULL,
    lease_expires_at timestamp with time zone NOT NULL,
    registered_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT scaling_groups_check CHECK (((min_runners >= 0) AND (max_runners >= GREATEST(min_runners, 1)) AND (slots_per_runner >= 1)))
);

--
-- Name: schedule_fires; Type: TABLE; Schema: public
--

CREATE TABLE public.schedule_fires (
    schedule_id uuid NOT NULL,
    due_at timestamp with time zone NOT NULL,
    fired_at timestamp with time zone DEFAULT now() NOT NULL,
    cause text NOT NULL,
    outcome text NOT NULL,
    job_id uuid,
    pipeline_id uuid,
    cancelled_id uuid,
    idempotency_key text,
    error text,
    CONSTRAINT schedule_fires_cause_check CHECK ((cause = ANY (ARRAY['due'::text, 'missed'::text, 'manual'::text]))),
    CONSTRAINT schedule_fires_outcome_check CHECK ((outcome = ANY (ARRAY['enqueued'::text, 'skipped_missed'::text, 'skipped_overlap'::text, 'failed'::text])))
);

--
-- Name: schedule_secrets; Type: TABLE; Schema: public
--

CREATE TABLE public.schedule_secrets (
    schedule_id uuid NOT NULL,
    step text NOT NULL,
    kind text NOT NULL,
    name text NOT NULL,
    sealed bytea NOT NULL,
    CONSTRAINT schedule_secrets_kind_check CHECK ((kind = ANY (ARRAY['env'::text, 'file'::text])))
);

--
-- Name: schedules; Type: TABLE; Schema: public
--

CREATE TABLE public.schedules (
    id uuid NOT NULL,
    workspace_id text NOT NULL,
    name text NOT NULL,
    cron text NOT NULL,
    time_zone text NOT NULL,
    template_kind text NOT NULL,
    template jsonb NOT NULL,
    missed_runs text NOT NULL,
    overlap text NOT NULL,
    next_run_at timestamp with time zone NOT NULL,
    paused_at timestamp with time zone,
    paused_by text,
    created_by text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schedules_missed_runs_check CHECK ((missed_runs = ANY (ARRAY['skip'::text, 'runOnce'::text, 'all'::text]))),
    CONSTRAINT schedules_overlap_check CHECK ((overlap = ANY (ARRAY['allow'::text, 'skip'::text, 'cancelPrevious'::text]))),
    CONSTRAINT schedules_template_kind_check CHECK ((template_kind = ANY (ARRAY['job'::text, 'pipeline'::text])))
);

--
-- Name: secrets_keys; Type: TABLE; Schema: public
--

CREATE TABLE public.secrets_keys (
    key_id smallint NOT NULL,
    sealed bytea NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: stream_cursors; Type: TABLE; Schema: public
--

CREATE TABLE public.stream_cursors (
    lease_id bigint NOT NULL,
    stream text NOT NULL,
    last_sequence bigint NOT NULL,
    CONSTRAINT stream_cursors_stream_check CHECK ((stream = ANY (ARRAY['events'::text, 'logs'::text])))
);

--
-- Name: stream_messages; Type: TABLE; Schema: public
--

CREATE TABLE public.stream_messages (
    job_id uuid NOT NULL,
    stream text NOT NULL,
    lease_id bigint NOT NULL,
    attempt integer NOT NULL,
    sequence bigint NOT NULL,
    data jsonb NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: upload_chunks; Type: TABLE; Schema: public
--

CREATE TABLE public.upload_chunks (
    upload_id uuid NOT NULL,
    byte_offset bigint NOT NULL,
    data bytea NOT NULL,
    CONSTRAINT upload_chunks_byte_offset_check CHECK ((byte_offset >= 0))
);
ALTER TABLE ONLY public.upload_chunks ALTER COLUMN data SET STORAGE EXTERNAL;

--
-- Name: uploads; Type: TABLE; Schema: public
--

CREATE TABLE public.uploads (
    id uuid NOT NULL,
    job_id uuid NOT NULL,
    lease_id bigint NOT NULL,
    workspace_id text NOT NULL,
    runner_id text NOT NULL,
    name text NOT NULL,
    size bigint NOT NULL,
    digest text NOT NULL,
    media_type text NOT NULL,
    durable_size bigint DEFAULT 0 NOT NULL,
    state text NOT NULL,
    discard_reason text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    finalized_at timestamp with time zone,
    CONSTRAINT uploads_check CHECK (((durable_size >= 0) AND (durable_size <= size))),
    CONSTRAINT uploads_size_check CHECK ((size >= 0)),
    CONSTRAINT uploads_state_check CHECK ((state = ANY (ARRAY['open'::text, 'finalized'::text, 'discarded'::text])))
);

--
-- Name: webhook_deliveries; Type: TABLE; Schema: public
--

CREATE TABLE public.webhook_deliveries (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    subscription_id uuid NOT NULL,
    event_id bigint NOT NULL,
    event_type text NOT NULL,
    event_at timestamp with time zone NOT NULL,
    workspace_id text,
    runner_id text,
    job_id uuid,
    data jsonb NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    first_attempt_at timestamp with time zone,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    locked_until timestamp with time zone,
    response_code integer,
    last_error text,
    finished_at timestamp with time zone,
    tries jsonb DEFAULT '[]'::jsonb NOT NULL,
    event_snapshot pg_snapshot NOT NULL,
    CONSTRAINT webhook_deliveries_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'delivered'::text, 'failed'::text])))
);

--
-- Name: webhook_subscriptions; Type: TABLE; Schema: public
--

CREATE TABLE public.webhook_subscriptions (
    id uuid NOT NULL,
    workspace_id text,
    url text NOT NULL,
    events text[] NOT NULL,
    secret_sealed bytea NOT NULL,
    enabled boolean DEFAULT true NOT NULL,
    disabled_reason text,
    failed_in_a_row integer DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by text NOT NULL
);

--
-- Name: workspace_pauses; Type: TABLE; Schema: public
--

CREATE TABLE public.workspace_pauses (
    workspace_id text NOT NULL,
    paused_at timestamp with time zone DEFAULT now() NOT NULL,
    paused_by text NOT NULL,
    reason text DEFAULT ''::text NOT NULL
);

--
-- Name: audit_records id; Type: DEFAULT; Schema: public
--

ALTER TABLE ONLY public.audit_records ALTER COLUMN id SET DEFAULT nextval('public.audit_records_id_seq'::regclass);

--
-- Name: inventory_flags id; Type: DEFAULT; Schema: public
--

ALTER TABLE ONLY public.inventory_flags ALTER COLUMN id SET DEFAULT nextval('public.inventory_flags_id_seq'::regclass);

--
-- Name: leases id; Type: DEFAULT; Schema: public
--

ALTER TABLE ONLY public.leases ALTER COLUMN id SET DEFAULT nextval('public.leases_id_seq'::regclass);

--
-- Name: reap_orders id; Type: DEFAULT; Schema: public
--

ALTER TABLE ONLY public.reap_orders ALTER COLUMN id SET DEFAULT nextval('public.reap_orders_id_seq'::regclass);

--
-- Name: artifact_blob_chunks artifact_blob_chunks_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.artifact_blob_chunks
    ADD CONSTRAINT artifact_blob_chunks_pkey PRIMARY KEY (digest, byte_offset);

--
-- Name: artifact_blobs artifact_blobs_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.artifact_blobs
    ADD CONSTRAINT artifact_blobs_pkey PRIMARY KEY (digest);

--
-- Name: audit_records audit_records_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.audit_records
    ADD CONSTRAINT audit_records_pkey PRIMARY KEY (id);

--
-- Name: enrollment_grants enrollment_grants_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.enrollment_grants
    ADD CONSTRAINT enrollment_grants_pkey PRIMARY KEY (id);

--
-- Name: enrollment_grants enrollment_grants_token_sha256_key; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.enrollment_grants
    ADD CONSTRAINT enrollment_grants_token_sha256_key UNIQUE (token_sha256);

--
-- Name: events events_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (id);

--
-- Name: fairness_keys fairness_keys_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.fairness_keys
    ADD CONSTRAINT fairness_keys_pkey PRIMARY KEY (workspace_id, fairness_key);

--
-- Name: inventory_flags inventory_flags_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.inventory_flags
    ADD CONSTRAINT inventory_flags_pkey PRIMARY KEY (id);

--
-- Name: inventory_items inventory_items_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.inventory_items
    ADD CONSTRAINT inventory_items_pkey PRIMARY KEY (workspace_id, runner_id, kind, name);

--
-- Name: inventory_reports inventory_reports_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.inventory_reports
    ADD CONSTRAINT inventory_reports_pkey PRIMARY KEY (workspace_id, runner_id);

--
-- Name: issued_certificates issued_certificates_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.issued_certificates
    ADD CONSTRAINT issued_certificates_pkey PRIMARY KEY (serial);

--
-- Name: job_inputs job_inputs_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.job_inputs
    ADD CONSTRAINT job_inputs_pkey PRIMARY KEY (lease_id);

--
-- Name: job_peaks job_peaks_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.job_peaks
    ADD CONSTRAINT job_peaks_pkey PRIMARY KEY (job_id);

--
-- Name: job_secrets job_secrets_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.job_secrets
    ADD CONSTRAINT job_secrets_pkey PRIMARY KEY (job_id, kind, name);

--
-- Name: jobs jobs_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (id);

--
-- Name: leases leases_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.leases
    ADD CONSTRAINT leases_pkey PRIMARY KEY (id);

--
-- Name: leases leases_token_sha256_key; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.leases
    ADD CONSTRAINT leases_token_sha256_key UNIQUE (token_sha256);

--
-- Name: person_sessions person_sessions_credential_sha256_key; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.person_sessions
    ADD CONSTRAINT person_sessions_credential_sha256_key UNIQUE (credential_sha256);

--
-- Name: person_sessions person_sessions_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.person_sessions
    ADD CONSTRAINT person_sessions_pkey PRIMARY KEY (id);

--
-- Name: pipeline_step_secrets pipeline_step_secrets_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.pipeline_step_secrets
    ADD CONSTRAINT pipeline_step_secrets_pkey PRIMARY KEY (pipeline_id, step, kind, name);

--
-- Name: pipeline_steps pipeline_steps_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.pipeline_steps
    ADD CONSTRAINT pipeline_steps_pkey PRIMARY KEY (pipeline_id, name);

--
-- Name: pipelines pipelines_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.pipelines
    ADD CONSTRAINT pipelines_pkey PRIMARY KEY (id);

--
-- Name: pipelines pipelines_workspace_id_idempotency_key_key; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.pipelines
    ADD CONSTRAINT pipelines_workspace_id_idempotency_key_key UNIQUE (workspace_id, idempotency_key);

--
-- Name: rate_limits rate_limits_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.rate_limits
    ADD CONSTRAINT rate_limits_pkey PRIMARY KEY (name);

--
-- Name: reap_orders reap_orders_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.reap_orders
    ADD CONSTRAINT reap_orders_pkey PRIMARY KEY (id);

--
-- Name: replicas replicas_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.replicas
    ADD CONSTRAINT replicas_pkey PRIMARY KEY (id);

--
-- Name: repositories repositories_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.repositories
    ADD CONSTRAINT repositories_pkey PRIMARY KEY (name);

--
-- Name: runner_retirements runner_retirements_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.runner_retirements
    ADD CONSTRAINT runner_retirements_pkey PRIMARY KEY (workspace_id, runner_id);

--
-- Name: runners runners_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.runners
    ADD CONSTRAINT runners_pkey PRIMARY KEY (workspace_id, runner_id);

--
-- Name: scaling_groups scaling_groups_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.scaling_groups
    ADD CONSTRAINT scaling_groups_pkey PRIMARY KEY (name);

--
-- Name: schedule_fires schedule_fires_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.schedule_fires
    ADD CONSTRAINT schedule_fires_pkey PRIMARY KEY (schedule_id, due_at);

--
-- Name: schedule_secrets schedule_secrets_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.schedule_secrets
    ADD CONSTRAINT schedule_secrets_pkey PRIMARY KEY (schedule_id, step, kind, name);

--
-- Name: schedules schedules_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.schedules
    ADD CONSTRAINT schedules_pkey PRIMARY KEY (id);

--
-- Name: schedules schedules_workspace_id_name_key; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.schedules
    ADD CONSTRAINT schedules_workspace_id_name_key UNIQUE (workspace_id, name);

--
-- Name: secrets_keys secrets_keys_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.secrets_keys
    ADD CONSTRAINT secrets_keys_pkey PRIMARY KEY (key_id);

--
-- Name: stream_cursors stream_cursors_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.stream_cursors
    ADD CONSTRAINT stream_cursors_pkey PRIMARY KEY (lease_id, stream);

--
-- Name: stream_messages stream_messages_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.stream_messages
    ADD CONSTRAINT stream_messages_pkey PRIMARY KEY (job_id, stream, lease_id, sequence);

--
-- Name: upload_chunks upload_chunks_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.upload_chunks
    ADD CONSTRAINT upload_chunks_pkey PRIMARY KEY (upload_id, byte_offset);

--
-- Name: uploads uploads_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.uploads
    ADD CONSTRAINT uploads_pkey PRIMARY KEY (id);

--
-- Name: webhook_deliveries webhook_deliveries_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_pkey PRIMARY KEY (id);

--
-- Name: webhook_deliveries webhook_deliveries_subscription_id_event_id_key; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_subscription_id_event_id_key UNIQUE (subscription_id, event_id);

--
-- Name: webhook_subscriptions webhook_subscriptions_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.webhook_subscriptions
    ADD CONSTRAINT webhook_subscriptions_pkey PRIMARY KEY (id);

--
-- Name: workspace_pauses workspace_pauses_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.workspace_pauses
    ADD CONSTRAINT workspace_pauses_pkey PRIMARY KEY (workspace_id);

--
-- Name: audit_records_at; Type: INDEX; Schema: public
--

CREATE INDEX audit_records_at ON public.audit_records USING btree (at);

--
-- Name: audit_records_denied; Type: INDEX; Schema: public
--

CREATE INDEX audit_records_denied ON public.audit_records USING btree (id) WHERE (decision = 'deny'::text);

--
-- Name: audit_records_record_id; Type: INDEX; Schema: public
--

CREATE UNIQUE INDEX audit_records_record_id ON public.audit_records USING btree (record_id);

--
-- Name: audit_records_spiffe_id; Type: INDEX; Schema: public
--

CREATE INDEX audit_records_spiffe_id ON public.audit_records USING btree (spiffe_id, at);

--
-- Name: events_at; Type: INDEX; Schema: public
--

CREATE INDEX events_at ON public.events USING btree (at);

--
-- Name: events_workspace; Type: INDEX; Schema: public
--

CREATE INDEX events_workspace ON public.events USING btree (workspace_id, id);

--
-- Name: inventory_flags_runner; Type: INDEX; Schema: public
--

CREATE INDEX inventory_flags_runner ON public.inventory_flags USING btree (workspace_id, runner_id);

--
-- Name: inventory_items_orphans; Type: INDEX; Schema: public
--

CREATE INDEX inventory_items_orphans ON public.inventory_items USING btree (workspace_id, runner_id) WHERE orphan;

--
-- Name: issued_certificates_identity; Type: INDEX; Schema: public
--

CREATE INDEX issued_certificates_identity ON public.issued_certificates USING btree (workspace_id, runner_id, issued_at);

--
-- Name: issued_certificates_not_after; Type: INDEX; Schema: public
--

CREATE INDEX issued_certificates_not_after ON public.issued_certificates USING btree (not_after);

--
-- Name: job_inputs_job; Type: INDEX; Schema: public
--

CREATE INDEX job_inputs_job ON public.job_inputs USING btree (job_id);

--
-- Name: job_inputs_unanswered; Type: INDEX; Schema: public
--

CREATE INDEX job_inputs_unanswered ON public.job_inputs USING btree (expires_at) WHERE (answered_at IS NULL);

--
-- Name: jobs_claimable; Type: INDEX; Schema: public
--

CREATE INDEX jobs_claimable ON public.jobs USING btree (workspace_id, priority DESC, fair_tag NULLS FIRST, created_at, id, claimable_at) WHERE (state = 'queued'::text);

--
-- Name: jobs_fair_tags; Type: INDEX; Schema: public
--

CREATE INDEX jobs_fair_tags ON public.jobs USING btree (workspace_id, state, fair_tag) WHERE (fair_tag IS NOT NULL);

--
-- Name: jobs_idempotency; Type: INDEX; Schema: public
--

CREATE UNIQUE INDEX jobs_idempotency ON public.jobs USING btree (workspace_id, idempotency_key) WHERE (idempotency_key IS NOT NULL);

--
-- Name: jobs_newest; Type: INDEX; Schema: public
--

CREATE INDEX jobs_newest ON public.jobs USING btree (created_at DESC, id DESC);

--
-- Name: jobs_retried_by; Type: INDEX; Schema: public
--

CREATE INDEX jobs_retried_by ON public.jobs USING btree (retried_by) WHERE (retried_by IS NOT NULL);

--
-- Name: jobs_retry_of; Type: INDEX; Schema: public
--

CREATE INDEX jobs_retry_of ON public.jobs USING btree (retry_of) WHERE (retry_of IS NOT NULL);

--
-- Name: jobs_running_expiry; Type: INDEX; Schema: public
--

CREATE INDEX jobs_running_expiry ON public.jobs USING btree (lease_expires_at) WHERE (state = 'running'::text);

--
-- Name: jobs_running_group; Type: INDEX; Schema: public
--

CREATE INDEX jobs_running_group ON public.jobs USING btree (workspace_id, concurrency_key) WHERE ((state = 'running'::text) AND (concurrency_key IS NOT NULL));

--
-- Name: jobs_scheduled; Type: INDEX; Schema: public
--

CREATE INDEX jobs_scheduled ON public.jobs USING btree (workspace_id, claimable_at) WHERE ((state = 'queued'::text) AND (claimable_at > created_at));

--
-- Name: jobs_settled; Type: INDEX; Schema: public
--

CREATE INDEX jobs_settled ON public.jobs USING btree (settled_at) WHERE (settled_at IS NOT NULL);

--
-- Name: jobs_waiting_input; Type: INDEX; Schema: public
--

CREATE INDEX jobs_waiting_input ON public.jobs USING btree (workspace_id) WHERE (state = 'waiting_input'::text);

--
-- Name: jobs_workspace_created; Type: INDEX; Schema: public
--

CREATE INDEX jobs_workspace_created ON public.jobs USING btree (workspace_id, created_at, id);

--
-- Name: jobs_workspace_settled; Type: INDEX; Schema: public
--

CREATE INDEX jobs_workspace_settled ON public.jobs USING btree (workspace_id, settled_at) WHERE (settled_at IS NOT NULL);

--
-- Name: jobs_workspace_state_created; Type: INDEX; Schema: public
--

CREATE INDEX jobs_workspace_state_created ON public.jobs USING btree (workspace_id, state, created_at, id);

--
-- Name: leases_job_stats; Type: INDEX; Schema: public
--

CREATE INDEX leases_job_stats ON public.leases USING btree (job_id) INCLUDE (runner_id, issued_at, expires_at, ended_at, end_reason);

--
-- Name: leases_open_by_runner; Type: INDEX; Schema: public
--

CREATE INDEX leases_open_by_runner ON public.leases USING btree (workspace_id, runner_id) WHERE (ended_at IS NULL);

--
-- Name: leases_runner_job; Type: INDEX; Schema: public
--

CREATE INDEX leases_runner_job ON public.leases USING btree (runner_id, job_id);

--
-- Name: person_sessions_expires_at; Type: INDEX; Schema: public
--

CREATE INDEX person_sessions_expires_at ON public.person_sessions USING btree (expires_at);

--
-- Name: pipeline_steps_job; Type: INDEX; Schema: public
--

CREATE UNIQUE INDEX pipeline_steps_job ON public.pipeline_steps USING btree (job_id) WHERE (job_id IS NOT NULL);

--
-- Name: pipeline_steps_open; Type: INDEX; Schema: public
--

CREATE INDEX pipeline_steps_open ON public.pipeline_steps USING btree (job_id) WHERE (state = ANY (ARRAY['queued'::text, 'running'::text]));

--
-- Name: pipelines_workspace_created; Type: INDEX; Schema: public
--

CREATE INDEX pipelines_workspace_created ON public.pipelines USING btree (workspace_id, created_at, id);

--
-- Name: pipelines_workspace_state_created; Type: INDEX; Schema: public
--

CREATE INDEX pipelines_workspace_state_created ON public.pipelines USING btree (workspace_id, state, created_at, id);

--
-- Name: reap_orders_newest; Type: INDEX; Schema: public
--

CREATE INDEX reap_orders_newest ON public.reap_orders USING btree (ordered_at DESC, id DESC);

--
-- Name: reap_orders_pending; Type: INDEX; Schema: public
--

CREATE UNIQUE INDEX reap_orders_pending ON public.reap_orders USING btree (workspace_id, runner_id, kind, name) WHERE (state = 'pending'::text);

--
-- Name: runners_last_seen; Type: INDEX; Schema: public
--

CREATE INDEX runners_last_seen ON public.runners USING btree (last_seen_at) WHERE (retired_at IS NULL);

--
-- Name: schedule_fires_fired; Type: INDEX; Schema: public
--

CREATE INDEX schedule_fires_fired ON public.schedule_fires USING btree (fired_at);

--
-- Name: schedules_due; Type: INDEX; Schema: public
--

CREATE INDEX schedules_due ON public.schedules USING btree (next_run_at) WHERE (paused_at IS NULL);

--
-- Name: uploads_digest; Type: INDEX; Schema: public
--

CREATE INDEX uploads_digest ON public.uploads USING btree (digest) WHERE (state <> 'discarded'::text);

--
-- Name: uploads_finalized_digest; Type: INDEX; Schema: public
--

CREATE INDEX uploads_finalized_digest ON public.uploads USING btree (job_id, digest) WHERE (state = 'finalized'::text);

--
-- Name: uploads_job; Type: INDEX; Schema: public
--

CREATE INDEX uploads_job ON public.uploads USING btree (job_id);

--
-- Name: uploads_lease; Type: INDEX; Schema: public
--

CREATE INDEX uploads_lease ON public.uploads USING btree (lease_id);

--
-- Name: uploads_open_name; Type: INDEX; Schema: public
--

CREATE UNIQUE INDEX uploads_open_name ON public.uploads USING btree (lease_id, name) WHERE (state = 'open'::text);

--
-- Name: webhook_deliveries_finished; Type: INDEX; Schema: public
--

CREATE INDEX webhook_deliveries_finished ON public.webhook_deliveries USING btree (finished_at) WHERE (finished_at IS NOT NULL);

--
-- Name: webhook_deliveries_log; Type: INDEX; Schema: public
--

CREATE INDEX webhook_deliveries_log ON public.webhook_deliveries USING btree (subscription_id, created_at DESC);

--
-- Name: webhook_deliveries_pending; Type: INDEX; Schema: public
--

CREATE INDEX webhook_deliveries_pending ON public.webhook_deliveries USING btree (subscription_id, event_id) WHERE (status = 'pending'::text);

--
-- Name: events events_notify; Type: TRIGGER; Schema: public
--

CREATE TRIGGER events_notify AFTER INSERT ON public.events REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION public.forelead_events_notify();

--
-- Name: jobs jobs_erase_secrets; Type: TRIGGER; Schema: public
--

CREATE TRIGGER jobs_erase_secrets AFTER UPDATE OF state ON public.jobs FOR EACH ROW WHEN (((new.state = ANY (ARRAY['succeeded'::text, 'failed'::text, 'cancelled'::text])) AND ((cardinality(new.secret_names) > 0) OR (cardinality(new.secret_file_names) > 0)))) EXECUTE FUNCTION public.forelead_erase_job_secrets();

--
-- Name: jobs jobs_fair_tag; Type: TRIGGER; Schema: public
--

CREATE TRIGGER jobs_fair_tag BEFORE INSERT ON public.jobs FOR EACH ROW WHEN ((new.fairness_key IS NOT NULL)) EXECUTE FUNCTION public.forelead_fair_tag();

--
-- Name: jobs jobs_settled_wakes_followers; Type: TRIGGER; Schema: public
--

CREATE TRIGGER jobs_settled_wakes_followers AFTER UPDATE OF state ON public.jobs FOR EACH ROW WHEN (((old.state IS DISTINCT FROM new.state) AND (new.state = ANY (ARRAY['succeeded'::text, 'failed'::text, 'cancelled'::text])))) EXECUTE FUNCTION public.forelead_stream_job_settled();

--
-- Name: events webhook_fanout; Type: TRIGGER; Schema: public
--

CREATE TRIGGER webhook_fanout AFTER INSERT ON public.events REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION public.forelead_webhook_fanout();

--
-- Name: artifact_blob_chunks artifact_blob_chunks_digest_fkey; Type: FK CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.artifact_blob_chunks
    ADD CONSTRAINT artifact_blob_chunks_digest_fkey FOREIGN KEY (digest) REFERENCES public.artifact_blobs(digest);

--
-- Name: job_inputs job_inputs_job_id_fkey; Type: FK CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.job_inputs
    ADD CONSTRAINT job_inputs_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(id);

--
-- Name: job_secrets job_secrets_job_id_fkey; Type: FK CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.job_secrets
    ADD CONSTRAINT job_secrets_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(id) ON DELETE CASCADE;

--
-- Name: jobs jobs_rate_limit_fkey; Type: FK CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.jobs
    ADD CONSTRAINT jobs_rate_limit_fkey FOREIGN KEY (rate_limit) REFERENCES public.rate_limits(name);

--
-- Name: jobs jobs_retried_by_fkey; Type: FK CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.jobs
    ADD CONSTRAINT jobs_retried_by_fkey FOREIGN KEY (retried_by) REFERENCES public.jobs(id);

--
-- Name: jobs jobs_retry_of_fkey; Type: FK CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.jobs
    ADD CONSTRAINT jobs_retry_of_fkey FOREIGN KEY (retry_of) REFERENCES public.jobs(id);

--
-- Name: leases leases_job_id_fkey; Type: FK CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.leases
    ADD CONSTRAINT leases_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(id);

--
-- Name: pipeline_step_secrets pipeline_step_secrets_pipeline_id_step_fkey; Type: FK CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.pipeline_step_secrets
    ADD CONSTRAINT pipeline_step_secrets_pipeline_id_step_fkey FOREIGN KEY (pipeline_id, step) REFERENCES public.pipeline_steps(pipeline_id, name) ON DELETE CASCADE;

--
-- Name: pipeline_steps pipeline_steps_job_id_fkey; Type: FK CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.pipeline_steps
    ADD CONSTRAINT pipeline_steps_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(id);

--
-- Name: pipeline_steps pipeline_steps_pipeline_id_fkey; Type: FK CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.pipeline_steps
    ADD CONSTRAINT pipeline_steps_pipeline_id_fkey FOREIGN KEY (pipeline_id) REFERENCES public.pipelines(id) ON DELETE CASCADE;

--
-- Name: schedule_fires schedule_fires_schedule_id_fkey; Type: FK CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.schedule_fires
    ADD CONSTRAINT schedule_fires_schedule_id_fkey FOREIGN KEY (schedule_id) REFERENCES public.schedules(id) ON DELETE CASCADE;

--
-- Name: schedule_secrets schedule_secrets_schedule_id_fkey; Type: FK CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.schedule_secrets
    ADD CONSTRAINT schedule_secrets_schedule_id_fkey FOREIGN KEY (schedule_id) REFERENCES public.schedules(id) ON DELETE CASCADE;

--
-- Name: upload_chunks upload_chunks_upload_id_fkey; Type: FK CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.upload_chunks
    ADD CONSTRAINT upload_chunks_upload_id_fkey FOREIGN KEY (upload_id) REFERENCES public.uploads(id);

--
-- Name: uploads uploads_job_id_fkey; Type: FK CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.uploads
    ADD CONSTRAINT uploads_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(id);

--
-- Name: uploads uploads_lease_id_fkey; Type: FK CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.uploads
    ADD CONSTRAINT uploads_lease_id_fkey FOREIGN KEY (lease_id) REFERENCES public.leases(id);

--
-- Name: webhook_deliveries webhook_deliveries_subscription_id_fkey; Type: FK CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_subscription_id_fkey FOREIGN KEY (subscription_id) REFERENCES public.webhook_subscriptions(id) ON DELETE CASCADE;

--

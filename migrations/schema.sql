-- The riverbus schema as a fresh install ends with it: River's migrations,
-- riverbus's numbered migrations and the current texts of its functions and
-- triggers (migrations/sql/current), dumped by pg_dump --schema-only
-- --no-owner of PostgreSQL 15. Generated: do not edit. Regenerate with
--   go generate ./migrations     (or: make generate)
-- after changing a migration or a current text; TestSchemaSQLIsCurrent fails
-- until it is.

--
-- PostgreSQL database dump
--

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: riverbus_private_public; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA riverbus_private_public;

--
-- Name: SCHEMA riverbus_private_public; Type: COMMENT; Schema: -; Owner: -
--

COMMENT ON SCHEMA riverbus_private_public IS 'riverbus: the locks of the riverbus install in schema public. USAGE only for riverbus_worker and the owner.';

--
-- Name: river_job_state; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.river_job_state AS ENUM (
    'available',
    'cancelled',
    'completed',
    'discarded',
    'pending',
    'retryable',
    'running',
    'scheduled'
);

--
-- Name: river_job_state_in_bitmask(bit, public.river_job_state); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.river_job_state_in_bitmask(bitmask bit, state public.river_job_state) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE state
        WHEN 'available' THEN get_bit(bitmask, 7)
        WHEN 'cancelled' THEN get_bit(bitmask, 6)
        WHEN 'completed' THEN get_bit(bitmask, 5)
        WHEN 'discarded' THEN get_bit(bitmask, 4)
        WHEN 'pending'   THEN get_bit(bitmask, 3)
        WHEN 'retryable' THEN get_bit(bitmask, 2)
        WHEN 'running'   THEN get_bit(bitmask, 1)
        WHEN 'scheduled' THEN get_bit(bitmask, 0)
        ELSE 0
    END = 1;
$$;

--
-- Name: riverbus_append_if_lock(bigint[], boolean[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_append_if_lock(p_keys bigint[], p_exclusive boolean[]) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
  b record;
  n integer := 0;
BEGIN
  IF cardinality(p_keys) IS DISTINCT FROM cardinality(p_exclusive) THEN
    RAISE EXCEPTION 'riverbus_append_if_lock: p_keys and p_exclusive must have the same length';
  END IF;
  FOR b IN
    SELECT (((u.k % 4096) + 4096) % 4096)::integer AS bucket, bool_or(coalesce(u.x, true)) AS exclusive
    FROM unnest(p_keys, p_exclusive) AS u(k, x) WHERE u.k IS NOT NULL
    GROUP BY 1 ORDER BY 1
  LOOP
    IF b.exclusive THEN
      PERFORM 1 FROM riverbus_private_public.riverbus_append_lock l WHERE l.bucket = b.bucket FOR UPDATE;
    ELSE
      PERFORM 1 FROM riverbus_private_public.riverbus_append_lock l WHERE l.bucket = b.bucket FOR SHARE;
    END IF;
    n := n + 1;
  END LOOP;
  RETURN n;
END
$$;

--
-- Name: riverbus_command_assign(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_command_assign() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
  IF TG_OP = 'UPDATE' THEN
    RAISE EXCEPTION 'riverbus_command: transaction_id cannot be changed';
  END IF;
  NEW.transaction_id := pg_current_xact_id();
  RETURN NEW;
END
$$;

--
-- Name: riverbus_dead_letter_keep(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_dead_letter_keep() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
BEGIN
  INSERT INTO public.riverbus_dead_letter (job_id, pool, global_sequence, queue, args, attempt, max_attempts, priority, errors,
                                    discarded_at, lane, metadata)
  SELECT NEW.id, NEW.kind,
         CASE WHEN NEW.args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (NEW.args->>'global_sequence')::bigint END,
         NEW.queue, NEW.args, NEW.attempt, NEW.max_attempts, NEW.priority,
         coalesce(to_jsonb(NEW.errors), '[]'::jsonb), coalesce(NEW.finalized_at, now()),
         NEW.metadata->>'riverbus_lane', coalesce(NEW.metadata, '{}'::jsonb)
  FROM public.riverbus_pool p WHERE p.name = NEW.kind
  ON CONFLICT (job_id) DO UPDATE SET
    attempt = EXCLUDED.attempt, errors = EXCLUDED.errors, discarded_at = EXCLUDED.discarded_at;
  RETURN NULL;
END
$_$;

--
-- Name: riverbus_event_assign(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_event_assign() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  -- The order is the point: the xid first, then the sequence number.
  NEW.transaction_id := pg_catalog.pg_current_xact_id();
  NEW.global_sequence := pg_catalog.nextval('public.riverbus_event_global_sequence'::pg_catalog.regclass);
  RETURN NEW;
END
$$;

--
-- Name: riverbus_event_envelope(bigint[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_event_envelope(p_seqs bigint[]) RETURNS jsonb
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  SELECT jsonb_agg(jsonb_build_object('global_sequence', e.global_sequence, 'event_id', e.event_id, 'type', e.type,
           'key', e.key, 'tags', to_jsonb(e.tags), 'data', e.data, 'metadata', e.metadata,
           'occurred_at', e.occurred_at, 'version', e.version) ORDER BY e.global_sequence)
  FROM public.riverbus_event e WHERE e.global_sequence = ANY(p_seqs)
$$;

--
-- Name: riverbus_event_immutable(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_event_immutable() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
  IF NEW.transaction_id <> OLD.transaction_id
    OR (NEW.global_sequence <> OLD.global_sequence
      AND current_setting('riverbus.renumber', true) IS DISTINCT FROM 'on')
  THEN
    RAISE EXCEPTION 'riverbus_event: global_sequence and transaction_id cannot be changed';
  END IF;
  RETURN NEW;
END
$$;

--
-- Name: riverbus_event_notify(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_event_notify() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
  IF coalesce(nullif(current_setting('riverbus.notify', true), '')::boolean, true) THEN
    PERFORM pg_notify('riverbus_event', '');
  END IF;
  RETURN NULL;
END
$$;

--
-- Name: riverbus_event_renumber(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_event_renumber() RETURNS TABLE(old_sequence bigint, new_sequence bigint)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
  v_last bigint;
  v_horizon bigint;
  v_old bigint;
  v_new bigint;
BEGIN
  -- The xid first, as the assign trigger takes it (docs/design.md §1), and the
  -- lock an INSERT takes before its trigger runs: a new number is missing
  -- until this transaction commits, and the horizon's proof must find this
  -- transaction among the possible writers (those holding this lock,
  -- docs/design.md §2.2) with an xid below the gap's bound.
  PERFORM pg_current_xact_id();
  LOCK TABLE public.riverbus_event IN ROW EXCLUSIVE MODE;
  SELECT CASE WHEN q.is_called THEN q.last_value ELSE q.last_value - 1 END INTO v_last
    FROM public.riverbus_event_global_sequence q;
  SELECT h.horizon INTO v_horizon FROM public.riverbus_horizon h;
  IF v_last < v_horizon THEN
    RAISE EXCEPTION 'riverbus_event_renumber: riverbus_event_global_sequence (last value %) is below the horizon (%): new numbers would be ones no pool reads', v_last, v_horizon
      USING HINT = 'Fix the problem sequence_below_horizon first (README, "What riverbus requires of the sequence and the triggers").';
  END IF;
  PERFORM set_config('riverbus.renumber', 'on', true);
  -- The sequence is read again inside the statement, after its snapshot
  -- was taken: every event that snapshot shows above the sequence's last
  -- value got its number from something else than the sequence.
  FOR v_old IN
    SELECT e.global_sequence FROM public.riverbus_event e
    WHERE e.global_sequence > (SELECT CASE WHEN q.is_called THEN q.last_value ELSE q.last_value - 1 END
                               FROM public.riverbus_event_global_sequence q)
    ORDER BY e.global_sequence
  LOOP
    LOOP
      v_new := nextval('public.riverbus_event_global_sequence'::regclass);
      -- Another planted number the sequence has reached: that one is
      -- renumbered in its turn; this number is burned.
      EXIT WHEN NOT EXISTS (SELECT 1 FROM public.riverbus_event e WHERE e.global_sequence = v_new);
    END LOOP;
    UPDATE public.riverbus_event SET global_sequence = v_new WHERE global_sequence = v_old;
    old_sequence := v_old;
    new_sequence := v_new;
    RETURN NEXT;
  END LOOP;
  PERFORM set_config('riverbus.renumber', 'off', true);
END
$$;

--
-- Name: riverbus_event_stamp(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_event_stamp() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  NEW.appended_at := pg_catalog.transaction_timestamp();
  RETURN NEW;
END
$$;

SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: riverbus_failover; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.riverbus_failover (
    id bigint NOT NULL,
    fenced_at timestamp with time zone DEFAULT now() NOT NULL,
    old_timeline bigint NOT NULL,
    new_timeline bigint NOT NULL,
    old_system_identifier bigint,
    new_system_identifier bigint NOT NULL,
    horizon_before bigint NOT NULL,
    horizon_after bigint NOT NULL,
    sequence_before bigint NOT NULL,
    events_renumbered bigint NOT NULL,
    job_id_before bigint NOT NULL,
    job_id_after bigint NOT NULL,
    jobs_rescued bigint NOT NULL
);

--
-- Name: riverbus_failover_fence(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_failover_fence() RETURNS SETOF public.riverbus_failover
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET lock_timeout TO '10s'
    AS $$
DECLARE
  v_timeline bigint;
  v_system bigint;
  v_old_timeline bigint;
  v_old_system bigint;
  v_horizon bigint;
  v_last bigint;
  v_far bigint;
  v_renumbered bigint;
  v_job_last bigint;
  v_job_far bigint;
  v_rescued bigint;
  v_holders text;
  v_row public.riverbus_failover;
BEGIN
  IF pg_is_in_recovery() THEN
    RETURN; -- a standby writes nothing: nothing to fence
  END IF;
  v_timeline := public.riverbus_server_timeline();
  v_system := (pg_control_system()).system_identifier;
  SELECT h.timeline, h.system_identifier INTO v_old_timeline, v_old_system FROM public.riverbus_horizon h;
  IF NOT FOUND OR (v_old_timeline = v_timeline AND v_old_system = v_system) THEN
    RETURN; -- no horizon row (rounds name its repair), or the same server
  END IF;
  PERFORM set_config('riverbus.timeline_fence', 'on', true);
  IF v_old_timeline IS NULL THEN
    -- Never recorded (a horizon repaired, an install from before this
    -- migration on a standby): nothing is known to fence against.
    UPDATE public.riverbus_horizon SET timeline = v_timeline, system_identifier = v_system;
    PERFORM set_config('riverbus.timeline_fence', 'off', true);
    RETURN;
  END IF;

  -- One fence at a time, and no round beside it (a round takes this lock
  -- NOWAIT and skips).
  LOCK TABLE riverbus_private_public.riverbus_horizon_lock IN EXCLUSIVE MODE;
  -- Every appender of this server that took a number before the fence
  -- moves the sequence ends first (an INSERT holds ROW EXCLUSIVE from
  -- before its trigger takes the number until it ends), and the next ones
  -- wait for this transaction: afterwards every number above the horizon
  -- is committed and visible, or will never commit. New appends queue
  -- behind this wait, so it is short; the fence is retried at the next
  -- round, and appends go on in between.
  PERFORM set_config('lock_timeout', '2s', true);
  BEGIN
    LOCK TABLE public.riverbus_event IN SHARE MODE;
  EXCEPTION WHEN lock_not_available THEN
    SELECT string_agg(CASE WHEN l.pid IS NULL THEN 'a prepared transaction' ELSE 'pid ' || l.pid END, ', ' ORDER BY l.pid)
      INTO v_holders FROM pg_locks l
      WHERE l.relation = 'public.riverbus_event'::regclass AND l.granted AND l.mode = 'RowExclusiveLock';
    RAISE EXCEPTION 'riverbus_failover_fence: transactions appending to riverbus_event (%) did not end within 2s; the fence, which waits for every number handed out before it, is retried at the next horizon round', coalesce(v_holders, 'none left')
      USING ERRCODE = 'lock_not_available',
        HINT = 'A transaction prepared before the failover (pg_prepared_xacts) holds it until COMMIT PREPARED or ROLLBACK PREPARED.';
  END;
  SELECT h.horizon, h.timeline, h.system_identifier INTO v_horizon, v_old_timeline, v_old_system
    FROM public.riverbus_horizon h FOR UPDATE;
  IF v_old_timeline = v_timeline AND v_old_system = v_system THEN
    PERFORM set_config('riverbus.timeline_fence', 'off', true);
    RETURN; -- another instance fenced while this one waited
  END IF;

  -- How far is far. The old primary handed out numbers that never reached
  -- this server: how many is bounded by nothing riverbus can read here
  -- (the replication lag, in events, of a server that is gone). 2^32
  -- is more than any primary appends between two WAL records that reach
  -- its standby (four billion events), and bigint leaves room for 2^31
  -- such fences. The same for River's job ids.
  SELECT CASE WHEN q.is_called THEN q.last_value ELSE q.last_value - 1 END INTO v_last
    FROM public.riverbus_event_global_sequence q;
  v_far := greatest(v_last, v_horizon) + 4294967296;

  -- Every event above the replicated horizon gets a number above v_far,
  -- in its old order; it keeps its event id, transaction id and data.
  -- These are the only events that may hold a number the old primary
  -- delivered: the horizon row came through replication after every
  -- event at or below it, and the old primary delivered only what its
  -- horizon had passed. Those appended on this server before the fence
  -- took numbers above the standby's sequence, which is behind the old
  -- primary's; those replicated but not passed here were perhaps
  -- delivered there already, and are delivered again under a new number
  -- (at least once: the event id is the key to deduplicate on).
  PERFORM set_config('riverbus.renumber', 'on', true);
  WITH moved AS MATERIALIZED (
    SELECT e.global_sequence AS old_sequence,
      v_far + row_number() OVER (ORDER BY e.global_sequence) AS new_sequence
    FROM public.riverbus_event e WHERE e.global_sequence > v_horizon
  )
  UPDATE public.riverbus_event e SET global_sequence = m.new_sequence
  FROM moved m WHERE e.global_sequence = m.old_sequence;
  GET DIAGNOSTICS v_renumbered = ROW_COUNT;
  PERFORM set_config('riverbus.renumber', 'off', true);
  PERFORM setval('public.riverbus_event_global_sequence'::regclass, v_far + v_renumbered, true);

  -- (v_horizon, v_far] holds no event and never will (the sequence is
  -- past it, and no writer that took a number in it is running): one
  -- proven gap, passed here. Gaps recorded above the old horizon were in
  -- it.
  DELETE FROM public.riverbus_gap;
  UPDATE public.riverbus_horizon SET horizon = v_far, timeline = v_timeline, system_identifier = v_system,
    updated_at = now();

  SELECT CASE WHEN q.is_called THEN q.last_value ELSE q.last_value - 1 END INTO v_job_last
    FROM public.river_job_id_seq q;
  v_job_far := v_job_last + 4294967296;
  PERFORM setval('public.river_job_id_seq'::regclass, v_job_far, true);

  -- A riverbus pool's job running here was fetched on the old timeline:
  -- the guard refused every fetch on this one until now. Its completion,
  -- and its lane's hand-off, may be lost with the old primary, and its
  -- worker, if it still runs it, is on a connection that has since failed
  -- over. River's rescuer would retry it after RescueStuckJobsAfter
  -- (minutes by default, holding an ordered pool's lane all along): it is
  -- retried now, as the rescuer would (its attempt stays counted; out of
  -- attempts, it is discarded; a cancel asked for is honoured), with an
  -- error that says why. Retryable, it keeps its lane; the lane sweeper
  -- makes it available at once.
  UPDATE public.river_job j SET
    state = CASE
      WHEN j.metadata ? 'cancel_attempted_at' THEN 'cancelled'
      WHEN j.attempt >= j.max_attempts THEN 'discarded'
      ELSE 'retryable' END::public.river_job_state,
    finalized_at = CASE WHEN j.metadata ? 'cancel_attempted_at' OR j.attempt >= j.max_attempts THEN now() END,
    scheduled_at = CASE WHEN j.metadata ? 'cancel_attempted_at' OR j.attempt >= j.max_attempts THEN j.scheduled_at ELSE now() END,
    errors = coalesce(j.errors, '{}') || jsonb_build_object('at', now(), 'attempt', j.attempt,
      'error', format('riverbus: the database failed over (WAL timeline %s to %s) while this attempt ran; retried at once, as River''s rescuer would, because its completion may be lost with the old primary', v_old_timeline, v_timeline),
      'trace', '')
  WHERE j.state = 'running' AND j.kind IN (SELECT p.name FROM public.riverbus_pool p);
  GET DIAGNOSTICS v_rescued = ROW_COUNT;

  INSERT INTO public.riverbus_failover (old_timeline, new_timeline, old_system_identifier, new_system_identifier,
    horizon_before, horizon_after, sequence_before, events_renumbered, job_id_before, job_id_after, jobs_rescued)
  VALUES (v_old_timeline, v_timeline, v_old_system, v_system, v_horizon, v_far, v_last, v_renumbered,
    v_job_last, v_job_far, v_rescued)
  RETURNING * INTO v_row;
  PERFORM set_config('riverbus.timeline_fence', 'off', true);
  RETURN NEXT v_row;
END
$$;

--
-- Name: riverbus_horizon_lock_holders(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_horizon_lock_holders() RETURNS TABLE(pid integer, role text, application_name text, state text, state_for double precision)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  SELECT l.pid, coalesce(a.usename::text, ''), coalesce(a.application_name, ''), coalesce(a.state, ''),
    coalesce(extract(epoch FROM clock_timestamp() - a.state_change), 0)::float8
  FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
  WHERE l.locktype = 'relation' AND l.granted
    AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
    AND l.relation = 'riverbus_private_public.riverbus_horizon_lock'::regclass
  ORDER BY l.pid
$$;

--
-- Name: riverbus_horizon_missing(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_horizon_missing() RETURNS bigint
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
  RAISE EXCEPTION 'riverbus_horizon has no row: the horizon cannot move and no pool is fanned out'
    USING ERRCODE = 'no_data_found',
      HINT = 'Recreate it with "riverbus repair horizon" (fanout.RepairHorizon), as the schema owner; it is safe while riverbus runs.';
END
$$;

--
-- Name: riverbus_horizon_try_lock(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_horizon_try_lock() RETURNS boolean
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
  LOCK TABLE riverbus_private_public.riverbus_horizon_lock IN EXCLUSIVE MODE NOWAIT;
  RETURN true;
EXCEPTION WHEN lock_not_available THEN
  RETURN false;
END
$$;

--
-- Name: riverbus_job_back_to_work(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_job_back_to_work() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
  IF OLD.state = 'discarded' AND NEW.state NOT IN ('cancelled', 'completed', 'discarded') THEN
    DELETE FROM public.riverbus_dead_letter WHERE job_id = NEW.id;
  END IF;
  IF NEW.metadata ? 'riverbus_lane' AND NEW.state IN ('available', 'retryable', 'running', 'scheduled')
    AND OLD.state IN ('cancelled', 'completed', 'discarded', 'pending')
    AND current_setting('riverbus.lane_release', true) IS DISTINCT FROM 'on'
  THEN
    NEW.state := 'pending';
  END IF;
  RETURN NEW;
END
$$;

--
-- Name: riverbus_lane_bucket(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_lane_bucket(lane text) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT pg_catalog.hashtext(lane) OPERATOR(pg_catalog.&) 127 $$;

--
-- Name: riverbus_lane_finished(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_lane_finished() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    PERFORM public.riverbus_release_lane(OLD.kind, OLD.metadata->>'riverbus_lane');
    RETURN NULL;
  END IF;
  -- A dead letter in a pool that blocks on dead letters keeps its lane.
  IF NEW.state = 'discarded' AND EXISTS (
    SELECT 1 FROM public.riverbus_pool WHERE name = NEW.kind AND on_dead_letter = 'block'
  ) THEN
    RETURN NULL;
  END IF;
  PERFORM public.riverbus_release_lane(NEW.kind, NEW.metadata->>'riverbus_lane');
  RETURN NULL;
END
$$;

--
-- Name: riverbus_lane_lock_class(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_lane_lock_class(pool text) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$ SELECT hashtext('riverbus.lane:' || pool) $$;

--
-- Name: riverbus_lane_lock_rows(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_lane_lock_rows() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
  INSERT INTO public.riverbus_lane_lock (pool, bucket)
  SELECT NEW.name, b FROM generate_series(0, 127) AS b
  ON CONFLICT DO NOTHING;
  RETURN NULL;
END
$$;

--
-- Name: riverbus_lanes_finished(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_lanes_finished() RETURNS trigger
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
  PERFORM public.riverbus_release_lanes(array_agg(n.kind), array_agg(n.metadata->>'riverbus_lane'))
  FROM riverbus_job_new n JOIN riverbus_job_old o ON o.id = n.id
  WHERE n.metadata ? 'riverbus_lane'
    AND ((n.state IN ('cancelled', 'completed', 'discarded')
      AND o.state NOT IN ('cancelled', 'completed', 'discarded')
      -- A dead letter in a pool that blocks on dead letters keeps its lane.
      AND NOT (n.state = 'discarded' AND EXISTS (
        SELECT 1 FROM public.riverbus_pool p WHERE p.name = n.kind AND p.on_dead_letter = 'block')))
    OR (n.state = 'pending' AND o.state <> 'pending'))
  HAVING count(*) > 0;
  RETURN NULL;
END
$$;

--
-- Name: riverbus_private_schema(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_private_schema() RETURNS text
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$ SELECT 'riverbus_private_public'::text $$;

--
-- Name: riverbus_queue_paused(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_queue_paused() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET lock_timeout TO '30s'
    AS $$
DECLARE
  v_status text := CASE WHEN NEW.paused_at IS NULL THEN 'active' ELSE 'paused' END;
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.paused_at IS NULL
      AND EXISTS (SELECT 1 FROM public.riverbus_pool p WHERE p.queue = NEW.name)
      AND NOT EXISTS (SELECT 1 FROM public.riverbus_pool p WHERE p.queue = NEW.name AND p.status <> 'paused')
    THEN
      NEW.paused_at := now();
    END IF;
    RETURN NEW;
  END IF;
  UPDATE public.riverbus_pool SET status = v_status, updated_at = now()
  WHERE queue = NEW.name AND status <> v_status;
  RETURN NULL;
END
$$;

--
-- Name: riverbus_release_lane(text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_release_lane(p_kind text, p_lane text) RETURNS bigint
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$ SELECT nullif(public.riverbus_release_lanes(ARRAY[p_kind], ARRAY[p_lane]), 0) $$;

--
-- Name: riverbus_release_lanes(text[], text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_release_lanes(p_kinds text[], p_lanes text[]) RETURNS bigint
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    SET lock_timeout TO '5s'
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
  released bigint;
BEGIN
  -- Shared, in bucket order: a fan-out batch deciding pending-or-available
  -- for these lanes holds them exclusive, so this waits for it to commit.
  -- Row locks of riverbus_lane_lock, which only riverbus_worker (and the
  -- owner) may take; the wait is bounded by the function's lock_timeout.
  PERFORM count(*) FROM (
    SELECT 1 FROM public.riverbus_lane_lock ll
    WHERE (ll.pool, ll.bucket) IN (SELECT k, public.riverbus_lane_bucket(l) FROM unnest(p_kinds, p_lanes) AS u(k, l))
    ORDER BY ll.pool, ll.bucket
    FOR SHARE OF ll
  ) s;
  -- Transaction-local, and rolled back with a failed statement's
  -- subtransaction; reset below.
  PERFORM set_config('riverbus.lane_release', 'on', true);
  -- A new statement after the locks: it sees every batch committed before.
  WITH lanes AS (
    SELECT DISTINCT k AS kind, l AS lane FROM unnest(p_kinds, p_lanes) AS u(k, l)
  ),
  free AS (
    SELECT x.kind, x.lane FROM lanes x
    WHERE NOT EXISTS (
      SELECT 1 FROM public.river_job j
      WHERE j.kind = x.kind AND j.metadata ? 'riverbus_lane' AND j.metadata->>'riverbus_lane' = x.lane
        AND j.state IN ('available', 'running', 'retryable', 'scheduled'))
    AND NOT EXISTS (
      SELECT 1 FROM public.riverbus_dead_letter d JOIN public.riverbus_pool p ON p.name = d.pool
      WHERE d.pool = x.kind AND d.lane = x.lane AND p.on_dead_letter = 'block')
  ),
  -- Each free lane's lowest pending job, looked up once.
  next AS (
    SELECT n.id FROM free f CROSS JOIN LATERAL (
      SELECT j.id FROM public.river_job j
      WHERE j.kind = f.kind AND j.metadata ? 'riverbus_lane' AND j.metadata->>'riverbus_lane' = f.lane
        AND j.state NOT IN ('cancelled', 'completed', 'discarded') AND j.state = 'pending'
      ORDER BY (CASE WHEN j.args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (j.args->>'global_sequence')::bigint END), j.id
      LIMIT 1
    ) n
  ),
  made AS (
    UPDATE public.river_job j SET state = 'available', scheduled_at = now()
    WHERE j.id = ANY (ARRAY(SELECT id FROM next)) AND j.state = 'pending'
    RETURNING j.queue
  ),
  queues AS (
    SELECT queue, count(*) AS n FROM made GROUP BY queue
  )
  -- River's own insert notification, so a worker fetches them at once.
  SELECT coalesce(sum(n), 0), count(pg_notify('public' || '.river_insert', json_build_object('queue', queue)::text))
  INTO released FROM queues;
  PERFORM set_config('riverbus.lane_release', 'off', true);
  RETURN released;
END
$_$;

--
-- Name: riverbus_rescue_retry(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_rescue_retry() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
  base_secs double precision;
  factor double precision;
  max_secs double precision;
  jitter double precision;
BEGIN
  IF NEW.errors IS NOT NULL AND cardinality(NEW.errors) > 0
    AND NEW.errors[cardinality(NEW.errors)]->>'error' = 'Stuck job rescued by JobRescuer'
  THEN
    SELECT extract(epoch FROM p.retry_base), p.retry_factor, extract(epoch FROM p.retry_max_delay), p.retry_jitter
      INTO base_secs, factor, max_secs, jitter
      FROM public.riverbus_pool p WHERE p.name = NEW.kind;
    IF FOUND THEN
      NEW.state := 'retryable';
      NEW.finalized_at := NULL;
      NEW.scheduled_at := now() + make_interval(secs =>
        least(base_secs * power(factor, least(cardinality(NEW.errors) - 1, 300)), max_secs) * (1 - jitter * random()));
    END IF;
  END IF;
  RETURN NEW;
END
$$;

--
-- Name: riverbus_retention_holds(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_retention_holds() RETURNS TABLE(rule text, holder text, floor bigint)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
  SELECT 'horizon', '', coalesce((SELECT h.horizon FROM public.riverbus_horizon h), 0)
  UNION ALL
  SELECT 'pool', p.name, LEAST(p.cursor_seq, coalesce(pc.checkpoint_seq, p.start_after),
    (SELECT min((CASE WHEN j.args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (j.args->>'global_sequence')::bigint END)) - 1
     FROM public.river_job j WHERE j.kind = p.name AND j.state NOT IN ('cancelled', 'completed', 'discarded')))
  FROM public.riverbus_pool p LEFT JOIN public.riverbus_pool_checkpoint pc ON pc.pool = p.name
  UNION ALL
  (SELECT 'skipped', s.first_sequence || '-' || s.last_sequence, s.first_sequence - 1
   FROM public.riverbus_skipped s ORDER BY s.first_sequence LIMIT 1)
  UNION ALL
  (SELECT 'late', l.sequence::text, l.sequence - 1 FROM public.riverbus_late l ORDER BY l.sequence LIMIT 1)
  UNION ALL
  (SELECT 'dead letter', d.pool || ' job ' || d.job_id, d.global_sequence - 1
   FROM public.riverbus_dead_letter d
   WHERE d.args ? 'undeliverable' AND d.global_sequence IS NOT NULL
   ORDER BY d.global_sequence LIMIT 1)
  UNION ALL
  SELECT 'no pools', '', r.trimmed_through FROM public.riverbus_retention r
  WHERE NOT EXISTS (SELECT 1 FROM public.riverbus_pool)
$_$;

--
-- Name: riverbus_retention_start_lock(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_retention_start_lock() RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
  LOCK TABLE riverbus_private_public.riverbus_retention_lock IN ROW EXCLUSIVE MODE;
END
$$;

--
-- Name: riverbus_retention_step(bigint, timestamp with time zone, interval, integer, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_retention_step(p_from bigint, p_now timestamp with time zone, p_keep interval, p_limit integer, p_apply boolean) RETURNS TABLE(from_sequence bigint, through_sequence bigint, events bigint, oldest_at timestamp with time zone, newest_at timestamp with time zone, floor bigint, stopped_by text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
  pol public.riverbus_retention;
  v_keep interval;
  v_from bigint;
  v_floor bigint;
  v_cutoff timestamptz;
  v_n bigint;
  v_max bigint;
  v_stop bigint;
  v_why text;
  v_through bigint;
  v_deleted bigint;
BEGIN
  IF p_limit IS NULL OR p_limit < 1 OR p_limit > 100000 THEN
    RAISE EXCEPTION 'riverbus_retention_step: p_limit must be between 1 and 100000, got %', p_limit;
  END IF;
  IF p_apply THEN
    -- Before anything is read: the statements below then see every pool
    -- create or reset that committed before the lock was granted.
    LOCK TABLE riverbus_private_public.riverbus_retention_lock IN SHARE ROW EXCLUSIVE MODE;
    SELECT * INTO pol FROM public.riverbus_retention;
    v_keep := CASE WHEN pol.enabled THEN pol.keep END;
    v_from := pol.trimmed_through;
  ELSE
    SELECT * INTO pol FROM public.riverbus_retention;
    v_keep := coalesce(p_keep, CASE WHEN pol.enabled THEN pol.keep END);
    v_from := GREATEST(coalesce(p_from, 0), pol.trimmed_through);
  END IF;
  SELECT min(h.floor) INTO v_floor FROM public.riverbus_retention_holds() h;
  IF v_keep IS NULL THEN
    RETURN QUERY SELECT v_from, v_from, 0::bigint, NULL::timestamptz, NULL::timestamptz, v_floor, 'disabled'::text;
    RETURN;
  END IF;
  IF v_floor <= v_from THEN
    RETURN QUERY SELECT v_from, v_from, 0::bigint, NULL::timestamptz, NULL::timestamptz, v_floor, 'floor'::text;
    RETURN;
  END IF;
  v_cutoff := coalesce(p_now, now()) - v_keep;

  -- The candidates, through the primary key: at most p_limit rows, so a
  -- step costs the same however long the log is. An event's keep time is
  -- when it was appended (migration 019), or for an event appended before
  -- that migration, the earlier of its occurred_at and the migration. The
  -- transaction rule probes each distinct transaction once, for its last
  -- event, through (transaction_id, global_sequence) backwards.
  WITH b AS MATERIALIZED (
    SELECT e.global_sequence AS seq, coalesce(e.appended_at, LEAST(e.occurred_at, pol.appended_at_since)) AS kept_since,
      e.transaction_id
    FROM public.riverbus_event e
    WHERE e.global_sequence > v_from AND e.global_sequence <= v_floor
    ORDER BY e.global_sequence LIMIT p_limit
  ), x AS MATERIALIZED (
    SELECT t.transaction_id,
      (SELECT max(e.global_sequence) FROM public.riverbus_event e WHERE e.transaction_id = t.transaction_id) AS last
    FROM (SELECT DISTINCT b.transaction_id FROM b) t
  ), s AS (
    SELECT b.seq, CASE WHEN b.kept_since > v_cutoff THEN 'keep' WHEN x.last > v_floor THEN 'transaction' END AS why
    FROM b JOIN x ON x.transaction_id = b.transaction_id
  )
  SELECT (SELECT count(*) FROM s), (SELECT max(seq) FROM s), f.seq, f.why
  INTO v_n, v_max, v_stop, v_why
  FROM (SELECT NULL) o LEFT JOIN LATERAL (SELECT seq, why FROM s WHERE why IS NOT NULL ORDER BY seq LIMIT 1) f ON true;

  IF v_stop IS NOT NULL THEN
    v_through := v_stop - 1;
  ELSIF v_n >= p_limit THEN
    v_through := v_max;
    v_why := 'batch';
  ELSE
    v_through := v_floor;
    v_why := 'floor';
  END IF;

  IF p_apply AND v_through > v_from THEN
    -- A transaction's recorded command (riverbus_command) goes with the
    -- last of its events: the batch that deletes it (a transaction below
    -- the floor may span two batches).
    WITH d AS (
      DELETE FROM public.riverbus_event e WHERE e.global_sequence > v_from AND e.global_sequence <= v_through
      RETURNING coalesce(e.appended_at, LEAST(e.occurred_at, pol.appended_at_since)) AS kept_since, e.transaction_id
    ), c AS (
      DELETE FROM public.riverbus_command c
      WHERE c.transaction_id IN (SELECT DISTINCT d.transaction_id FROM d)
        AND NOT EXISTS (SELECT 1 FROM public.riverbus_event e
          WHERE e.transaction_id = c.transaction_id AND e.global_sequence > v_through)
    )
    SELECT count(*), min(d.kept_since), max(d.kept_since) INTO v_deleted, oldest_at, newest_at FROM d;
    UPDATE public.riverbus_retention SET trimmed_through = v_through, events_trimmed = events_trimmed + v_deleted,
      last_trimmed_at = now()
    WHERE trimmed_through < v_through;
    -- The horizon's marks (024) that no rewind may use any more: those
    -- older than the first whose committed_through reaches where the log
    -- now begins (a rewind to a mark below it would owe events deleted
    -- here). Marks are a few seconds apart, so these are the few of the
    -- stretch of history this step deleted, and the index scan stops at
    -- the first mark kept.
    DELETE FROM public.riverbus_horizon_mark m
    WHERE m.at < (SELECT k.at FROM public.riverbus_horizon_mark k WHERE k.committed_through >= v_through ORDER BY k.at LIMIT 1);
  ELSE
    SELECT count(*), min(coalesce(e.appended_at, LEAST(e.occurred_at, pol.appended_at_since))),
      max(coalesce(e.appended_at, LEAST(e.occurred_at, pol.appended_at_since)))
    INTO v_deleted, oldest_at, newest_at
    FROM public.riverbus_event e WHERE e.global_sequence > v_from AND e.global_sequence <= v_through;
  END IF;
  RETURN QUERY SELECT v_from, GREATEST(v_through, v_from), v_deleted, oldest_at, newest_at, v_floor, v_why;
END
$$;

--
-- Name: riverbus_schema_check(integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_schema_check(code integer) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
  v_schema integer;
  v_needs integer;
BEGIN
  LOCK TABLE riverbus_private_public.riverbus_schema_lock IN ACCESS SHARE MODE;
  -- A statement after the lock, so its snapshot is taken after a migration
  -- that held the lock committed.
  SELECT coalesce(max(m.version), 0), coalesce(max(coalesce(m.oldest_code, m.version)), 0)
    INTO v_schema, v_needs FROM public.riverbus_migration m;
  IF v_needs > code THEN
    RAISE EXCEPTION 'riverbus schema version % needs code that knows version % or newer; this code knows %', v_schema, v_needs, code
      USING ERRCODE = '55RBV',
        DETAIL = format('schema=%s needs=%s code=%s', v_schema, v_needs, code),
        HINT = 'replace this process with a build that knows the schema: it stops delivering';
  END IF;
END
$$;

--
-- Name: riverbus_server_timeline(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_server_timeline() RETURNS bigint
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  SELECT CASE WHEN pg_is_in_recovery() THEN NULL
    ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint END
$$;

--
-- Name: riverbus_tags_valid(text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_tags_valid(tags text[]) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  SELECT COALESCE(pg_catalog.bool_and(t IS NOT NULL AND t OPERATOR(pg_catalog.~) '^[^=]+='
    AND pg_catalog.octet_length(t) OPERATOR(pg_catalog.<=) 1024), true)
  FROM pg_catalog.unnest(tags) AS t
$$;

--
-- Name: riverbus_timeline_guard(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_timeline_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
  v_recorded bigint;
  v_current bigint;
BEGIN
  IF current_setting('riverbus.timeline_fence', true) = 'on' THEN
    RETURN NULL;
  END IF;
  SELECT h.timeline INTO v_recorded FROM public.riverbus_horizon h;
  IF v_recorded IS NULL THEN
    RETURN NULL;
  END IF;
  v_current := public.riverbus_server_timeline();
  IF v_current IS DISTINCT FROM v_recorded THEN
    RAISE EXCEPTION 'riverbus: this server is on WAL timeline %, the horizon was recorded on timeline %: a failover (or a point-in-time recovery) riverbus has not fenced yet; writes to % wait until it has', v_current, v_recorded, TG_TABLE_NAME
      USING ERRCODE = 'object_not_in_prerequisite_state',
        HINT = 'A riverbus fan-out (riverbus run or fanout) fences it before its next horizon round; start one if none runs.';
  END IF;
  RETURN NULL;
END
$$;

--
-- Name: riverbus_undeliverable_rebuild(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.riverbus_undeliverable_rebuild() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
  seqs bigint[];
  events jsonb;
  envelope jsonb;
  still boolean;
BEGIN
  IF NEW.args ? 'sequences' THEN
    seqs := ARRAY(SELECT jsonb_array_elements_text(NEW.args->'sequences')::bigint);
  ELSE
    seqs := ARRAY[(NEW.args->>'global_sequence')::bigint];
  END IF;
  IF (SELECT count(*) FROM public.riverbus_event WHERE global_sequence = ANY (seqs)) <> cardinality(seqs) THEN
    RAISE EXCEPTION 'riverbus: job % is the dead letter of an undeliverable event whose row is gone from riverbus_event; purge it (riverbus dlq purge %)', NEW.id, NEW.id;
  END IF;
  -- Still undeliverable (nobody repaired the event): the retry is refused
  -- and the job stays the dead letter it was (007 says why).
  BEGIN
    events := public.riverbus_event_envelope(seqs);
    IF NEW.args ? 'sequences' THEN
      envelope := (NEW.args - 'undeliverable' - 'sequences') || jsonb_build_object('events', events);
    ELSE
      envelope := (NEW.args - 'undeliverable') || (events->0);
    END IF;
    still := jsonb_path_exists(envelope, 'lax $.**{9999 to last}');
  EXCEPTION WHEN statement_too_complex OR program_limit_exceeded THEN
    still := true;
  END;
  IF still THEN
    NEW.state := 'discarded';
    NEW.args := OLD.args;
    NEW.finalized_at := OLD.finalized_at;
    NEW.scheduled_at := OLD.scheduled_at;
    NEW.max_attempts := OLD.max_attempts;
    NEW.errors := coalesce(OLD.errors, '{}') || jsonb_build_object('at', now(), 'attempt', OLD.attempt,
      'error', 'retry refused: the event is still undeliverable (' || (OLD.args->>'undeliverable') ||
        '); repair it in riverbus_event, then retry');
    RETURN NEW;
  END IF;
  NEW.args := envelope;
  RETURN NEW;
END
$_$;

--
-- Name: river_job; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.river_job (
    id bigint NOT NULL,
    state public.river_job_state DEFAULT 'available'::public.river_job_state NOT NULL,
    attempt smallint DEFAULT 0 NOT NULL,
    max_attempts smallint DEFAULT 25 NOT NULL,
    attempted_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    finalized_at timestamp with time zone,
    scheduled_at timestamp with time zone DEFAULT now() NOT NULL,
    priority smallint DEFAULT 1 NOT NULL,
    args jsonb NOT NULL,
    attempted_by text[],
    errors jsonb[],
    kind text NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    queue text DEFAULT 'default'::text NOT NULL,
    tags character varying(255)[] DEFAULT '{}'::character varying[] NOT NULL,
    unique_key bytea,
    unique_states bit(8),
    CONSTRAINT finalized_or_finalized_at_null CHECK ((((finalized_at IS NULL) AND (state <> ALL (ARRAY['cancelled'::public.river_job_state, 'completed'::public.river_job_state, 'discarded'::public.river_job_state]))) OR ((finalized_at IS NOT NULL) AND (state = ANY (ARRAY['cancelled'::public.river_job_state, 'completed'::public.river_job_state, 'discarded'::public.river_job_state]))))),
    CONSTRAINT kind_length CHECK (((char_length(kind) > 0) AND (char_length(kind) < 128))),
    CONSTRAINT max_attempts_is_positive CHECK ((max_attempts > 0)),
    CONSTRAINT priority_in_range CHECK (((priority >= 1) AND (priority <= 4))),
    CONSTRAINT queue_length CHECK (((char_length(queue) > 0) AND (char_length(queue) < 128)))
);

--
-- Name: river_job_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.river_job_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: river_job_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.river_job_id_seq OWNED BY public.river_job.id;

--
-- Name: river_leader; Type: TABLE; Schema: public; Owner: -
--

CREATE UNLOGGED TABLE public.river_leader (
    elected_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    leader_id text NOT NULL,
    name text DEFAULT 'default'::text NOT NULL,
    CONSTRAINT leader_id_length CHECK (((char_length(leader_id) > 0) AND (char_length(leader_id) < 128))),
    CONSTRAINT name_length CHECK ((name = 'default'::text))
);

--
-- Name: river_migration; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.river_migration (
    line text NOT NULL,
    version bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT line_length CHECK (((char_length(line) > 0) AND (char_length(line) < 128))),
    CONSTRAINT version_gte_1 CHECK ((version >= 1))
);

--
-- Name: river_notification; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.river_notification (
    id bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    payload text NOT NULL,
    topic text NOT NULL,
    CONSTRAINT topic_length CHECK (((length(topic) > 0) AND (length(topic) < 128)))
);

--
-- Name: river_notification_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.river_notification_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: river_notification_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.river_notification_id_seq OWNED BY public.river_notification.id;

--
-- Name: river_queue; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.river_queue (
    name text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    paused_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT CURRENT_TIMESTAMP NOT NULL
);

--
-- Name: riverbus_backfill; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.riverbus_backfill (
    name text NOT NULL,
    type text NOT NULL,
    query text NOT NULL,
    last_id text,
    rows_appended bigint DEFAULT 0 NOT NULL,
    rows_already bigint DEFAULT 0 NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    CONSTRAINT riverbus_backfill_name_length CHECK (((char_length(name) >= 1) AND (char_length(name) <= 200))),
    CONSTRAINT riverbus_backfill_type_length CHECK (((char_length(type) >= 1) AND (char_length(type) <= 255)))
);

--
-- Name: riverbus_command; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.riverbus_command (
    transaction_id xid8 DEFAULT pg_current_xact_id() NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    occurred_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT riverbus_command_metadata_object CHECK ((jsonb_typeof(metadata) = 'object'::text)),
    CONSTRAINT riverbus_command_type_length CHECK (((char_length(type) >= 1) AND (char_length(type) <= 255)))
);

--
-- Name: riverbus_dead_letter; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.riverbus_dead_letter (
    job_id bigint NOT NULL,
    pool text NOT NULL,
    global_sequence bigint,
    queue text NOT NULL,
    args jsonb NOT NULL,
    attempt smallint NOT NULL,
    max_attempts smallint NOT NULL,
    priority smallint NOT NULL,
    errors jsonb DEFAULT '[]'::jsonb NOT NULL,
    discarded_at timestamp with time zone DEFAULT now() NOT NULL,
    lane text,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL
);

--
-- Name: riverbus_event; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.riverbus_event (
    global_sequence bigint NOT NULL,
    event_id uuid DEFAULT gen_random_uuid() NOT NULL,
    type text NOT NULL,
    key text DEFAULT ''::text NOT NULL,
    tags text[] DEFAULT '{}'::text[] NOT NULL,
    data jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    transaction_id xid8 NOT NULL,
    occurred_at timestamp with time zone DEFAULT now() NOT NULL,
    appended_at timestamp with time zone,
    version integer DEFAULT 1 NOT NULL,
    CONSTRAINT riverbus_event_key_length CHECK ((octet_length(key) <= 1024)),
    CONSTRAINT riverbus_event_metadata_object CHECK ((jsonb_typeof(metadata) = 'object'::text)),
    CONSTRAINT riverbus_event_tags_valid CHECK (public.riverbus_tags_valid(tags)),
    CONSTRAINT riverbus_event_type_length CHECK (((char_length(type) >= 1) AND (char_length(type) <= 255)))
);

--
-- Name: riverbus_event_global_sequence; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.riverbus_event_global_sequence
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: riverbus_failover_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.riverbus_failover ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.riverbus_failover_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: riverbus_gap; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.riverbus_gap (
    first_sequence bigint NOT NULL,
    last_sequence bigint NOT NULL,
    xid_bound xid8 NOT NULL,
    first_seen_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT riverbus_gap_range CHECK ((last_sequence >= first_sequence))
);

--
-- Name: riverbus_horizon; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.riverbus_horizon (
    id boolean DEFAULT true NOT NULL,
    horizon bigint DEFAULT 0 NOT NULL,
    gaps_proven_dead bigint DEFAULT 0 NOT NULL,
    gaps_skipped bigint DEFAULT 0 NOT NULL,
    late_events bigint DEFAULT 0 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    timeline bigint,
    system_identifier bigint,
    CONSTRAINT riverbus_horizon_nonnegative CHECK ((horizon >= 0)),
    CONSTRAINT riverbus_horizon_single_row CHECK (id)
);

--
-- Name: COLUMN riverbus_horizon.timeline; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.riverbus_horizon.timeline IS 'The WAL timeline of the server the horizon was last fenced on (riverbus_failover_fence); NULL: not yet recorded';

--
-- Name: riverbus_horizon_mark; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.riverbus_horizon_mark (
    at timestamp with time zone NOT NULL,
    committed_through bigint NOT NULL,
    n bigint NOT NULL
);

--
-- Name: riverbus_horizon_mark_n_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.riverbus_horizon_mark ALTER COLUMN n ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.riverbus_horizon_mark_n_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: riverbus_lane_lock; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.riverbus_lane_lock (
    pool text NOT NULL,
    bucket integer NOT NULL,
    CONSTRAINT riverbus_lane_lock_bucket CHECK (((bucket >= 0) AND (bucket <= 127)))
);

--
-- Name: riverbus_late; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.riverbus_late (
    sequence bigint NOT NULL,
    late_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: riverbus_migration; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.riverbus_migration (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL,
    oldest_code integer,
    CONSTRAINT riverbus_migration_check CHECK (((oldest_code > 0) AND (oldest_code < version)))
);

--
-- Name: riverbus_pool; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.riverbus_pool (
    name text NOT NULL,
    queue text DEFAULT 'default'::text NOT NULL,
    event_types text[] DEFAULT '{}'::text[] NOT NULL,
    tags text[] DEFAULT '{}'::text[] NOT NULL,
    max_attempts smallint DEFAULT 25 NOT NULL,
    priority smallint DEFAULT 1 NOT NULL,
    start_after bigint NOT NULL,
    status text DEFAULT 'active'::text NOT NULL,
    cursor_seq bigint NOT NULL,
    events_fanned_out bigint DEFAULT 0 NOT NULL,
    late_events_delivered bigint DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    ordering text DEFAULT 'none'::text NOT NULL,
    on_dead_letter text DEFAULT 'release'::text NOT NULL,
    "grouping" text DEFAULT 'none'::text NOT NULL,
    retry_base interval DEFAULT '00:00:01'::interval NOT NULL,
    retry_factor double precision DEFAULT 2 NOT NULL,
    retry_max_delay interval DEFAULT '00:03:00'::interval NOT NULL,
    retry_jitter double precision DEFAULT 0.1 NOT NULL,
    CONSTRAINT riverbus_pool_grouping CHECK (("grouping" = ANY (ARRAY['none'::text, 'transaction'::text]))),
    CONSTRAINT riverbus_pool_max_attempts CHECK (((max_attempts >= 1) AND (max_attempts <= 1000))),
    CONSTRAINT riverbus_pool_on_dead_letter CHECK ((on_dead_letter = ANY (ARRAY['release'::text, 'block'::text]))),
    CONSTRAINT riverbus_pool_ordering CHECK ((ordering = ANY (ARRAY['none'::text, 'key'::text, 'global'::text]))),
    CONSTRAINT riverbus_pool_priority CHECK (((priority >= 1) AND (priority <= 4))),
    CONSTRAINT riverbus_pool_queue_valid CHECK (((queue ~ '^[a-z0-9]+([_|-]?[a-z0-9]+)*$'::text) AND (char_length(queue) <= 64))),
    CONSTRAINT riverbus_pool_retry_base CHECK ((retry_base >= '00:00:00.001'::interval)),
    CONSTRAINT riverbus_pool_retry_factor CHECK (((retry_factor >= (1)::double precision) AND (retry_factor <= (10)::double precision))),
    CONSTRAINT riverbus_pool_retry_jitter CHECK (((retry_jitter >= (0)::double precision) AND (retry_jitter <= (1)::double precision))),
    CONSTRAINT riverbus_pool_retry_max_delay CHECK ((retry_max_delay <= '7 days'::interval)),
    CONSTRAINT riverbus_pool_retry_max_delay_base CHECK ((retry_max_delay >= retry_base)),
    CONSTRAINT riverbus_pool_start_after CHECK ((start_after >= 0)),
    CONSTRAINT riverbus_pool_status CHECK ((status = ANY (ARRAY['active'::text, 'paused'::text]))),
    CONSTRAINT riverbus_pool_tags_valid CHECK (public.riverbus_tags_valid(tags))
);

--
-- Name: riverbus_pool_checkpoint; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.riverbus_pool_checkpoint (
    pool text NOT NULL,
    checkpoint_seq bigint NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: riverbus_pool_late; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.riverbus_pool_late (
    pool text NOT NULL,
    sequence bigint NOT NULL,
    handled_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: riverbus_pool_start; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.riverbus_pool_start (
    pool text NOT NULL,
    group_floor bigint NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT riverbus_pool_start_group_floor CHECK ((group_floor >= 0))
);

--
-- Name: riverbus_process; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.riverbus_process (
    id text NOT NULL,
    name text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    started_at timestamp with time zone NOT NULL,
    reported_at timestamp with time zone NOT NULL,
    report_interval interval NOT NULL,
    fanout boolean NOT NULL,
    queues jsonb DEFAULT '{}'::jsonb NOT NULL,
    CONSTRAINT riverbus_process_id_length CHECK (((char_length(id) >= 1) AND (char_length(id) <= 128)))
)
WITH (fillfactor='50');

--
-- Name: riverbus_process_error; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.riverbus_process_error (
    process_id text NOT NULL,
    operation text NOT NULL,
    subject text DEFAULT ''::text NOT NULL,
    count bigint NOT NULL,
    since timestamp with time zone NOT NULL,
    last_at timestamp with time zone NOT NULL,
    last_error text NOT NULL
)
WITH (fillfactor='50');

--
-- Name: riverbus_retention; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.riverbus_retention (
    id boolean DEFAULT true NOT NULL,
    enabled boolean DEFAULT false NOT NULL,
    keep interval DEFAULT '00:00:00'::interval NOT NULL,
    trimmed_through bigint DEFAULT 0 NOT NULL,
    events_trimmed bigint DEFAULT 0 NOT NULL,
    last_trimmed_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    appended_at_since timestamp with time zone NOT NULL,
    CONSTRAINT riverbus_retention_keep CHECK ((keep >= '00:00:00'::interval)),
    CONSTRAINT riverbus_retention_single_row CHECK (id),
    CONSTRAINT riverbus_retention_trimmed CHECK ((trimmed_through >= 0))
);

--
-- Name: riverbus_skipped; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.riverbus_skipped (
    first_sequence bigint NOT NULL,
    last_sequence bigint NOT NULL,
    xid_bound xid8 NOT NULL,
    skipped_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT riverbus_skipped_range CHECK ((last_sequence >= first_sequence))
);

--
-- Name: riverbus_append_lock; Type: TABLE; Schema: riverbus_private_public; Owner: -
--

CREATE TABLE riverbus_private_public.riverbus_append_lock (
    bucket integer NOT NULL,
    CONSTRAINT riverbus_append_lock_bucket CHECK (((bucket >= 0) AND (bucket <= 4095)))
);

--
-- Name: riverbus_horizon_lock; Type: TABLE; Schema: riverbus_private_public; Owner: -
--

CREATE TABLE riverbus_private_public.riverbus_horizon_lock (
);

--
-- Name: riverbus_migrate_lock; Type: TABLE; Schema: riverbus_private_public; Owner: -
--

CREATE TABLE riverbus_private_public.riverbus_migrate_lock (
);

--
-- Name: riverbus_retention_lock; Type: TABLE; Schema: riverbus_private_public; Owner: -
--

CREATE TABLE riverbus_private_public.riverbus_retention_lock (
);

--
-- Name: riverbus_schema_lock; Type: TABLE; Schema: riverbus_private_public; Owner: -
--

CREATE TABLE riverbus_private_public.riverbus_schema_lock (
);

--
-- Name: river_job id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.river_job ALTER COLUMN id SET DEFAULT nextval('public.river_job_id_seq'::regclass);

--
-- Name: river_notification id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.river_notification ALTER COLUMN id SET DEFAULT nextval('public.river_notification_id_seq'::regclass);

--
-- Name: river_job river_job_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.river_job
    ADD CONSTRAINT river_job_pkey PRIMARY KEY (id);

--
-- Name: river_leader river_leader_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.river_leader
    ADD CONSTRAINT river_leader_pkey PRIMARY KEY (name);

--
-- Name: river_migration river_migration_pkey1; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.river_migration
    ADD CONSTRAINT river_migration_pkey1 PRIMARY KEY (line, version);

--
-- Name: river_notification river_notification_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.river_notification
    ADD CONSTRAINT river_notification_pkey PRIMARY KEY (id);

--
-- Name: river_queue river_queue_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.river_queue
    ADD CONSTRAINT river_queue_pkey PRIMARY KEY (name);

--
-- Name: riverbus_backfill riverbus_backfill_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_backfill
    ADD CONSTRAINT riverbus_backfill_pkey PRIMARY KEY (name);

--
-- Name: riverbus_command riverbus_command_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_command
    ADD CONSTRAINT riverbus_command_pkey PRIMARY KEY (transaction_id);

--
-- Name: riverbus_dead_letter riverbus_dead_letter_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_dead_letter
    ADD CONSTRAINT riverbus_dead_letter_pkey PRIMARY KEY (job_id);

--
-- Name: riverbus_event riverbus_event_event_id_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_event
    ADD CONSTRAINT riverbus_event_event_id_key UNIQUE (event_id);

--
-- Name: riverbus_event riverbus_event_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_event
    ADD CONSTRAINT riverbus_event_pkey PRIMARY KEY (global_sequence);

--
-- Name: riverbus_event riverbus_event_size; Type: CHECK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE public.riverbus_event
    ADD CONSTRAINT riverbus_event_size CHECK (((pg_column_size(data) + pg_column_size(metadata)) <= 67108864)) NOT VALID;

--
-- Name: riverbus_event riverbus_event_version_valid; Type: CHECK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE public.riverbus_event
    ADD CONSTRAINT riverbus_event_version_valid CHECK (((version >= 1) AND (version <= 10000))) NOT VALID;

--
-- Name: riverbus_failover riverbus_failover_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_failover
    ADD CONSTRAINT riverbus_failover_pkey PRIMARY KEY (id);

--
-- Name: riverbus_gap riverbus_gap_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_gap
    ADD CONSTRAINT riverbus_gap_pkey PRIMARY KEY (first_sequence);

--
-- Name: riverbus_horizon_mark riverbus_horizon_mark_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_horizon_mark
    ADD CONSTRAINT riverbus_horizon_mark_pkey PRIMARY KEY (at);

--
-- Name: riverbus_horizon riverbus_horizon_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_horizon
    ADD CONSTRAINT riverbus_horizon_pkey PRIMARY KEY (id);

--
-- Name: riverbus_lane_lock riverbus_lane_lock_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_lane_lock
    ADD CONSTRAINT riverbus_lane_lock_pkey PRIMARY KEY (pool, bucket);

--
-- Name: riverbus_late riverbus_late_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_late
    ADD CONSTRAINT riverbus_late_pkey PRIMARY KEY (sequence);

--
-- Name: riverbus_migration riverbus_migration_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_migration
    ADD CONSTRAINT riverbus_migration_pkey PRIMARY KEY (version);

--
-- Name: riverbus_pool_checkpoint riverbus_pool_checkpoint_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_pool_checkpoint
    ADD CONSTRAINT riverbus_pool_checkpoint_pkey PRIMARY KEY (pool);

--
-- Name: riverbus_pool_late riverbus_pool_late_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_pool_late
    ADD CONSTRAINT riverbus_pool_late_pkey PRIMARY KEY (pool, sequence);

--
-- Name: riverbus_pool riverbus_pool_name_valid; Type: CHECK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE public.riverbus_pool
    ADD CONSTRAINT riverbus_pool_name_valid CHECK ((name ~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{1,99}$'::text)) NOT VALID;

--
-- Name: riverbus_pool riverbus_pool_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_pool
    ADD CONSTRAINT riverbus_pool_pkey PRIMARY KEY (name);

--
-- Name: riverbus_pool_start riverbus_pool_start_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_pool_start
    ADD CONSTRAINT riverbus_pool_start_pkey PRIMARY KEY (pool);

--
-- Name: riverbus_process_error riverbus_process_error_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_process_error
    ADD CONSTRAINT riverbus_process_error_pkey PRIMARY KEY (process_id, operation, subject);

--
-- Name: riverbus_process riverbus_process_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_process
    ADD CONSTRAINT riverbus_process_pkey PRIMARY KEY (id);

--
-- Name: riverbus_retention riverbus_retention_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_retention
    ADD CONSTRAINT riverbus_retention_pkey PRIMARY KEY (id);

--
-- Name: riverbus_skipped riverbus_skipped_pkey1; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_skipped
    ADD CONSTRAINT riverbus_skipped_pkey1 PRIMARY KEY (first_sequence);

--
-- Name: riverbus_append_lock riverbus_append_lock_pkey; Type: CONSTRAINT; Schema: riverbus_private_public; Owner: -
--

ALTER TABLE ONLY riverbus_private_public.riverbus_append_lock
    ADD CONSTRAINT riverbus_append_lock_pkey PRIMARY KEY (bucket);

--
-- Name: river_job_args_index; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX river_job_args_index ON public.river_job USING gin (args) WHERE (NOT (args ? 'global_sequence'::text));

--
-- Name: river_job_kind; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX river_job_kind ON public.river_job USING btree (kind);

--
-- Name: river_job_metadata_index; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX river_job_metadata_index ON public.river_job USING gin (metadata);

--
-- Name: river_job_prioritized_fetching_index; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX river_job_prioritized_fetching_index ON public.river_job USING btree (state, queue, priority, scheduled_at, id);

--
-- Name: river_job_state_and_finalized_at_index; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX river_job_state_and_finalized_at_index ON public.river_job USING btree (state, finalized_at) WHERE (finalized_at IS NOT NULL);

--
-- Name: river_job_unique_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX river_job_unique_idx ON public.river_job USING btree (unique_key) WHERE ((unique_key IS NOT NULL) AND (unique_states IS NOT NULL) AND public.river_job_state_in_bitmask(unique_states, state));

--
-- Name: river_notification_created_at_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX river_notification_created_at_idx ON public.river_notification USING btree (created_at);

--
-- Name: river_notification_topic_id_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX river_notification_topic_id_idx ON public.river_notification USING btree (topic, id);

--
-- Name: riverbus_dead_letter_lane; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX riverbus_dead_letter_lane ON public.riverbus_dead_letter USING btree (pool, lane) WHERE (lane IS NOT NULL);

--
-- Name: riverbus_dead_letter_pool_sequence; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX riverbus_dead_letter_pool_sequence ON public.riverbus_dead_letter USING btree (pool, global_sequence, job_id);

--
-- Name: riverbus_event_key_sequence; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX riverbus_event_key_sequence ON public.riverbus_event USING btree (key, global_sequence);

--
-- Name: riverbus_event_tags; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX riverbus_event_tags ON public.riverbus_event USING gin (tags);

--
-- Name: riverbus_event_transaction; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX riverbus_event_transaction ON public.riverbus_event USING btree (transaction_id, global_sequence);

--
-- Name: riverbus_event_type_sequence; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX riverbus_event_type_sequence ON public.riverbus_event USING btree (type, global_sequence);

--
-- Name: riverbus_job_lane; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX riverbus_job_lane ON public.river_job USING btree (kind, ((metadata ->> 'riverbus_lane'::text)), (
CASE
    WHEN ((args ->> 'global_sequence'::text) ~ '^[0-9]{1,18}$'::text) THEN ((args ->> 'global_sequence'::text))::bigint
    ELSE NULL::bigint
END), id) WHERE ((metadata ? 'riverbus_lane'::text) AND (state <> ALL (ARRAY['cancelled'::public.river_job_state, 'completed'::public.river_job_state, 'discarded'::public.river_job_state])));

--
-- Name: riverbus_job_lane_busy; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX riverbus_job_lane_busy ON public.river_job USING btree (kind, ((metadata ->> 'riverbus_lane'::text))) WHERE ((metadata ? 'riverbus_lane'::text) AND (state = ANY (ARRAY['available'::public.river_job_state, 'running'::public.river_job_state, 'retryable'::public.river_job_state, 'scheduled'::public.river_job_state])));

--
-- Name: riverbus_job_unfinished_sequence; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX riverbus_job_unfinished_sequence ON public.river_job USING btree (kind, (
CASE
    WHEN ((args ->> 'global_sequence'::text) ~ '^[0-9]{1,18}$'::text) THEN ((args ->> 'global_sequence'::text))::bigint
    ELSE NULL::bigint
END)) WHERE (state <> ALL (ARRAY['cancelled'::public.river_job_state, 'completed'::public.river_job_state, 'discarded'::public.river_job_state]));

--
-- Name: riverbus_pool_late_sequence; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX riverbus_pool_late_sequence ON public.riverbus_pool_late USING btree (sequence);

--
-- Name: riverbus_command riverbus_command_assign; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER riverbus_command_assign BEFORE INSERT OR UPDATE OF transaction_id ON public.riverbus_command FOR EACH ROW EXECUTE FUNCTION public.riverbus_command_assign();

--
-- Name: river_job riverbus_dead_letter_keep; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER riverbus_dead_letter_keep AFTER UPDATE OF state ON public.river_job FOR EACH ROW WHEN (((new.state = 'discarded'::public.river_job_state) AND (old.state IS DISTINCT FROM 'discarded'::public.river_job_state))) EXECUTE FUNCTION public.riverbus_dead_letter_keep();

--
-- Name: river_job riverbus_dead_letter_keep_insert; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER riverbus_dead_letter_keep_insert AFTER INSERT ON public.river_job FOR EACH ROW WHEN ((new.state = 'discarded'::public.river_job_state)) EXECUTE FUNCTION public.riverbus_dead_letter_keep();

--
-- Name: riverbus_event riverbus_event_assign; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER riverbus_event_assign BEFORE INSERT ON public.riverbus_event FOR EACH ROW EXECUTE FUNCTION public.riverbus_event_assign();

--
-- Name: riverbus_event riverbus_event_immutable; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER riverbus_event_immutable BEFORE UPDATE ON public.riverbus_event FOR EACH ROW EXECUTE FUNCTION public.riverbus_event_immutable();

--
-- Name: riverbus_event riverbus_event_notify; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER riverbus_event_notify AFTER INSERT ON public.riverbus_event FOR EACH STATEMENT EXECUTE FUNCTION public.riverbus_event_notify();

--
-- Name: riverbus_event riverbus_event_stamp; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER riverbus_event_stamp BEFORE INSERT ON public.riverbus_event FOR EACH ROW EXECUTE FUNCTION public.riverbus_event_stamp();

--
-- Name: river_job riverbus_job_back_rebuild; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER riverbus_job_back_rebuild BEFORE UPDATE OF state ON public.river_job FOR EACH ROW WHEN (((old.state = 'discarded'::public.river_job_state) AND (new.state <> ALL (ARRAY['cancelled'::public.river_job_state, 'completed'::public.river_job_state, 'discarded'::public.river_job_state])) AND (new.args ? 'undeliverable'::text))) EXECUTE FUNCTION public.riverbus_undeliverable_rebuild();

--
-- Name: river_job riverbus_job_back_to_work; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER riverbus_job_back_to_work BEFORE UPDATE OF state ON public.river_job FOR EACH ROW WHEN ((((old.state = 'discarded'::public.river_job_state) AND (new.state <> ALL (ARRAY['cancelled'::public.river_job_state, 'completed'::public.river_job_state, 'discarded'::public.river_job_state]))) OR ((new.metadata ? 'riverbus_lane'::text) AND (new.state = ANY (ARRAY['available'::public.river_job_state, 'retryable'::public.river_job_state, 'running'::public.river_job_state, 'scheduled'::public.river_job_state])) AND (old.state = ANY (ARRAY['cancelled'::public.river_job_state, 'completed'::public.river_job_state, 'pending'::public.river_job_state])) AND (current_setting('riverbus.lane_release'::text, true) IS DISTINCT FROM 'on'::text)))) EXECUTE FUNCTION public.riverbus_job_back_to_work();

--
-- Name: river_job riverbus_lane_deleted; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER riverbus_lane_deleted AFTER DELETE ON public.river_job FOR EACH ROW WHEN (((old.metadata ? 'riverbus_lane'::text) AND (old.state <> ALL (ARRAY['cancelled'::public.river_job_state, 'completed'::public.river_job_state, 'discarded'::public.river_job_state, 'pending'::public.river_job_state])))) EXECUTE FUNCTION public.riverbus_lane_finished();

--
-- Name: river_job riverbus_lane_finished; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER riverbus_lane_finished AFTER UPDATE ON public.river_job REFERENCING OLD TABLE AS riverbus_job_old NEW TABLE AS riverbus_job_new FOR EACH STATEMENT EXECUTE FUNCTION public.riverbus_lanes_finished();

--
-- Name: riverbus_pool riverbus_lane_lock_rows; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER riverbus_lane_lock_rows AFTER INSERT ON public.riverbus_pool FOR EACH ROW EXECUTE FUNCTION public.riverbus_lane_lock_rows();

--
-- Name: river_queue riverbus_queue_paused; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER riverbus_queue_paused AFTER UPDATE OF paused_at ON public.river_queue FOR EACH ROW WHEN ((old.paused_at IS DISTINCT FROM new.paused_at)) EXECUTE FUNCTION public.riverbus_queue_paused();

--
-- Name: river_queue riverbus_queue_paused_insert; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER riverbus_queue_paused_insert BEFORE INSERT ON public.river_queue FOR EACH ROW EXECUTE FUNCTION public.riverbus_queue_paused();

--
-- Name: river_job riverbus_rescue_retry; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER riverbus_rescue_retry BEFORE UPDATE OF state ON public.river_job FOR EACH ROW WHEN (((old.state = 'running'::public.river_job_state) AND (new.state = 'discarded'::public.river_job_state) AND (new.attempt < new.max_attempts))) EXECUTE FUNCTION public.riverbus_rescue_retry();

--
-- Name: river_job riverbus_timeline_guard; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER riverbus_timeline_guard BEFORE INSERT OR UPDATE ON public.river_job FOR EACH STATEMENT EXECUTE FUNCTION public.riverbus_timeline_guard();

--
-- Name: riverbus_horizon riverbus_timeline_guard; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER riverbus_timeline_guard BEFORE UPDATE ON public.riverbus_horizon FOR EACH STATEMENT EXECUTE FUNCTION public.riverbus_timeline_guard();

--
-- Name: riverbus_lane_lock riverbus_lane_lock_pool_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_lane_lock
    ADD CONSTRAINT riverbus_lane_lock_pool_fkey FOREIGN KEY (pool) REFERENCES public.riverbus_pool(name) ON UPDATE CASCADE ON DELETE CASCADE;

--
-- Name: riverbus_pool_checkpoint riverbus_pool_checkpoint_pool_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_pool_checkpoint
    ADD CONSTRAINT riverbus_pool_checkpoint_pool_fkey FOREIGN KEY (pool) REFERENCES public.riverbus_pool(name) ON UPDATE CASCADE ON DELETE CASCADE;

--
-- Name: riverbus_pool_late riverbus_pool_late_pool_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_pool_late
    ADD CONSTRAINT riverbus_pool_late_pool_fkey FOREIGN KEY (pool) REFERENCES public.riverbus_pool(name) ON UPDATE CASCADE ON DELETE CASCADE;

--
-- Name: riverbus_pool_start riverbus_pool_start_pool_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_pool_start
    ADD CONSTRAINT riverbus_pool_start_pool_fkey FOREIGN KEY (pool) REFERENCES public.riverbus_pool(name) ON UPDATE CASCADE ON DELETE CASCADE;

--
-- Name: riverbus_process_error riverbus_process_error_process_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.riverbus_process_error
    ADD CONSTRAINT riverbus_process_error_process_id_fkey FOREIGN KEY (process_id) REFERENCES public.riverbus_process(id) ON DELETE CASCADE;

--
-- Name: SCHEMA public; Type: ACL; Schema: -; Owner: -
--

GRANT USAGE ON SCHEMA public TO riverbus_app;
GRANT USAGE ON SCHEMA public TO riverbus_worker;

--
-- Name: SCHEMA riverbus_private_public; Type: ACL; Schema: -; Owner: -
--

GRANT USAGE ON SCHEMA riverbus_private_public TO riverbus_worker;

--
-- Name: FUNCTION river_job_state_in_bitmask(bitmask bit, state public.river_job_state); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.river_job_state_in_bitmask(bitmask bit, state public.river_job_state) TO riverbus_worker;

--
-- Name: FUNCTION riverbus_append_if_lock(p_keys bigint[], p_exclusive boolean[]); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.riverbus_append_if_lock(p_keys bigint[], p_exclusive boolean[]) FROM PUBLIC;
GRANT ALL ON FUNCTION public.riverbus_append_if_lock(p_keys bigint[], p_exclusive boolean[]) TO riverbus_app;
GRANT ALL ON FUNCTION public.riverbus_append_if_lock(p_keys bigint[], p_exclusive boolean[]) TO riverbus_worker;

--
-- Name: FUNCTION riverbus_command_assign(); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_command_assign() TO riverbus_worker;

--
-- Name: FUNCTION riverbus_dead_letter_keep(); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_dead_letter_keep() TO riverbus_worker;

--
-- Name: FUNCTION riverbus_event_assign(); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_event_assign() TO riverbus_worker;

--
-- Name: FUNCTION riverbus_event_envelope(p_seqs bigint[]); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_event_envelope(p_seqs bigint[]) TO riverbus_worker;

--
-- Name: FUNCTION riverbus_event_immutable(); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_event_immutable() TO riverbus_worker;

--
-- Name: FUNCTION riverbus_event_notify(); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_event_notify() TO riverbus_worker;

--
-- Name: FUNCTION riverbus_event_renumber(); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_event_renumber() TO riverbus_worker;

--
-- Name: FUNCTION riverbus_event_stamp(); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_event_stamp() TO riverbus_worker;

--
-- Name: TABLE riverbus_failover; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.riverbus_failover TO riverbus_worker;

--
-- Name: FUNCTION riverbus_failover_fence(); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.riverbus_failover_fence() FROM PUBLIC;
GRANT ALL ON FUNCTION public.riverbus_failover_fence() TO riverbus_worker;

--
-- Name: FUNCTION riverbus_horizon_lock_holders(); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_horizon_lock_holders() TO riverbus_worker;

--
-- Name: FUNCTION riverbus_horizon_missing(); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_horizon_missing() TO riverbus_worker;

--
-- Name: FUNCTION riverbus_horizon_try_lock(); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_horizon_try_lock() TO riverbus_worker;

--
-- Name: FUNCTION riverbus_job_back_to_work(); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_job_back_to_work() TO riverbus_worker;

--
-- Name: FUNCTION riverbus_lane_bucket(lane text); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_lane_bucket(lane text) TO riverbus_worker;

--
-- Name: FUNCTION riverbus_lane_finished(); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_lane_finished() TO riverbus_worker;

--
-- Name: FUNCTION riverbus_lane_lock_class(pool text); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_lane_lock_class(pool text) TO riverbus_worker;

--
-- Name: FUNCTION riverbus_lane_lock_rows(); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_lane_lock_rows() TO riverbus_worker;

--
-- Name: FUNCTION riverbus_lanes_finished(); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_lanes_finished() TO riverbus_worker;

--
-- Name: FUNCTION riverbus_private_schema(); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_private_schema() TO riverbus_app;
GRANT ALL ON FUNCTION public.riverbus_private_schema() TO riverbus_worker;

--
-- Name: FUNCTION riverbus_queue_paused(); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.riverbus_queue_paused() FROM PUBLIC;
GRANT ALL ON FUNCTION public.riverbus_queue_paused() TO riverbus_worker;

--
-- Name: FUNCTION riverbus_release_lane(p_kind text, p_lane text); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_release_lane(p_kind text, p_lane text) TO riverbus_worker;

--
-- Name: FUNCTION riverbus_release_lanes(p_kinds text[], p_lanes text[]); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_release_lanes(p_kinds text[], p_lanes text[]) TO riverbus_worker;

--
-- Name: FUNCTION riverbus_rescue_retry(); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_rescue_retry() TO riverbus_worker;

--
-- Name: FUNCTION riverbus_retention_holds(); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_retention_holds() TO riverbus_worker;

--
-- Name: FUNCTION riverbus_retention_start_lock(); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_retention_start_lock() TO riverbus_worker;

--
-- Name: FUNCTION riverbus_retention_step(p_from bigint, p_now timestamp with time zone, p_keep interval, p_limit integer, p_apply boolean); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.riverbus_retention_step(p_from bigint, p_now timestamp with time zone, p_keep interval, p_limit integer, p_apply boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION public.riverbus_retention_step(p_from bigint, p_now timestamp with time zone, p_keep interval, p_limit integer, p_apply boolean) TO riverbus_worker;

--
-- Name: FUNCTION riverbus_schema_check(code integer); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.riverbus_schema_check(code integer) FROM PUBLIC;
GRANT ALL ON FUNCTION public.riverbus_schema_check(code integer) TO riverbus_worker;

--
-- Name: FUNCTION riverbus_server_timeline(); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_server_timeline() TO riverbus_worker;

--
-- Name: FUNCTION riverbus_tags_valid(tags text[]); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_tags_valid(tags text[]) TO riverbus_app;
GRANT ALL ON FUNCTION public.riverbus_tags_valid(tags text[]) TO riverbus_worker;

--
-- Name: FUNCTION riverbus_timeline_guard(); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.riverbus_timeline_guard() FROM PUBLIC;
GRANT ALL ON FUNCTION public.riverbus_timeline_guard() TO riverbus_worker;

--
-- Name: FUNCTION riverbus_undeliverable_rebuild(); Type: ACL; Schema: public; Owner: -
--

GRANT ALL ON FUNCTION public.riverbus_undeliverable_rebuild() TO riverbus_worker;

--
-- Name: TABLE river_job; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.river_job TO riverbus_worker;

--
-- Name: SEQUENCE river_job_id_seq; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,USAGE ON SEQUENCE public.river_job_id_seq TO riverbus_worker;

--
-- Name: TABLE river_leader; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.river_leader TO riverbus_worker;

--
-- Name: TABLE river_migration; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.river_migration TO riverbus_worker;

--
-- Name: TABLE river_notification; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.river_notification TO riverbus_worker;

--
-- Name: SEQUENCE river_notification_id_seq; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,USAGE ON SEQUENCE public.river_notification_id_seq TO riverbus_worker;

--
-- Name: TABLE river_queue; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.river_queue TO riverbus_worker;

--
-- Name: TABLE riverbus_backfill; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,UPDATE ON TABLE public.riverbus_backfill TO riverbus_app;

--
-- Name: TABLE riverbus_command; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT ON TABLE public.riverbus_command TO riverbus_app;
GRANT SELECT ON TABLE public.riverbus_command TO riverbus_worker;

--
-- Name: TABLE riverbus_dead_letter; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.riverbus_dead_letter TO riverbus_worker;

--
-- Name: TABLE riverbus_event; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT ON TABLE public.riverbus_event TO riverbus_app;
GRANT SELECT ON TABLE public.riverbus_event TO riverbus_worker;

--
-- Name: SEQUENCE riverbus_event_global_sequence; Type: ACL; Schema: public; Owner: -
--

GRANT USAGE ON SEQUENCE public.riverbus_event_global_sequence TO riverbus_app;
GRANT SELECT ON SEQUENCE public.riverbus_event_global_sequence TO riverbus_worker;

--
-- Name: TABLE riverbus_gap; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE ON TABLE public.riverbus_gap TO riverbus_worker;

--
-- Name: TABLE riverbus_horizon; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,UPDATE ON TABLE public.riverbus_horizon TO riverbus_worker;

--
-- Name: TABLE riverbus_horizon_mark; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE ON TABLE public.riverbus_horizon_mark TO riverbus_worker;

--
-- Name: TABLE riverbus_lane_lock; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,UPDATE ON TABLE public.riverbus_lane_lock TO riverbus_worker;

--
-- Name: TABLE riverbus_late; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE ON TABLE public.riverbus_late TO riverbus_worker;

--
-- Name: TABLE riverbus_migration; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.riverbus_migration TO riverbus_app;
GRANT SELECT ON TABLE public.riverbus_migration TO riverbus_worker;

--
-- Name: TABLE riverbus_pool; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.riverbus_pool TO riverbus_worker;

--
-- Name: COLUMN riverbus_pool.start_after; Type: ACL; Schema: public; Owner: -
--

GRANT UPDATE(start_after) ON TABLE public.riverbus_pool TO riverbus_worker;

--
-- Name: COLUMN riverbus_pool.status; Type: ACL; Schema: public; Owner: -
--

GRANT UPDATE(status) ON TABLE public.riverbus_pool TO riverbus_worker;

--
-- Name: COLUMN riverbus_pool.cursor_seq; Type: ACL; Schema: public; Owner: -
--

GRANT UPDATE(cursor_seq) ON TABLE public.riverbus_pool TO riverbus_worker;

--
-- Name: COLUMN riverbus_pool.events_fanned_out; Type: ACL; Schema: public; Owner: -
--

GRANT UPDATE(events_fanned_out) ON TABLE public.riverbus_pool TO riverbus_worker;

--
-- Name: COLUMN riverbus_pool.late_events_delivered; Type: ACL; Schema: public; Owner: -
--

GRANT UPDATE(late_events_delivered) ON TABLE public.riverbus_pool TO riverbus_worker;

--
-- Name: COLUMN riverbus_pool.updated_at; Type: ACL; Schema: public; Owner: -
--

GRANT UPDATE(updated_at) ON TABLE public.riverbus_pool TO riverbus_worker;

--
-- Name: TABLE riverbus_pool_checkpoint; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,UPDATE ON TABLE public.riverbus_pool_checkpoint TO riverbus_worker;

--
-- Name: TABLE riverbus_pool_late; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE ON TABLE public.riverbus_pool_late TO riverbus_worker;

--
-- Name: TABLE riverbus_pool_start; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,UPDATE ON TABLE public.riverbus_pool_start TO riverbus_worker;

--
-- Name: TABLE riverbus_process; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.riverbus_process TO riverbus_worker;

--
-- Name: TABLE riverbus_process_error; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.riverbus_process_error TO riverbus_worker;

--
-- Name: TABLE riverbus_retention; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.riverbus_retention TO riverbus_worker;

--
-- Name: TABLE riverbus_skipped; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE ON TABLE public.riverbus_skipped TO riverbus_worker;

--
-- Name: TABLE riverbus_horizon_lock; Type: ACL; Schema: riverbus_private_public; Owner: -
--

GRANT UPDATE ON TABLE riverbus_private_public.riverbus_horizon_lock TO riverbus_worker;

--
-- Name: TABLE riverbus_retention_lock; Type: ACL; Schema: riverbus_private_public; Owner: -
--

GRANT UPDATE ON TABLE riverbus_private_public.riverbus_retention_lock TO riverbus_worker;

--
-- PostgreSQL database dump complete
--

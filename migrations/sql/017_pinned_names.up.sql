-- Every name a riverbus function or trigger resolves is riverbus's own,
-- whoever calls it and whatever its session holds (docs/design.md §1, §2.4).
--
-- PostgreSQL searches the session's temporary schema first for tables,
-- sequences and types, and the caller's search_path (which the caller
-- sets) for everything else. The assign trigger called
-- nextval('riverbus_event_global_sequence') with the inserter's path, so
-- an application login that ran
--   CREATE TEMP SEQUENCE riverbus_event_global_sequence START 1000
-- chose its next event's number: the horizon jumped to it and "proved"
-- the numbers below it dead, so other applications' next events reached
-- no pool. The same holds for every function that names a table, and for
-- operators: a role that may create in a schema on the path (public,
-- before PostgreSQL 15) can plant an operator that is a better match than
-- the built-in one (->> on (jsonb, jsonb) for `args->>'key'`, || on
-- (bigint, bigint)) and have it run by whoever fires the trigger: a
-- worker, River, or the owner, through the SECURITY DEFINER retention
-- step (which ran with search_path = <schema>, pg_temp).
--
-- Now every function falls in one of two kinds:
--   - pinned: SET search_path = pg_catalog, pg_temp, and every riverbus
--     table, type and function it names is qualified with the schema the
--     migrations run in (computed here). pg_catalog comes first, pg_temp
--     last, and no other schema is searched, so no role can put a
--     function or operator in its way; a name left unqualified by mistake
--     resolves to nothing and fails every test.
--   - qualified: the three that run once per row on the append and lane
--     hot paths (riverbus_event_assign, the CHECK's riverbus_tags_valid,
--     riverbus_lane_bucket) name every function and operator as
--     pg_catalog.f or OPERATOR(pg_catalog.op) and every relation with its
--     schema, and keep no SET clause: a SET saves and restores the
--     setting on every call, a share of a per-row trigger's cost that
--     every append would pay, and keeps a SQL function from being
--     inlined into its caller.
-- migrations' TestFunctionsResolveOnlyTheirOwnNames checks every
-- riverbus function is one or the other, and TestPlantedNamesAreNeverUsed
-- runs each one in a session that planted a temporary table or sequence
-- of every riverbus name.
--
-- CREATE OR REPLACE keeps each function's owner and grants; the bodies are
-- those of the migrations named, with their names qualified.

-- Qualified: no relation, so the text needs no schema.
CREATE OR REPLACE FUNCTION riverbus_tags_valid(tags text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT COALESCE(pg_catalog.bool_and(t IS NOT NULL AND t OPERATOR(pg_catalog.~) '^[^=]+='
    AND pg_catalog.octet_length(t) OPERATOR(pg_catalog.<=) 1024), true)
  FROM pg_catalog.unnest(tags) AS t
$$;

CREATE OR REPLACE FUNCTION riverbus_lane_bucket(lane text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT pg_catalog.hashtext(lane) OPERATOR(pg_catalog.&) 127 $$;

-- Pinned, naming no relation: the path alone is enough. riverbus_event_immutable
-- also lets the owner's riverbus_event_renumber (below) move an event's
-- sequence number; only the owner may UPDATE riverbus_event at all.
CREATE OR REPLACE FUNCTION riverbus_event_immutable() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
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

ALTER FUNCTION riverbus_event_notify() SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION riverbus_command_assign() SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION riverbus_horizon_missing() SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION riverbus_lane_lock_class(text) SET search_path = pg_catalog, pg_temp;

-- The rest name riverbus's tables: their text is built with the schema.
-- %1$I is the schema as an identifier, %2$L as a literal (River's
-- notification channel, which River names after the schema); a % of the
-- body is written %%.
DO $migration$
DECLARE
  s name := (SELECT n.nspname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE c.oid = 'riverbus_event'::regclass);
  f text;
BEGIN
  -- 001: the xid first, then the number, from riverbus's own sequence.
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_event_assign() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
  -- The order is the point: the xid first, then the sequence number.
  NEW.transaction_id := pg_catalog.pg_current_xact_id();
  NEW.global_sequence := pg_catalog.nextval(%2$L::pg_catalog.regclass);
  RETURN NEW;
END
$body$$f$, s, format('%I.riverbus_event_global_sequence', s));

  -- 003 (as 004 and 005 left it).
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_dead_letter_keep() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $body$
BEGIN
  INSERT INTO %1$I.riverbus_dead_letter (job_id, pool, global_sequence, queue, args, attempt, max_attempts, priority, errors,
                                    discarded_at, lane, metadata)
  SELECT NEW.id, NEW.kind,
         CASE WHEN NEW.args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (NEW.args->>'global_sequence')::bigint END,
         NEW.queue, NEW.args, NEW.attempt, NEW.max_attempts, NEW.priority,
         coalesce(to_jsonb(NEW.errors), '[]'::jsonb), coalesce(NEW.finalized_at, now()),
         NEW.metadata->>'riverbus_lane', coalesce(NEW.metadata, '{}'::jsonb)
  FROM %1$I.riverbus_pool p WHERE p.name = NEW.kind
  ON CONFLICT (job_id) DO UPDATE SET
    attempt = EXCLUDED.attempt, errors = EXCLUDED.errors, discarded_at = EXCLUDED.discarded_at;
  RETURN NULL;
END
$body$$f$, s);

  -- 005.
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_release_lane(p_kind text, p_lane text) RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $body$ SELECT nullif(%1$I.riverbus_release_lanes(ARRAY[p_kind], ARRAY[p_lane]), 0) $body$$f$, s);

  -- 003: the row trigger of deleted lane jobs.
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_lane_finished() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $body$
BEGIN
  IF TG_OP = 'DELETE' THEN
    PERFORM %1$I.riverbus_release_lane(OLD.kind, OLD.metadata->>'riverbus_lane');
    RETURN NULL;
  END IF;
  -- A dead letter in a pool that blocks on dead letters keeps its lane.
  IF NEW.state = 'discarded' AND EXISTS (
    SELECT 1 FROM %1$I.riverbus_pool WHERE name = NEW.kind AND on_dead_letter = 'block'
  ) THEN
    RETURN NULL;
  END IF;
  PERFORM %1$I.riverbus_release_lane(NEW.kind, NEW.metadata->>'riverbus_lane');
  RETURN NULL;
END
$body$$f$, s);

  -- 016.
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_release_lanes(p_kinds text[], p_lanes text[]) RETURNS bigint
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET lock_timeout = '5s' SET search_path = pg_catalog, pg_temp AS $body$
DECLARE
  released bigint;
BEGIN
  -- Shared, in bucket order: a fan-out batch deciding pending-or-available
  -- for these lanes holds them exclusive, so this waits for it to commit.
  -- Row locks of riverbus_lane_lock, which only riverbus_worker (and the
  -- owner) may take; the wait is bounded by the function's lock_timeout.
  PERFORM count(*) FROM (
    SELECT 1 FROM %1$I.riverbus_lane_lock ll
    WHERE (ll.pool, ll.bucket) IN (SELECT k, %1$I.riverbus_lane_bucket(l) FROM unnest(p_kinds, p_lanes) AS u(k, l))
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
      SELECT 1 FROM %1$I.river_job j
      WHERE j.kind = x.kind AND j.metadata ? 'riverbus_lane' AND j.metadata->>'riverbus_lane' = x.lane
        AND j.state IN ('available', 'running', 'retryable', 'scheduled'))
    AND NOT EXISTS (
      SELECT 1 FROM %1$I.riverbus_dead_letter d JOIN %1$I.riverbus_pool p ON p.name = d.pool
      WHERE d.pool = x.kind AND d.lane = x.lane AND p.on_dead_letter = 'block')
  ),
  -- Each free lane's lowest pending job, looked up once.
  next AS (
    SELECT n.id FROM free f CROSS JOIN LATERAL (
      SELECT j.id FROM %1$I.river_job j
      WHERE j.kind = f.kind AND j.metadata ? 'riverbus_lane' AND j.metadata->>'riverbus_lane' = f.lane
        AND j.state NOT IN ('cancelled', 'completed', 'discarded') AND j.state = 'pending'
      ORDER BY (CASE WHEN j.args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (j.args->>'global_sequence')::bigint END), j.id
      LIMIT 1
    ) n
  ),
  made AS (
    UPDATE %1$I.river_job j SET state = 'available', scheduled_at = now()
    WHERE j.id = ANY (ARRAY(SELECT id FROM next)) AND j.state = 'pending'
    RETURNING j.queue
  ),
  queues AS (
    SELECT queue, count(*) AS n FROM made GROUP BY queue
  )
  -- River's own insert notification, so a worker fetches them at once.
  SELECT coalesce(sum(n), 0), count(pg_notify(%2$L || '.river_insert', json_build_object('queue', queue)::text))
  INTO released FROM queues;
  PERFORM set_config('riverbus.lane_release', 'off', true);
  RETURN released;
END
$body$$f$, s, s);

  -- 009.
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_lanes_finished() RETURNS trigger
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET search_path = pg_catalog, pg_temp AS $body$
BEGIN
  PERFORM %1$I.riverbus_release_lanes(array_agg(n.kind), array_agg(n.metadata->>'riverbus_lane'))
  FROM riverbus_job_new n JOIN riverbus_job_old o ON o.id = n.id
  WHERE n.metadata ? 'riverbus_lane'
    AND ((n.state IN ('cancelled', 'completed', 'discarded')
      AND o.state NOT IN ('cancelled', 'completed', 'discarded')
      -- A dead letter in a pool that blocks on dead letters keeps its lane.
      AND NOT (n.state = 'discarded' AND EXISTS (
        SELECT 1 FROM %1$I.riverbus_pool p WHERE p.name = n.kind AND p.on_dead_letter = 'block')))
    OR (n.state = 'pending' AND o.state <> 'pending'))
  HAVING count(*) > 0;
  RETURN NULL;
END
$body$$f$, s);

  -- 014.
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_rescue_retry() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $body$
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
      FROM %1$I.riverbus_pool p WHERE p.name = NEW.kind;
    IF FOUND THEN
      NEW.state := 'retryable';
      NEW.finalized_at := NULL;
      NEW.scheduled_at := now() + make_interval(secs =>
        least(base_secs * power(factor, least(cardinality(NEW.errors) - 1, 300)), max_secs) * (1 - jitter * random()));
    END IF;
  END IF;
  RETURN NEW;
END
$body$$f$, s);

  -- 009.
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_job_back_to_work() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $body$
BEGIN
  IF OLD.state = 'discarded' AND NEW.state NOT IN ('cancelled', 'completed', 'discarded') THEN
    DELETE FROM %1$I.riverbus_dead_letter WHERE job_id = NEW.id;
  END IF;
  IF NEW.metadata ? 'riverbus_lane' AND NEW.state IN ('available', 'retryable', 'running', 'scheduled')
    AND OLD.state IN ('cancelled', 'completed', 'discarded', 'pending')
    AND current_setting('riverbus.lane_release', true) IS DISTINCT FROM 'on'
  THEN
    NEW.state := 'pending';
  END IF;
  RETURN NEW;
END
$body$$f$, s);

  -- 007.
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_event_envelope(p_seqs bigint[]) RETURNS jsonb
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $body$
  SELECT jsonb_agg(jsonb_build_object('global_sequence', e.global_sequence, 'event_id', e.event_id, 'type', e.type,
           'key', e.key, 'tags', to_jsonb(e.tags), 'data', e.data, 'metadata', e.metadata,
           'occurred_at', e.occurred_at) ORDER BY e.global_sequence)
  FROM %1$I.riverbus_event e WHERE e.global_sequence = ANY(p_seqs)
$body$$f$, s);

  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_undeliverable_rebuild() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $body$
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
  IF (SELECT count(*) FROM %1$I.riverbus_event WHERE global_sequence = ANY (seqs)) <> cardinality(seqs) THEN
    RAISE EXCEPTION 'riverbus: job %% is the dead letter of an undeliverable event whose row is gone from riverbus_event; purge it (riverbus dlq purge %%)', NEW.id, NEW.id;
  END IF;
  -- Still undeliverable (nobody repaired the event): the retry is refused
  -- and the job stays the dead letter it was (007 says why).
  BEGIN
    events := %1$I.riverbus_event_envelope(seqs);
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
$body$$f$, s);

  -- 012.
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_horizon_try_lock() RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $body$
BEGIN
  LOCK TABLE %1$I.riverbus_horizon_lock IN EXCLUSIVE MODE NOWAIT;
  RETURN true;
EXCEPTION WHEN lock_not_available THEN
  RETURN false;
END
$body$$f$, s);

  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_lane_lock_rows() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $body$
BEGIN
  INSERT INTO %1$I.riverbus_lane_lock (pool, bucket)
  SELECT NEW.name, b FROM generate_series(0, 127) AS b
  ON CONFLICT DO NOTHING;
  RETURN NULL;
END
$body$$f$, s);

  -- 015. riverbus_retention_holds runs as the owner when the SECURITY
  -- DEFINER step calls it, so it is held to the same rule.
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_retention_holds() RETURNS TABLE (rule text, holder text, floor bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $body$
  SELECT 'horizon', '', coalesce((SELECT h.horizon FROM %1$I.riverbus_horizon h), 0)
  UNION ALL
  SELECT 'pool', p.name, LEAST(p.cursor_seq, coalesce(pc.checkpoint_seq, p.start_after),
    (SELECT min((CASE WHEN j.args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (j.args->>'global_sequence')::bigint END)) - 1
     FROM %1$I.river_job j WHERE j.kind = p.name AND j.state NOT IN ('cancelled', 'completed', 'discarded')))
  FROM %1$I.riverbus_pool p LEFT JOIN %1$I.riverbus_pool_checkpoint pc ON pc.pool = p.name
  UNION ALL
  (SELECT 'skipped', s.first_sequence || '-' || s.last_sequence, s.first_sequence - 1
   FROM %1$I.riverbus_skipped s ORDER BY s.first_sequence LIMIT 1)
  UNION ALL
  (SELECT 'late', l.sequence::text, l.sequence - 1 FROM %1$I.riverbus_late l ORDER BY l.sequence LIMIT 1)
  UNION ALL
  (SELECT 'dead letter', d.pool || ' job ' || d.job_id, d.global_sequence - 1
   FROM %1$I.riverbus_dead_letter d
   WHERE d.args ? 'undeliverable' AND d.global_sequence IS NOT NULL
   ORDER BY d.global_sequence LIMIT 1)
  UNION ALL
  SELECT 'no pools', '', r.trimmed_through FROM %1$I.riverbus_retention r
  WHERE NOT EXISTS (SELECT 1 FROM %1$I.riverbus_pool)
$body$$f$, s);

  -- 015's SECURITY DEFINER step: it ran with search_path = <schema>,
  -- pg_temp, so where PUBLIC may create in that schema (public before
  -- PostgreSQL 15) any login could plant an operator it resolved, and run
  -- it as the owner. Now it searches pg_catalog only.
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_retention_step(p_from bigint, p_now timestamptz, p_keep interval, p_limit integer, p_apply boolean)
RETURNS TABLE (from_sequence bigint, through_sequence bigint, events bigint, oldest_at timestamptz, newest_at timestamptz,
  floor bigint, stopped_by text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $body$
DECLARE
  pol %1$I.riverbus_retention;
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
    RAISE EXCEPTION 'riverbus_retention_step: p_limit must be between 1 and 100000, got %%', p_limit;
  END IF;
  IF p_apply THEN
    -- Before anything is read: the statements below then see every pool
    -- create or reset that committed before the lock was granted.
    LOCK TABLE %1$I.riverbus_retention_lock IN SHARE ROW EXCLUSIVE MODE;
    SELECT * INTO pol FROM %1$I.riverbus_retention;
    v_keep := CASE WHEN pol.enabled THEN pol.keep END;
    v_from := pol.trimmed_through;
  ELSE
    SELECT * INTO pol FROM %1$I.riverbus_retention;
    v_keep := coalesce(p_keep, CASE WHEN pol.enabled THEN pol.keep END);
    v_from := GREATEST(coalesce(p_from, 0), pol.trimmed_through);
  END IF;
  SELECT min(h.floor) INTO v_floor FROM %1$I.riverbus_retention_holds() h;
  IF v_keep IS NULL THEN
    RETURN QUERY SELECT v_from, v_from, 0::bigint, NULL::timestamptz, NULL::timestamptz, v_floor, 'disabled'::text;
    RETURN;
  END IF;
  IF v_floor <= v_from THEN
    RETURN QUERY SELECT v_from, v_from, 0::bigint, NULL::timestamptz, NULL::timestamptz, v_floor, 'floor'::text;
    RETURN;
  END IF;
  v_cutoff := coalesce(p_now, now()) - v_keep;

  -- The candidates, through the primary key (015 says why this shape).
  WITH b AS MATERIALIZED (
    SELECT e.global_sequence AS seq, e.occurred_at, e.transaction_id FROM %1$I.riverbus_event e
    WHERE e.global_sequence > v_from AND e.global_sequence <= v_floor
    ORDER BY e.global_sequence LIMIT p_limit
  ), x AS MATERIALIZED (
    SELECT t.transaction_id,
      (SELECT max(e.global_sequence) FROM %1$I.riverbus_event e WHERE e.transaction_id = t.transaction_id) AS last
    FROM (SELECT DISTINCT b.transaction_id FROM b) t
  ), s AS (
    SELECT b.seq, CASE WHEN b.occurred_at > v_cutoff THEN 'keep' WHEN x.last > v_floor THEN 'transaction' END AS why
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
    WITH d AS (
      DELETE FROM %1$I.riverbus_event e WHERE e.global_sequence > v_from AND e.global_sequence <= v_through
      RETURNING e.occurred_at, e.transaction_id
    ), c AS (
      DELETE FROM %1$I.riverbus_command c
      WHERE c.transaction_id IN (SELECT DISTINCT d.transaction_id FROM d)
        AND NOT EXISTS (SELECT 1 FROM %1$I.riverbus_event e
          WHERE e.transaction_id = c.transaction_id AND e.global_sequence > v_through)
    )
    SELECT count(*), min(d.occurred_at), max(d.occurred_at) INTO v_deleted, oldest_at, newest_at FROM d;
    UPDATE %1$I.riverbus_retention SET trimmed_through = v_through, events_trimmed = events_trimmed + v_deleted,
      last_trimmed_at = now()
    WHERE trimmed_through < v_through;
  ELSE
    SELECT count(*), min(e.occurred_at), max(e.occurred_at) INTO v_deleted, oldest_at, newest_at
    FROM %1$I.riverbus_event e WHERE e.global_sequence > v_from AND e.global_sequence <= v_through;
  END IF;
  RETURN QUERY SELECT v_from, GREATEST(v_through, v_from), v_deleted, oldest_at, newest_at, v_floor, v_why;
END
$body$$f$, s);

  -- New: the repair of events numbered above the sequence (the horizon's
  -- problem event_above_sequence; docs/operations.md, "What riverbus requires
  -- of the sequence and the triggers"). Such an event did not get its number
  -- from the trigger (a temporary sequence of the same name before this
  -- migration, a row inserted with the trigger disabled): the horizon
  -- holds below it, and the sequence would hand out its number again.
  -- Each one, lowest first, gets the sequence's next number, above every
  -- event the horizon has passed, and keeps everything else (its event
  -- id, its transaction id, its data), so the pools receive it once, at
  -- its new number. A number near 2^63 costs nothing: the sequence goes
  -- on from where it was, not from the planted number. Run as the owner
  -- (only the owner may UPDATE riverbus_event).
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_event_renumber() RETURNS TABLE (old_sequence bigint, new_sequence bigint)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $body$
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
  LOCK TABLE %1$I.riverbus_event IN ROW EXCLUSIVE MODE;
  SELECT CASE WHEN q.is_called THEN q.last_value ELSE q.last_value - 1 END INTO v_last
    FROM %1$I.riverbus_event_global_sequence q;
  SELECT h.horizon INTO v_horizon FROM %1$I.riverbus_horizon h;
  IF v_last < v_horizon THEN
    RAISE EXCEPTION 'riverbus_event_renumber: riverbus_event_global_sequence (last value %%) is below the horizon (%%): new numbers would be ones no pool reads', v_last, v_horizon
      USING HINT = 'Fix the problem sequence_below_horizon first (README, "What riverbus requires of the sequence and the triggers").';
  END IF;
  PERFORM set_config('riverbus.renumber', 'on', true);
  -- The sequence is read again inside the statement, after its snapshot
  -- was taken: every event that snapshot shows above the sequence's last
  -- value got its number from something else than the sequence.
  FOR v_old IN
    SELECT e.global_sequence FROM %1$I.riverbus_event e
    WHERE e.global_sequence > (SELECT CASE WHEN q.is_called THEN q.last_value ELSE q.last_value - 1 END
                               FROM %1$I.riverbus_event_global_sequence q)
    ORDER BY e.global_sequence
  LOOP
    LOOP
      v_new := nextval(%2$L::regclass);
      -- Another planted number the sequence has reached: that one is
      -- renumbered in its turn; this number is burned.
      EXIT WHEN NOT EXISTS (SELECT 1 FROM %1$I.riverbus_event e WHERE e.global_sequence = v_new);
    END LOOP;
    UPDATE %1$I.riverbus_event SET global_sequence = v_new WHERE global_sequence = v_old;
    old_sequence := v_old;
    new_sequence := v_new;
    RETURN NEXT;
  END LOOP;
  PERFORM set_config('riverbus.renumber', 'off', true);
END
$body$$f$, s, format('%I.riverbus_event_global_sequence', s));
END
$migration$;

-- As 004 does for every function of the schema. Workers may call it, and
-- are refused its UPDATE: renumbering is the owner's.
GRANT EXECUTE ON FUNCTION riverbus_event_renumber() TO riverbus_worker;

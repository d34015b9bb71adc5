-- The horizon's functions (docs/design.md §2): the error of a missing horizon
-- row, the round's lock and who holds it, and the failover fence with its
-- guard (§2.8), whose triggers are in triggers.sql.

-- Called where the fan-out reads the horizon, so a missing row stops it
-- with an error that says what to do.
CREATE OR REPLACE FUNCTION riverbus_horizon_missing() RETURNS bigint LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RAISE EXCEPTION 'riverbus_horizon has no row: the horizon cannot move and no pool is fanned out'
    USING ERRCODE = 'no_data_found',
      HINT = 'Recreate it with "riverbus repair horizon" (fanout.RepairHorizon), as the schema owner; it is safe while riverbus runs.';
END
$$;

DO $current$
DECLARE
  s text := current_schema();
  priv text := current_setting('riverbus.private_schema');
BEGIN
  -- A try-lock of the round's table lock (docs/design.md §2.6), in the private
  -- schema: false when another round holds it. The exception block is a
  -- subtransaction, which takes no xid unless it writes.
  EXECUTE format($f$CREATE OR REPLACE FUNCTION %I.riverbus_horizon_try_lock() RETURNS boolean
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $b$
BEGIN
  LOCK TABLE %I.riverbus_horizon_lock IN EXCLUSIVE MODE NOWAIT;
  RETURN true;
EXCEPTION WHEN lock_not_available THEN
  RETURN false;
END
$b$$f$, s, priv);

  -- Who holds the round's lock: a round that keeps finding it taken says
  -- who has it.
  EXECUTE format($f$CREATE OR REPLACE FUNCTION %I.riverbus_horizon_lock_holders()
    RETURNS TABLE (pid integer, role text, application_name text, state text, state_for float8)
    LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $b$
  SELECT l.pid, coalesce(a.usename::text, ''), coalesce(a.application_name, ''), coalesce(a.state, ''),
    coalesce(extract(epoch FROM clock_timestamp() - a.state_change), 0)::float8
  FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
  WHERE l.locktype = 'relation' AND l.granted
    AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
    AND l.relation = %L::regclass
  ORDER BY l.pid
$b$$f$, s, format('%I.riverbus_horizon_lock', priv));

  -- This server's WAL timeline: the first eight hex digits of the WAL file
  -- name of the current insert position. NULL on a standby.
  EXECUTE format($f$CREATE OR REPLACE FUNCTION %1$I.riverbus_server_timeline() RETURNS bigint
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $b$
  SELECT CASE WHEN pg_is_in_recovery() THEN NULL
    ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint END
$b$$f$, s);

  -- The guard: a horizon recorded on another timeline means a failover the
  -- fence has not yet handled; writing a job or moving the horizon then
  -- could reuse a delivered number, so the statement is refused.
  -- SECURITY DEFINER: an application that inserts River jobs need not read
  -- riverbus_horizon.
  EXECUTE format($f$CREATE OR REPLACE FUNCTION %1$I.riverbus_timeline_guard() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $b$
DECLARE
  v_recorded bigint;
  v_current bigint;
BEGIN
  IF current_setting('riverbus.timeline_fence', true) = 'on' THEN
    RETURN NULL;
  END IF;
  SELECT h.timeline INTO v_recorded FROM %1$I.riverbus_horizon h;
  IF v_recorded IS NULL THEN
    RETURN NULL;
  END IF;
  v_current := %1$I.riverbus_server_timeline();
  IF v_current IS DISTINCT FROM v_recorded THEN
    RAISE EXCEPTION 'riverbus: this server is on WAL timeline %%, the horizon was recorded on timeline %%: a failover (or a point-in-time recovery) riverbus has not fenced yet; writes to %% wait until it has', v_current, v_recorded, TG_TABLE_NAME
      USING ERRCODE = 'object_not_in_prerequisite_state',
        HINT = 'A riverbus fan-out (riverbus run or fanout) fences it before its next horizon round; start one if none runs.';
  END IF;
  RETURN NULL;
END
$b$$f$, s);

  -- The fence (docs/design.md §2.8, migration 020 says each step's why). Owner's
  -- rights: it renumbers events and moves River's id sequence. It does
  -- nothing unless the server is not the one the horizon was recorded on,
  -- so a worker may call it at any time.
  EXECUTE format($f$CREATE OR REPLACE FUNCTION %1$I.riverbus_failover_fence() RETURNS SETOF %1$I.riverbus_failover
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = '10s' AS $b$
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
  v_row %1$I.riverbus_failover;
BEGIN
  IF pg_is_in_recovery() THEN
    RETURN; -- a standby writes nothing: nothing to fence
  END IF;
  v_timeline := %1$I.riverbus_server_timeline();
  v_system := (pg_control_system()).system_identifier;
  SELECT h.timeline, h.system_identifier INTO v_old_timeline, v_old_system FROM %1$I.riverbus_horizon h;
  IF NOT FOUND OR (v_old_timeline = v_timeline AND v_old_system = v_system) THEN
    RETURN; -- no horizon row (rounds name its repair), or the same server
  END IF;
  PERFORM set_config('riverbus.timeline_fence', 'on', true);
  IF v_old_timeline IS NULL THEN
    -- Never recorded (a horizon repaired, an install from before this
    -- migration on a standby): nothing is known to fence against.
    UPDATE %1$I.riverbus_horizon SET timeline = v_timeline, system_identifier = v_system;
    PERFORM set_config('riverbus.timeline_fence', 'off', true);
    RETURN;
  END IF;

  -- One fence at a time, and no round beside it (a round takes this lock
  -- NOWAIT and skips).
  LOCK TABLE %2$I.riverbus_horizon_lock IN EXCLUSIVE MODE;
  -- Every appender of this server that took a number before the fence
  -- moves the sequence ends first (an INSERT holds ROW EXCLUSIVE from
  -- before its trigger takes the number until it ends), and the next ones
  -- wait for this transaction: afterwards every number above the horizon
  -- is committed and visible, or will never commit. New appends queue
  -- behind this wait, so it is short; the fence is retried at the next
  -- round, and appends go on in between.
  PERFORM set_config('lock_timeout', '2s', true);
  BEGIN
    LOCK TABLE %1$I.riverbus_event IN SHARE MODE;
  EXCEPTION WHEN lock_not_available THEN
    SELECT string_agg(CASE WHEN l.pid IS NULL THEN 'a prepared transaction' ELSE 'pid ' || l.pid END, ', ' ORDER BY l.pid)
      INTO v_holders FROM pg_locks l
      WHERE l.relation = %5$L::regclass AND l.granted AND l.mode = 'RowExclusiveLock';
    RAISE EXCEPTION 'riverbus_failover_fence: transactions appending to riverbus_event (%%) did not end within 2s; the fence, which waits for every number handed out before it, is retried at the next horizon round', coalesce(v_holders, 'none left')
      USING ERRCODE = 'lock_not_available',
        HINT = 'A transaction prepared before the failover (pg_prepared_xacts) holds it until COMMIT PREPARED or ROLLBACK PREPARED.';
  END;
  SELECT h.horizon, h.timeline, h.system_identifier INTO v_horizon, v_old_timeline, v_old_system
    FROM %1$I.riverbus_horizon h FOR UPDATE;
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
    FROM %1$I.riverbus_event_global_sequence q;
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
    FROM %1$I.riverbus_event e WHERE e.global_sequence > v_horizon
  )
  UPDATE %1$I.riverbus_event e SET global_sequence = m.new_sequence
  FROM moved m WHERE e.global_sequence = m.old_sequence;
  GET DIAGNOSTICS v_renumbered = ROW_COUNT;
  PERFORM set_config('riverbus.renumber', 'off', true);
  PERFORM setval(%3$L::regclass, v_far + v_renumbered, true);

  -- (v_horizon, v_far] holds no event and never will (the sequence is
  -- past it, and no writer that took a number in it is running): one
  -- proven gap, passed here. Gaps recorded above the old horizon were in
  -- it.
  DELETE FROM %1$I.riverbus_gap;
  UPDATE %1$I.riverbus_horizon SET horizon = v_far, timeline = v_timeline, system_identifier = v_system,
    updated_at = now();

  SELECT CASE WHEN q.is_called THEN q.last_value ELSE q.last_value - 1 END INTO v_job_last
    FROM %1$I.river_job_id_seq q;
  v_job_far := v_job_last + 4294967296;
  PERFORM setval(%4$L::regclass, v_job_far, true);

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
  UPDATE %1$I.river_job j SET
    state = CASE
      WHEN j.metadata ? 'cancel_attempted_at' THEN 'cancelled'
      WHEN j.attempt >= j.max_attempts THEN 'discarded'
      ELSE 'retryable' END::%1$I.river_job_state,
    finalized_at = CASE WHEN j.metadata ? 'cancel_attempted_at' OR j.attempt >= j.max_attempts THEN now() END,
    scheduled_at = CASE WHEN j.metadata ? 'cancel_attempted_at' OR j.attempt >= j.max_attempts THEN j.scheduled_at ELSE now() END,
    errors = coalesce(j.errors, '{}') || jsonb_build_object('at', now(), 'attempt', j.attempt,
      'error', format('riverbus: the database failed over (WAL timeline %%s to %%s) while this attempt ran; retried at once, as River''s rescuer would, because its completion may be lost with the old primary', v_old_timeline, v_timeline),
      'trace', '')
  WHERE j.state = 'running' AND j.kind IN (SELECT p.name FROM %1$I.riverbus_pool p);
  GET DIAGNOSTICS v_rescued = ROW_COUNT;

  INSERT INTO %1$I.riverbus_failover (old_timeline, new_timeline, old_system_identifier, new_system_identifier,
    horizon_before, horizon_after, sequence_before, events_renumbered, job_id_before, job_id_after, jobs_rescued)
  VALUES (v_old_timeline, v_timeline, v_old_system, v_system, v_horizon, v_far, v_last, v_renumbered,
    v_job_last, v_job_far, v_rescued)
  RETURNING * INTO v_row;
  PERFORM set_config('riverbus.timeline_fence', 'off', true);
  RETURN NEXT v_row;
END
$b$$f$, s, priv, format('%I.riverbus_event_global_sequence', s), format('%I.river_job_id_seq', s),
    format('%I.riverbus_event', s));
END
$current$;

REVOKE ALL ON FUNCTION riverbus_timeline_guard(), riverbus_failover_fence() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION riverbus_horizon_missing(), riverbus_horizon_try_lock(), riverbus_horizon_lock_holders(),
  riverbus_server_timeline(), riverbus_timeline_guard(), riverbus_failover_fence() TO riverbus_worker;

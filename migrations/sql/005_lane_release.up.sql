-- Lane hand-off a statement at a time.
--
-- Migration 003 released lanes from a row trigger: one plpgsql call, one
-- advisory lock, two probes and a one-row UPDATE for every job a statement
-- finished. River's completer finishes jobs in batches, so a batch paid
-- that per job, and took the lanes' bucket locks in row order, which can
-- close a cycle with a fan-out batch waiting for them in bucket order. The
-- ordered-vs-unordered bench spent most of its database time there.
--
-- (003's header says the fan-out takes bucket locks with try-locks only; it
-- now also waits for them, in bucket order and for at most 100 ms.)
--
-- Now a statement trigger sees every job the statement finished (transition
-- tables) and releases all their lanes at once: bucket locks taken shared
-- in bucket order, then one set-based UPDATE of each free lane's lowest
-- pending job. The rules are those of 003: a lane is free when none of its
-- jobs is in flight (available, running, retryable, scheduled) and, in a
-- pool that blocks on dead letters, none is a dead letter.

-- The in-flight test reads only in-flight jobs (the 003 index also holds
-- every pending job of the lane).
CREATE INDEX riverbus_job_lane_busy ON river_job (kind, (metadata->>'riverbus_lane'))
  WHERE metadata ? 'riverbus_lane' AND state IN ('available', 'running', 'retryable', 'scheduled');

-- Release the given lanes (pairs of pool and lane; repeats are fine): make
-- each free lane's lowest pending job available and wake River's producers
-- of their queues. Returns how many jobs it made available.
--
-- Both functions use generic plans: custom plans of these statements
-- (river_job has a dozen indexes, several partial or on expressions) took
-- some 4 ms to plan, on every call, against 0.1 ms to run.
CREATE FUNCTION riverbus_release_lanes(p_kinds text[], p_lanes text[]) RETURNS bigint
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  released bigint;
BEGIN
  -- Shared, in bucket order: a fan-out batch deciding pending-or-available
  -- for these lanes holds them exclusive, so this waits for it to commit.
  PERFORM count(pg_advisory_xact_lock_shared(c, b)) FROM (
    SELECT DISTINCT riverbus_lane_lock_class(k) AS c, riverbus_lane_bucket(l) AS b
    FROM unnest(p_kinds, p_lanes) AS u(k, l)
    ORDER BY 1, 2
  ) s;
  -- A new statement after the locks: it sees every batch committed before.
  WITH lanes AS (
    SELECT DISTINCT k AS kind, l AS lane FROM unnest(p_kinds, p_lanes) AS u(k, l)
  ),
  free AS (
    SELECT x.kind, x.lane FROM lanes x
    WHERE NOT EXISTS (
      SELECT 1 FROM river_job j
      WHERE j.kind = x.kind AND j.metadata ? 'riverbus_lane' AND j.metadata->>'riverbus_lane' = x.lane
        AND j.state IN ('available', 'running', 'retryable', 'scheduled'))
    AND NOT EXISTS (
      SELECT 1 FROM riverbus_dead_letter d JOIN riverbus_pool p ON p.name = d.pool
      WHERE d.pool = x.kind AND d.lane = x.lane AND p.on_dead_letter = 'block')
  ),
  next AS (
    SELECT (
      SELECT j.id FROM river_job j
      WHERE j.kind = f.kind AND j.metadata ? 'riverbus_lane' AND j.metadata->>'riverbus_lane' = f.lane
        AND j.state NOT IN ('cancelled', 'completed', 'discarded') AND j.state = 'pending'
      ORDER BY (CASE WHEN j.args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (j.args->>'global_sequence')::bigint END), j.id
      LIMIT 1
    ) AS id
    FROM free f
  ),
  made AS (
    UPDATE river_job j SET state = 'available', scheduled_at = now()
    WHERE j.id = ANY (ARRAY(SELECT id FROM next WHERE id IS NOT NULL)) AND j.state = 'pending'
    RETURNING j.queue
  ),
  queues AS (
    SELECT queue, count(*) AS n FROM made GROUP BY queue
  )
  -- River's own insert notification, so a worker fetches them at once.
  SELECT coalesce(sum(n), 0), count(pg_notify(current_schema() || '.river_insert', json_build_object('queue', queue)::text))
  INTO released FROM queues;
  RETURN released;
END
$$;

-- The one-lane form, kept for callers of 003: the id is gone, the result is
-- non-NULL when a job was released.
CREATE OR REPLACE FUNCTION riverbus_release_lane(p_kind text, p_lane text) RETURNS bigint
LANGUAGE sql AS $$ SELECT nullif(riverbus_release_lanes(ARRAY[p_kind], ARRAY[p_lane]), 0) $$;

CREATE FUNCTION riverbus_lanes_finished() RETURNS trigger
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
  PERFORM riverbus_release_lanes(array_agg(n.kind), array_agg(n.metadata->>'riverbus_lane'))
  FROM riverbus_job_new n JOIN riverbus_job_old o ON o.id = n.id
  WHERE n.metadata ? 'riverbus_lane'
    AND n.state IN ('cancelled', 'completed', 'discarded')
    AND o.state NOT IN ('cancelled', 'completed', 'discarded')
    -- A dead letter in a pool that blocks on dead letters keeps its lane.
    AND NOT (n.state = 'discarded' AND EXISTS (
      SELECT 1 FROM riverbus_pool p WHERE p.name = n.kind AND p.on_dead_letter = 'block'))
  HAVING count(*) > 0;
  RETURN NULL;
END
$$;

DROP TRIGGER riverbus_lane_finished ON river_job;
CREATE TRIGGER riverbus_lane_finished AFTER UPDATE ON river_job
  REFERENCING OLD TABLE AS riverbus_job_old NEW TABLE AS riverbus_job_new
  FOR EACH STATEMENT EXECUTE FUNCTION riverbus_lanes_finished();

-- As 004 does for every function of the schema: workers keep working where
-- an operator revoked EXECUTE from PUBLIC.
GRANT EXECUTE ON FUNCTION riverbus_release_lanes(text[], text[]), riverbus_lanes_finished() TO riverbus_worker;

-- River refuses job kinds of one character (its rule needs two), so a pool
-- so named could never be worked. NOT VALID: an existing one stays.
ALTER TABLE riverbus_pool DROP CONSTRAINT riverbus_pool_name_valid,
  ADD CONSTRAINT riverbus_pool_name_valid CHECK (name ~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{1,99}$') NOT VALID;

-- River's rescuer runs in whichever client is the leader, and discards a
-- stuck job (its worker died mid-job) whose kind that client has no worker
-- for, however many attempts it has left. riverbus processes each work some
-- pools, so a job of any other pool would become a dead letter the first
-- time its worker was killed, instead of being retried. This trigger turns
-- exactly that discard back into a retry: a riverbus pool's job, running,
-- discarded with attempts left, whose last error is the rescuer's. The
-- delay is River's default policy (attempt^4 seconds). Retried, it keeps its
-- lane in an ordered pool, as any retry does.
CREATE FUNCTION riverbus_rescue_retry() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.errors IS NOT NULL AND cardinality(NEW.errors) > 0
    AND NEW.errors[cardinality(NEW.errors)]->>'error' = 'Stuck job rescued by JobRescuer'
    AND EXISTS (SELECT 1 FROM riverbus_pool p WHERE p.name = NEW.kind)
  THEN
    NEW.state := 'retryable';
    NEW.finalized_at := NULL;
    NEW.scheduled_at := now() + make_interval(secs => least(power(greatest(NEW.attempt, 1), 4), 86400));
  END IF;
  RETURN NEW;
END
$$;

CREATE TRIGGER riverbus_rescue_retry BEFORE UPDATE OF state ON river_job
  FOR EACH ROW WHEN (OLD.state = 'running' AND NEW.state = 'discarded' AND NEW.attempt < NEW.max_attempts)
  EXECUTE FUNCTION riverbus_rescue_retry();

GRANT EXECUTE ON FUNCTION riverbus_rescue_retry() TO riverbus_worker;

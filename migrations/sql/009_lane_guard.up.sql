-- Ordered pools hold their rules whoever writes river_job: River UI's
-- retry, cancel and delete buttons, River's client API (JobRetry,
-- JobCancel, JobDelete) and plain SQL, not only riverbus's own code.
--
-- The rule (003, 005): at most one job per lane is out of `pending` and
-- unfinished, the lane's jobs are released lowest sequence first, and in a
-- pool that blocks on dead letters a dead letter holds its lane until it is
-- retried or purged. Before this migration only the fan-out, the lane
-- release and `riverbus dlq` kept it. River's JobRetry makes any job that is
-- not running `available`, so from River UI it could
--   - run a dead letter of a `release` pool next to the job its key had in
--     flight (two jobs of one key at once);
--   - run a dead letter of a `block` pool while its riverbus_dead_letter row
--     stayed behind and held the key for good: the key's later events stayed
--     `pending` forever;
--   - make a `pending` job available ahead of its key's earlier ones, or put
--     a completed or cancelled job back to work beside the key's job in
--     flight.
--
-- Now a row trigger sees a lane job come back to work (into available,
-- scheduled, retryable or running, from pending or a finished state) and
-- puts it back in line instead: `pending`. The statement trigger of 005 then
-- releases its lane as it releases a finished job's: under the lane's bucket
-- lock, the lowest pending job runs when the lane is free. And a dead letter
-- that anyone puts back to work is no longer a dead letter: the same
-- trigger deletes its riverbus_dead_letter row (a new one is written if it
-- is discarded again), so it no longer holds its lane. A job that leaves a
-- lane by cancel or delete already released it (003, 005).
--
-- What River UI's buttons do to an ordered pool is listed in
-- docs/operations.md ("Ordered pools"). Deleting a dead letter's river_job row does not purge
-- it: River's cleaner deletes discarded jobs the same way, and dead letters
-- must survive it; `riverbus dlq purge` gives one up.
--
-- Cost: riverbus_release_lanes moves pending jobs to available too, on the
-- hot path of every ordered hand-off. It marks its own UPDATE with a
-- transaction-local setting that the trigger's WHEN clause tests, so its
-- rows never call the trigger function; River's fetch, completer and
-- scheduler never move a job out of `pending` or a finished state, so they
-- do not match the WHEN clause at all. The mark is no security boundary:
-- any session can set it, but a role that may update river_job can break
-- its lanes anyway (only riverbus_worker may).
--
-- Lock order: the trigger deletes a dead letter while its job's row is
-- locked, as the dead-letter trigger writes one; `riverbus dlq` retry and
-- purge lock jobs before dead letters too. The lane release takes the
-- lanes' bucket locks shared, as before.

-- 005's riverbus_release_lanes, unchanged but for the mark around its
-- UPDATE: the rows it releases are the lanes' next jobs, chosen under the
-- lanes' locks, and need no guard.
CREATE OR REPLACE FUNCTION riverbus_release_lanes(p_kinds text[], p_lanes text[]) RETURNS bigint
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
  PERFORM set_config('riverbus.lane_release', 'off', true);
  RETURN released;
END
$$;

-- A job put back to work by anyone: its dead letter goes; a lane job waits
-- in line (pending) and the statement trigger below releases its lane.
CREATE FUNCTION riverbus_job_back_to_work() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.state = 'discarded' AND NEW.state NOT IN ('cancelled', 'completed', 'discarded') THEN
    DELETE FROM riverbus_dead_letter WHERE job_id = NEW.id;
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

-- A discarded lane job put back to work matches the first test, any other
-- lane job coming back to work the second.
CREATE TRIGGER riverbus_job_back_to_work BEFORE UPDATE OF state ON river_job
  FOR EACH ROW WHEN (
    (OLD.state = 'discarded' AND NEW.state NOT IN ('cancelled', 'completed', 'discarded'))
    OR (NEW.metadata ? 'riverbus_lane'
      AND NEW.state IN ('available', 'retryable', 'running', 'scheduled')
      AND OLD.state IN ('cancelled', 'completed', 'pending')
      AND current_setting('riverbus.lane_release', true) IS DISTINCT FROM 'on'))
  EXECUTE FUNCTION riverbus_job_back_to_work();

-- 005's statement trigger, which also releases the lanes of jobs the row
-- trigger above put back in line (into pending from another state).
CREATE OR REPLACE FUNCTION riverbus_lanes_finished() RETURNS trigger
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
  PERFORM riverbus_release_lanes(array_agg(n.kind), array_agg(n.metadata->>'riverbus_lane'))
  FROM riverbus_job_new n JOIN riverbus_job_old o ON o.id = n.id
  WHERE n.metadata ? 'riverbus_lane'
    AND ((n.state IN ('cancelled', 'completed', 'discarded')
      AND o.state NOT IN ('cancelled', 'completed', 'discarded')
      -- A dead letter in a pool that blocks on dead letters keeps its lane.
      AND NOT (n.state = 'discarded' AND EXISTS (
        SELECT 1 FROM riverbus_pool p WHERE p.name = n.kind AND p.on_dead_letter = 'block')))
    OR (n.state = 'pending' AND o.state <> 'pending'))
  HAVING count(*) > 0;
  RETURN NULL;
END
$$;

-- As 004 does for every function of the schema.
GRANT EXECUTE ON FUNCTION riverbus_job_back_to_work() TO riverbus_worker;

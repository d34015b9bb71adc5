-- Ordered pools' lanes (003, 005, 009, 012, 016): at most one job per lane
-- is out of `pending` and unfinished, and a lane's jobs are released lowest
-- sequence first. The triggers that call these are in triggers.sql.

-- The advisory lock class of a pool's lanes, from before 012 made the
-- bucket locks rows; kept for callers of that time.
CREATE OR REPLACE FUNCTION riverbus_lane_lock_class(pool text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$ SELECT hashtext('riverbus.lane:' || pool) $$;

-- A lane's bucket, one of 128. Qualified rather than pinned (017): it runs
-- for every lane of every hand-off, and a SQL function without a SET clause
-- can be inlined.
CREATE OR REPLACE FUNCTION riverbus_lane_bucket(lane text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT pg_catalog.hashtext(lane) OPERATOR(pg_catalog.&) 127 $$;

DO $current$
DECLARE
  s text := current_schema();
BEGIN
  -- Release the given lanes (pairs of pool and lane; repeats are fine):
  -- each free lane's lowest pending job becomes available and River's
  -- producers of its queue are woken. A lane is free when none of its jobs
  -- is in flight and, in a pool that blocks on dead letters, none is a dead
  -- letter. The bucket row locks are taken shared, in order: a fan-out batch
  -- deciding pending-or-available for these lanes holds them exclusive.
  -- Generic plans: custom plans of these statements took some 4 ms to plan,
  -- on every call, against 0.1 ms to run. The transaction-local mark
  -- riverbus.lane_release keeps riverbus_job_back_to_work off its rows.
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

  -- The one-lane form, kept for callers of 003: non-NULL when a job was
  -- released.
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_release_lane(p_kind text, p_lane text) RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $body$ SELECT nullif(%1$I.riverbus_release_lanes(ARRAY[p_kind], ARRAY[p_lane]), 0) $body$$f$, s);

  -- The statement trigger of river_job: releases the lanes of the jobs the
  -- statement finished, and of those riverbus_job_back_to_work put back in
  -- line (into pending from another state).
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

  -- The row trigger of deleted lane jobs.
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

  -- Every pool has a row per bucket in riverbus_lane_lock (012).
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

  -- A job put back to work by anyone (River UI, JobRetry, plain SQL): its
  -- dead letter goes; a lane job waits in line (pending), and the
  -- statement trigger releases its lane (009).
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
END
$current$;

GRANT EXECUTE ON FUNCTION riverbus_lane_lock_class(text), riverbus_lane_bucket(text),
  riverbus_release_lanes(text[], text[]), riverbus_release_lane(text, text), riverbus_lanes_finished(),
  riverbus_lane_finished(), riverbus_lane_lock_rows(), riverbus_job_back_to_work() TO riverbus_worker;
